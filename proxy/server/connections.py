"""Limits on client connections that aiohttp leaves open: a cap on how many are open at
once, a deadline for each request's head, and a stall timeout while its body arrives; and
requests aiohttp's parser refuses, answered in OpenAI's error shape.

aiohttp itself closes only idle keep-alive connections (``keepalive_timeout``), so a client
that sends its headers or body slowly keeps its descriptor as long as it likes, and a few
hundred such clients take every descriptor the process may open. :class:`ConnectionGuard`
is the protocol factory ``loop.create_server`` calls for each accepted connection: it makes
a :class:`GuardedHandler` (aiohttp's own ``RequestHandler``, extended), or past the cap a
protocol that writes a canned 503 and closes at once. One timer sweeps the open connections.
Only the client's sending of its request is timed: a response, however long it streams, is not.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, cast

import structlog
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_parser import RawRequestMessage
from aiohttp.streams import StreamReader

from proxy.errors import TooManyConnections, UnsupportedEncoding, error_bytes
from proxy.log import Throttled
from proxy.server.unreadable import unreadable_request

log = structlog.get_logger("handoff.connections")

KEEPALIVE_S = 75.0
"""Idle keep-alive connections are closed after this long (``web.run_app``'s default)."""
LOG_EVERY_S = 60.0
"""Cap and timeout events are logged at most this often, with a count."""
END_OF_HEAD = b"\r\n\r\n"
HEAD_LATE, BODY_LATE = TIMEOUTS = ("server.header_timeout_s", "server.body_timeout_s")


@dataclass(frozen=True, slots=True)
class Limits:
    max_connections: int
    header_timeout_s: float
    body_timeout_s: float

    @property
    def tick_s(self) -> float:
        """How often the open connections are swept: a quarter of the shorter timeout,
        between 50 ms and 1 s."""
        return min(1.0, max(0.05, min(self.header_timeout_s, self.body_timeout_s) / 4))


class GuardedHandler(web.RequestHandler):
    """aiohttp's handler for one connection, noting for the guard's sweep since when the
    client has been sending a request head and how far its body has come; and answering
    requests the parser refuses in OpenAI's shape, without aiohttp's traceback in the log.

    A head counts as sent once ``\\r\\n\\r\\n`` arrives or aiohttp hands the request over, so
    a client that pipelines a whole request while the previous response streams is not timed."""

    __slots__ = (
        "_body",
        "_body_bytes",
        "_body_since",
        "_carry",
        "_guard",
        "_head_done",
        "_head_since",
    )

    def __init__(self, guard: ConnectionGuard, manager: web.Server, **kwargs: Any) -> None:
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._head_since: float | None = None  # a head has been arriving since then
        self._head_done = False  # a whole head arrived that aiohttp has not handed over yet
        self._carry = b""  # the head's last bytes so far, for an end split across reads
        self._body: StreamReader | None = None  # the body being received
        self._body_bytes = 0
        self._body_since = 0.0  # when the body last grew

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._head_since = self._guard.now()
        super().connection_made(transport)
        self._guard.opened(self)

    def connection_lost(self, exc: BaseException | None) -> None:
        self._guard.closed(self)
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        body = self._body
        in_body = self._head_done or (body is not None and not body.is_eof())
        super().data_received(data)
        if in_body or not data:  # (aiohttp calls it with b"" to parse what it holds)
            return
        if self._head_since is None:  # the first bytes of the next request
            self._head_since = self._guard.now()
            self._carry = b""
        if END_OF_HEAD in data or END_OF_HEAD in self._carry + data[:3]:
            self._head_since, self._head_done = None, True
        else:
            self._carry = data[-3:] if len(data) >= 3 else (self._carry + data)[-3:]

    def request_started(self, payload: StreamReader) -> None:
        """aiohttp has parsed a request's head and hands the request over."""
        self._head_since, self._head_done = None, False
        if payload.is_eof():
            self._body = None
        else:
            self._body, self._body_bytes = payload, payload.total_bytes
            self._body_since = self._guard.now()

    def overdue(self, now: float, limits: Limits) -> str | None:
        """Which timeout this connection has passed, if any."""
        if self._head_since is not None:
            late = now - self._head_since > limits.header_timeout_s
            return HEAD_LATE if late else None
        body = self._body
        if body is None:
            return None
        if body.is_eof():
            self._body = None
            return None
        if body.total_bytes != self._body_bytes:
            self._body_bytes, self._body_since = body.total_bytes, now
            return None
        return BODY_LATE if now - self._body_since > limits.body_timeout_s else None

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500 or not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        if request.writer.output_size > 0:  # as aiohttp does: too late for an answer
            raise ConnectionError("a response was already sent; the connection is dropped")
        err = unreadable_request(exc)
        log.info("unreadable_request", status=err.status, error=err.code)
        headers = (
            {"Accept-Encoding": "gzip, deflate"} if isinstance(err, UnsupportedEncoding) else {}
        )
        resp = web.Response(
            status=err.status,
            body=error_bytes(err),
            content_type="application/json",
            headers=headers,
        )
        resp.force_close()
        return resp

    def log_exception(self, *args: Any, **kw: Any) -> None:
        # A body that cannot be read (read_limited answered it 400) raises again when
        # aiohttp drains what is left of it: not worth a traceback each time.
        if not isinstance(kw.get("exc_info"), web.RequestPayloadError):
            super().log_exception(*args, **kw)


class _Refuse(asyncio.Protocol):
    """A connection over the cap: written a canned 503 and closed, never read."""

    def __init__(self, max_connections: int) -> None:
        err = TooManyConnections(
            f"handoff has {max_connections:,} connections open, its limit "
            "(server.max_connections); retry in a moment, or raise server.max_connections "
            "and the open-file limit (ulimit -n)."
        )
        body = error_bytes(err)
        head = (
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nRetry-After: 1\r\nConnection: close\r\n\r\n"
        )
        self._answer = head.encode() + body

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        cast(asyncio.Transport, transport).write(self._answer)
        transport.close()


class ConnectionGuard:
    """The protocol factory for ``loop.create_server``: a :class:`GuardedHandler` for each
    connection serving ``server`` (an ``AppRunner``'s), up to ``limits.max_connections``
    open at once. It wraps ``server.request_factory`` to learn when aiohttp has parsed a
    request's head; :meth:`close` stops its sweep."""

    def __init__(self, server: web.Server, limits: Limits) -> None:
        self._server, self._limits = server, limits
        self._loop = asyncio.get_running_loop()
        self._open: set[GuardedHandler] = set()
        self._count = 0  # counted when made: asyncio connects a burst of accepts later
        self._refuse = _Refuse(limits.max_connections)  # one for all: it keeps no state
        self._capped = Throttled(log, "connection_cap_reached", LOG_EVERY_S)
        self._slow = {why: Throttled(log, "slow_client_closed", LOG_EVERY_S) for why in TIMEOUTS}
        make_request = server.request_factory

        def request_factory(
            message: RawRequestMessage,
            payload: StreamReader,
            protocol: web.RequestHandler,
            writer: AbstractStreamWriter,
            task: asyncio.Task[None],
        ) -> web.BaseRequest:
            cast(GuardedHandler, protocol).request_started(payload)
            return make_request(message, payload, protocol, writer, task)

        server.request_factory = request_factory  # read by each handler as it is made
        self._timer = self._loop.call_later(limits.tick_s, self._sweep)

    def __call__(self) -> asyncio.Protocol:
        if self._count >= self._limits.max_connections:
            self._capped(
                max_connections=self._limits.max_connections,
                message="new connections are answered 503 until some close",
            )
            return self._refuse
        self._count += 1
        # The server's own handler arguments (the app's handler_args, such as handoff's
        # auto_decompress=False) as aiohttp's Server.__call__ passes them, then ours.
        kwargs = {**getattr(self._server, "_kwargs", {}), "keepalive_timeout": KEEPALIVE_S}
        kwargs["access_log"] = None
        return GuardedHandler(self, self._server, loop=self._loop, **kwargs)

    def now(self) -> float:
        return self._loop.time()

    def opened(self, conn: GuardedHandler) -> None:
        self._open.add(conn)

    def closed(self, conn: GuardedHandler) -> None:
        self._open.discard(conn)
        self._count -= 1

    def close(self) -> None:
        self._timer.cancel()

    def _sweep(self) -> None:
        now, limits = self._loop.time(), self._limits
        late = [(conn, why) for conn in self._open if (why := conn.overdue(now, limits))]
        for conn, why in late:
            conn.force_close()
            self._slow[why](
                timeout=why, message="closed a connection sending its request too slowly"
            )
        self._timer = self._loop.call_later(limits.tick_s, self._sweep)
