"""The read-only ``/handoff/v1`` API over the snapshot store.

Added to the proxy's own application by :func:`add_inspect_routes`, each route wrapped
as the proxy's own are (not a sub-application with middleware, which would make aiohttp
run a middleware chain for every request). Routes: ``GET /sessions`` (``model``,
``since``, ``search``, ``workspace``, ``limit``), ``GET /sessions/{id}``,
``GET /sessions/{id}/turns/{n}``, ``GET /sessions/{id}/diff/{n}`` and
``GET /sessions/{id}/export?format=…&turn=N&sent=1``.
Answered to loopback clients, or to anyone sending ``x-handoff-key`` equal to a
non-empty ``access_key``. A client sees its own workspace, the one its API key names
(:mod:`proxy.server.workspace`), and its sub-workspaces: any other session answers 404 as a
missing one does, and ``workspace=`` only narrows within them. The admin view (every
workspace) is for a client that asks for it with ``x-handoff-admin: 1`` and presents
the access key. SQLite reads run in a worker thread, off the event loop. Errors use
OpenAI's shape.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from proxy.errors import Forbidden, InvalidRequest
from proxy.server.endpoint import expect_continue, holds_key
from proxy.server.workspace import home_workspace
from proxy.store.base import StoreReader
from proxy.store.durations import SQLITE_MAX, parse_count, parse_since
from proxy.store.errors import AmbiguousSession, StoreError, StoreMissingError
from proxy.store.export import BODY_FORMATS, FORMATS, export
from proxy.store.jsonout import dumps

READER = web.AppKey("reader", StoreReader)
ACCESS_KEY = web.AppKey("access_key", str)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Read = Callable[[web.Request, StoreReader], Awaitable[web.StreamResponse]]


def _error(status: int, message: str, type_: str, param: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": type_, "param": param, "code": None}}
    return web.json_response(body, status=status, dumps=lambda o: orjson.dumps(o).decode())


def _json(obj: Any) -> web.Response:
    return web.Response(body=dumps(obj), content_type="application/json")


def _is_loopback(remote: str | None) -> bool:
    try:
        return remote is not None and ipaddress.ip_address(remote).is_loopback
    except ValueError:
        return False


def _reader(request: web.Request) -> StoreReader:
    """The store as this client may see it: its own workspace, or all for the admin."""
    reader = request.app[READER]
    if not request.headers.get("x-handoff-admin"):
        return reader.within(home_workspace(request.headers))
    key = request.app[ACCESS_KEY]
    if key and holds_key(request, key.encode()):
        return reader
    raise Forbidden(
        "The admin view (x-handoff-admin) shows every workspace to the holder of handoff's "
        "access key: set server.access_key in its configuration and send it in x-handoff-key. "
        "On the machine that holds the store, `handoff sessions` reads every workspace "
        "without it. Without x-handoff-admin you see your own API key's workspace.",
        code="admin_view_unavailable",
    )


def _guarded(handler: Read) -> Handler:
    """Admit loopback clients or the key holder, to the sessions they may see; turn store
    errors into OpenAI errors."""

    async def guarded(request: web.Request) -> web.StreamResponse:
        key = request.app[ACCESS_KEY]
        if not (_is_loopback(request.remote) or (key and holds_key(request, key.encode()))):
            return _error(
                403,
                "the inspection API answers loopback clients or x-handoff-key holders",
                "permission_error",
            )
        try:
            return await handler(request, _reader(request))
        except AmbiguousSession as e:
            return _error(409, str(e), "invalid_request_error", "id")
        except StoreMissingError as e:
            return _error(503, str(e), "store_unavailable")
        except (StoreError, LookupError) as e:
            return _error(404, str(e), "not_found_error")
        except argparse.ArgumentTypeError as e:
            return _error(400, str(e), "invalid_request_error", "since")

    return guarded


def _int(request: web.Request, name: str, default: int | None = None) -> int | None:
    raw = request.match_info.get(name) or request.query.get(name)
    if raw is None:
        return default
    try:
        return parse_count(raw)
    except argparse.ArgumentTypeError:
        raise InvalidRequest(
            f"{name} must be an integer from 1 to {SQLITE_MAX}", param=name
        ) from None


async def _list(request: web.Request, reader: StoreReader) -> web.Response:
    q = request.query
    since = parse_since(q["since"]) if q.get("since") else None
    rows = await asyncio.to_thread(
        reader.list_sessions,
        model=q.get("model"),
        since=since,
        search=q.get("search"),
        workspace=q.get("workspace"),
        limit=_int(request, "limit") or 100,
    )
    return _json({"object": "list", "data": rows})


async def _session(request: web.Request, reader: StoreReader) -> web.Response:
    return _json(await asyncio.to_thread(reader.session, request.match_info["id"]))


async def _turn(request: web.Request, reader: StoreReader) -> web.Response:
    n = _int(request, "n")
    assert n is not None
    return _json(await asyncio.to_thread(reader.turn, request.match_info["id"], n))


async def _diff(request: web.Request, reader: StoreReader) -> web.Response:
    n = _int(request, "n")
    assert n is not None
    return _json(await asyncio.to_thread(reader.diff, request.match_info["id"], n))


async def _export(request: web.Request, reader: StoreReader) -> web.Response:
    fmt = request.query.get("format", "portable")
    if fmt not in FORMATS:
        return _error(
            400, f"format must be one of {', '.join(FORMATS)}", "invalid_request_error", "format"
        )
    sent = request.query.get("sent", "") in ("1", "true")
    if sent and fmt not in BODY_FORMATS:
        why = f"sent applies to {', '.join(BODY_FORMATS)}"
        return _error(400, why, "invalid_request_error", "sent")
    out = await asyncio.to_thread(
        export, reader, request.match_info["id"], fmt, _int(request, "turn"), sent=sent
    )
    if isinstance(out, str):
        return web.Response(text=out, content_type="text/markdown")
    return _json(out)


PREFIX = "/handoff/v1"


def add_inspect_routes(
    app: web.Application,
    reader: StoreReader,
    access_key: str,
    wrap: Callable[[Handler], Handler],
) -> None:
    """Serve the read-only inspection API under :data:`PREFIX` from ``app``; ``wrap`` is
    the application's own wrapper for every route (its log event and error answers)."""
    app[READER] = reader
    app[ACCESS_KEY] = access_key
    for path, handler in (
        ("/sessions", _list),
        ("/sessions/{id}", _session),
        ("/sessions/{id}/turns/{n}", _turn),
        ("/sessions/{id}/diff/{n}", _diff),
        ("/sessions/{id}/export", _export),
    ):
        app.router.add_get(PREFIX + path, wrap(_guarded(handler)), expect_handler=expect_continue)
