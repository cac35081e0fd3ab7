"""What every route shares, as a wrapper around its handler: the canonical log event,
the browser guard (Host, Origin, preflights), the access key, and OpenAI-shaped answers
for errors.

A wrapper, not aiohttp middleware: once an application has any middleware, aiohttp
builds a chain for every request and adds one of its own (``_fix_request_current_app``),
two more coroutine frames that each await of the handler resumes through (several
times this wrapper's cost: bench/NOTES.md). So handoff registers no middleware at all,
and every route, the catch-all for unknown paths included (:func:`unmatched`), goes
through :meth:`Endpoints.wrap`.
"""

from __future__ import annotations

import hmac
import itertools
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import structlog
from aiohttp import web

from proxy.errors import ErrorShape, HandoffError, Unauthorized, error_body, openai_shape
from proxy.log import bind_request_id, log_request
from proxy.server.browser_guard import BrowserGuard
from proxy.server.request_log import REQUEST_FIELDS

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = structlog.get_logger("handoff")


def error_response(
    exc: Exception, fields: dict[str, Any], shape: ErrorShape = openai_shape
) -> web.Response | None:
    """Our own errors → bodies in the route's shape (OpenAI's unless the route speaks
    another wire format). Anything unexpected is logged with its traceback and answered
    500 in the same shape; the server keeps running. None: not ours to answer (a
    redirect, a client hang-up), so the caller re-raises."""
    if isinstance(exc, HandoffError):
        fields["error"] = exc.code or exc.type
        return web.json_response(shape(exc), status=exc.status)
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            return None
        allow = exc.headers.get("Allow")
        err = HandoffError(exc.reason)
        err.status, err.type = exc.status, "invalid_request_error"
        return web.json_response(
            shape(err),
            status=exc.status,
            headers={"Allow": allow} if allow is not None else None,
        )
    if isinstance(exc, (ConnectionResetError, aiohttp.ClientConnectionResetError)):
        return None
    log.exception("internal_error", exc_info=exc, **fields)
    return web.json_response(
        shape(HandoffError("handoff hit an internal error; see its log.")), status=500
    )


class Endpoints:
    """Wraps route handlers for one application. Request ids are a random per-app
    prefix and a counter (unique, and cheaper than uuid4) unless the client sent
    ``x-request-id``. ``guard`` defaults to loopback names and no web origins."""

    def __init__(self, access_key: str = "", guard: BrowserGuard | None = None) -> None:
        self._prefix = os.urandom(4).hex()
        self._counter = itertools.count()
        self._key = access_key.encode()
        self._guard = guard or BrowserGuard()

    def wrap(
        self, handler: Handler, *, open_to_all: bool = False, shape: ErrorShape = openai_shape
    ) -> Handler:
        """``handler`` with its canonical event and error answers (in ``shape``), behind
        the browser guard, which answers preflights itself (they carry no access key);
        unless ``open_to_all`` (``/healthz``), refused with 401 when an access key is set
        and not presented."""
        prefix, counter, guard = self._prefix, self._counter, self._guard
        key = b"" if open_to_all else self._key

        async def endpoint(request: web.Request) -> web.StreamResponse:
            request_id = request.headers.get("x-request-id") or f"{prefix}{next(counter):08x}"
            bind_request_id(request_id)
            fields: dict[str, Any] = {"method": request.method, "path": request.path}
            request[REQUEST_FIELDS] = fields
            t0 = time.perf_counter()
            status = 499
            try:
                try:
                    guard.check(request.headers)
                    resp: web.StreamResponse
                    if request.method == "OPTIONS":
                        resp = guard.preflight(request.headers)
                    elif key and not holds_key(request, key):
                        raise Unauthorized(
                            "This handoff requires its access key: send it in the x-handoff-key"
                            " header (your own Authorization header still goes to the upstream)."
                        )
                    else:
                        resp = await handler(request)
                except Exception as e:
                    answer = error_response(e, fields, shape)
                    if answer is None:
                        raise
                    resp = answer
                status = resp.status
                return resp
            finally:
                fields["status"] = status
                fields["latency_ms"] = round((time.perf_counter() - t0) * 1000, 2)
                log_request(request_id, fields)

        endpoint.__name__ = endpoint.__qualname__ = getattr(handler, "__name__", "endpoint")
        return endpoint


def holds_key(request: web.Request, key: bytes) -> bool:
    """Does the request present ``key`` in ``x-handoff-key`` (compared in constant time)?"""
    return hmac.compare_digest(request.headers.get("x-handoff-key", "").encode(), key)


async def unmatched(request: web.Request) -> web.StreamResponse:
    """The catch-all route: 405 (with ``Allow``) when another route serves this path
    with other methods, else 404. Only unknown paths come here, so asking every
    route again is cheap enough."""
    allowed: set[str] = set()
    this = request.match_info.route.resource
    for resource in request.app.router.resources():
        if resource is this:
            continue
        match, methods = await resource.resolve(request)
        if match is None:
            allowed |= methods
    if allowed:
        raise web.HTTPMethodNotAllowed(request.method, allowed)
    raise web.HTTPNotFound()


async def expect_continue(request: web.Request) -> web.StreamResponse | None:
    """Every route's ``Expect`` handler: ``100-continue`` gets its interim answer, as from
    aiohttp's own; any other expectation a 417 in OpenAI's shape (aiohttp's echoes the
    header back)."""
    if request.headers.get("Expect", "").lower() == "100-continue":
        if request.version == aiohttp.HttpVersion11:
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # the real response is still to come
        return None
    message = "handoff meets only Expect: 100-continue; send the request without this header."
    return web.json_response(
        error_body(message, "invalid_request_error", None, "expectation_failed"), status=417
    )


CATCH_ALL = "/{tail:.*}"
"""The path of the last route, served by :func:`unmatched`."""
