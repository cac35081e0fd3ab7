"""Run the app as ``handoff serve`` does: behind a
:class:`~proxy.server.connections.ConnectionGuard`
until SIGINT or SIGTERM, then drain in-flight requests for up to ``server.shutdown_grace_s``.

``web.run_app`` listens with aiohttp's own protocol factory and leaves no place for a
guard, so :func:`listening` does what it does with an ``AppRunner``: start the app, listen,
and clean up. It also logs a failed ``accept()`` (the process is out of descriptors) once a
minute: asyncio logs each with a traceback, up to ``backlog`` times a loop iteration.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
from collections.abc import AsyncIterator, Callable
from typing import Any

import structlog
from aiohttp import web

from proxy.config import ServerSettings
from proxy.log import Throttled
from proxy.server.connections import LOG_EVERY_S, ConnectionGuard, Limits

log = structlog.get_logger("handoff.serving")

DEFAULT_MAX_CONNECTIONS = 1024
RESERVED_FDS = 64
"""Descriptors kept for what is not a connection: the listener, the store, logs, pipes."""
BACKLOG = 128
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def serve(
    app: web.Application,
    server: ServerSettings,
    fd_limit: int,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM; ``fd_limit`` is the process's open-file limit, and
    ``ready`` is told the port once handoff listens on it. A port that cannot be
    listened on raises ``OSError`` before anything is served."""
    asyncio.run(_until_signal(app, server, connection_cap(server, fd_limit), ready))


async def _until_signal(
    app: web.Application, server: ServerSettings, cap: int, ready: Callable[[int], None] | None
) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # Windows: Ctrl-C interrupts instead
            loop.add_signal_handler(sig, stop.set)
    async with listening(app, server, max_connections=cap) as port:
        if ready is not None:
            ready(port)
        await stop.wait()


def connection_cap(server: ServerSettings, fd_limit: int) -> int:
    """``server.max_connections``, or unset, as many of the default as ``fd_limit`` holds
    with an upstream connection each; a warning says when either does not fit."""
    fits = max(1, (fd_limit - RESERVED_FDS) // 2) if fd_limit >= 0 else DEFAULT_MAX_CONNECTIONS
    if server.max_connections is not None:
        if server.max_connections > fits:
            log.warning(
                "max_connections_over_open_file_limit",
                max_connections=server.max_connections,
                open_file_limit=fd_limit,
                message="connections may fail to be accepted; raise ulimit -n",
            )
        return server.max_connections
    if fits < DEFAULT_MAX_CONNECTIONS:
        log.warning(
            "max_connections_lowered",
            max_connections=fits,
            open_file_limit=fd_limit,
            message="the open-file limit holds no more; raise ulimit -n for more",
        )
    return min(DEFAULT_MAX_CONNECTIONS, fits)


@contextlib.asynccontextmanager
async def listening(
    app: web.Application, server: ServerSettings, *, max_connections: int = DEFAULT_MAX_CONNECTIONS
) -> AsyncIterator[int]:
    """Serve ``app`` on ``server.host`` and ``server.port`` (0: a free one) while the block
    runs, and yield the port; on exit stop listening and drain as ``handoff serve`` does."""
    loop = asyncio.get_running_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(AcceptErrors(previous))
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=server.shutdown_grace_s)
    await runner.setup()
    guard: ConnectionGuard | None = None
    listener: asyncio.Server | None = None
    try:
        assert runner.server is not None
        limits = Limits(max_connections, server.header_timeout_s, server.body_timeout_s)
        guard = ConnectionGuard(runner.server, limits)
        listener = await loop.create_server(guard, server.host, server.port, backlog=BACKLOG)
        yield listener.sockets[0].getsockname()[1]
    finally:
        if listener is not None:
            listener.close()
        await runner.cleanup()
        if guard is not None:
            guard.close()
        loop.set_exception_handler(previous)


class AcceptErrors:
    """The loop's exception handler while serving: a failed ``accept()`` for want of
    descriptors or memory is logged once a minute, with a count; anything else goes to
    the handler before (asyncio's default if none)."""

    def __init__(self, previous: Any) -> None:
        self._previous = previous
        self._log = Throttled(log, "accept_failed", LOG_EVERY_S)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc = context.get("exception")
        if isinstance(exc, OSError) and exc.errno in _OUT_OF_RESOURCES and "socket" in context:
            self._log(
                error=f"{errno.errorcode.get(exc.errno or 0, exc.errno)}: {exc.strerror}",
                message="cannot accept new connections; raise ulimit -n or lower "
                "server.max_connections",
            )
        elif self._previous is not None:
            self._previous(loop, context)
        else:
            loop.default_exception_handler(context)
