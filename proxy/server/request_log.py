"""Where a request's canonical log event gathers its fields (see ``proxy.log``).

Apart from ``proxy.log`` so that processes without a web server (the store's
writer) can log without importing aiohttp.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

REQUEST_FIELDS = web.RequestKey("handoff_log_fields", dict[str, Any])
"""Where the route's wrapper (:mod:`proxy.server.endpoint`) keeps its canonical event's fields."""


def request_fields(request: web.Request) -> dict[str, Any]:
    """This request's canonical-event fields, to add to; a throwaway dict when no
    route wrapper runs (a handler called on its own)."""
    fields = request.get(REQUEST_FIELDS)
    return fields if fields is not None else {}
