"""Where token counts too large for the event loop run: two lanes of threads of their own.

A count whose bound is above :data:`LARGE_BOUND` takes the large lane, where each client
(its workspace) holds at most one thread at a time, until its count has finished, even
if it gave up waiting; every other offloaded count takes the ordinary lane. So a client's
many huge requests queue behind each other, not in front of other clients' ordinary
requests (nor of its own), and neither lane is the default executor that the store's
reads use.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")

LARGE_BOUND = 1_000_000
"""Counts bounded above this many tokens (about as many bytes of text) are large."""


@dataclass
class _Client:
    """One client's turn at the large lane, and how many of its counts want it."""

    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class CountLanes:
    """Runs counts off the event loop: ordinary ones at once, large ones a client at a time."""

    def __init__(self, workers: int | None = None, large_workers: int | None = None) -> None:
        cpus = len(os.sched_getaffinity(0))
        self._ordinary = ThreadPoolExecutor(
            workers or max(2, cpus), thread_name_prefix="handoff-count"
        )
        self._large = ThreadPoolExecutor(
            large_workers or max(1, cpus // 2), thread_name_prefix="handoff-count-large"
        )
        self._clients: dict[str, _Client] = {}

    async def run(self, count: Callable[[], T], *, bound: int, client: str) -> T:
        """``count()`` in a worker thread: the large lane when ``bound`` is large."""
        loop = asyncio.get_running_loop()
        if bound <= LARGE_BOUND:
            return await loop.run_in_executor(self._ordinary, count)
        entry = self._clients.setdefault(client, _Client())
        entry.users += 1
        try:
            await entry.turn.acquire()
        except BaseException:
            self._leave(client, entry, release=False)
            raise
        job = self._large.submit(count)
        job.add_done_callback(lambda _: _soon(loop, self._leave, client, entry))
        return await asyncio.wrap_future(job)  # cancelled: the job is dropped if not started

    def _leave(self, client: str, entry: _Client, release: bool = True) -> None:
        if release:
            entry.turn.release()
        entry.users -= 1
        if entry.users == 0 and self._clients.get(client) is entry:
            del self._clients[client]

    @property
    def waiting_clients(self) -> int:
        """Clients with a large count running or waiting (for tests and metrics)."""
        return len(self._clients)

    def close(self) -> None:
        """Drop queued counts and let running ones finish on their own (no waiting)."""
        self._ordinary.shutdown(wait=False, cancel_futures=True)
        self._large.shutdown(wait=False, cancel_futures=True)


def _soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: object) -> None:
    """Call ``fn`` on ``loop`` from a worker thread (a no-op once the loop has closed)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)
