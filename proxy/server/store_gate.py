"""Holding new chat requests back while the snapshot store's writer is behind.

The store promises that a turn whose response completed is on disk within a second.
At any ordinary load its writer keeps up, but clients that saturate the proxy can
make turns faster than the writer, which then shares a core with them, writes
them: under ``make load`` (200 clients) it ended 8.7 s behind. The one way to keep
the promise then is to make turns more slowly. While the oldest turn not yet on
disk is older than ``max_lag_s``, a new chat request waits before it is planned
and sent upstream, until the writer has caught up. Throughput at saturation falls
to what the writer sustains; below it a request pays one clock read.

The store never breaks the proxy: a failing store is not waited for (its turns
are counted as failed, as before), and a writer that does not catch up within
``max_hold_s`` is taken for stalled: the requests waiting for it go on, and none
waits again until it has caught up.
"""

from __future__ import annotations

import asyncio
import time

import structlog

from proxy.store.base import Store

log = structlog.get_logger("handoff.store")

POLL_S = 0.01


class StoreGate:
    """Admits chat requests at the pace the store's writer keeps (see the module)."""

    def __init__(self, store: Store, max_lag_s: float, max_hold_s: float) -> None:
        self.store, self.max_lag_s, self.max_hold_s = store, max_lag_s, max_hold_s
        self.held = 0  # requests that waited
        self.held_s = 0.0  # and for how long, in all
        self.stalls = 0  # times the writer did not catch up within max_hold_s
        self._stalled = False
        self._caught_up: asyncio.Future[None] | None = None
        self._watcher: asyncio.Task[None] | None = None

    def must_wait(self) -> bool:
        """Whether a request must wait for the writer now: one clock read while it keeps up
        (a plain call, not a coroutine: this runs before every chat request)."""
        if self.store.lag_s() <= self.max_lag_s:
            self._stalled = False
            return False
        return not self._stalled and self.store.health().ok

    async def wait(self) -> float:
        """Wait until the writer has caught up, or ``max_hold_s``; the seconds waited."""
        if self._caught_up is None:
            self._caught_up = asyncio.get_running_loop().create_future()
            self._watcher = asyncio.create_task(self._watch(self._caught_up), name="store-gate")
            log.warning("store_writer_behind", lag_s=round(self.store.lag_s(), 3), holding=True)
        t0 = time.monotonic()
        try:
            await asyncio.wait_for(asyncio.shield(self._caught_up), self.max_hold_s)
        except TimeoutError:
            self._stall()
        waited = time.monotonic() - t0
        self.held += 1
        self.held_s += waited
        return waited

    def _stall(self) -> None:
        if not self._stalled:
            self._stalled = True
            self.stalls += 1
            log.error(
                "store_writer_stalled",
                lag_s=round(self.store.lag_s(), 3),
                max_hold_s=self.max_hold_s,
                holding=False,
            )
        self._open()

    async def _watch(self, caught_up: asyncio.Future[None]) -> None:
        try:
            while (
                not caught_up.done()
                and self.store.lag_s() > self.max_lag_s
                and self.store.health().ok
            ):
                await asyncio.sleep(POLL_S)
        finally:
            if self._caught_up is caught_up:
                self._open()

    def _open(self) -> None:
        """Let every waiting request go."""
        caught_up, self._caught_up = self._caught_up, None
        if caught_up is not None and not caught_up.done():
            caught_up.set_result(None)

    async def close(self) -> None:
        """Stop watching the writer, letting every waiting request go."""
        self._open()
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
