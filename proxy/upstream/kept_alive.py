"""Which upstream requests went out on a kept-alive connection, for :func:`~proxy.upstream.
forward.send` to resend one the server had already closed (llama.cpp closes its
connection after a refused stream; the next request on it fails before any answer).

A connector that notes, per request, whether the connection it handed out had carried
a request before. It is told through a context variable, set in the very task that
sends: an aiohttp trace would say the same at half again the client CPU per request
(bench/bench_reuse_trace.py, bench/NOTES.md).
"""

from __future__ import annotations

import weakref
from contextvars import ContextVar
from typing import Any

import aiohttp

_REUSED: ContextVar[bool] = ContextVar("handoff_upstream_connection_reused", default=False)


def reused() -> bool:
    """Whether this task's last upstream connection had been used before."""
    return _REUSED.get()


def forget() -> None:
    """Before a request: nothing is known about its connection yet."""
    _REUSED.set(False)


class KeptAliveConnector(aiohttp.TCPConnector):
    """A TCPConnector that remembers the connections it handed out (weakly)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._used: weakref.WeakSet[object] = weakref.WeakSet()

    async def connect(self, req: Any, traces: Any, timeout: Any) -> aiohttp.connector.Connection:
        conn = await super().connect(req, traces, timeout)
        proto = conn.protocol
        if proto is not None:
            _REUSED.set(proto in self._used)
            self._used.add(proto)
        return conn
