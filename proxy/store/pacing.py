"""Giving way, every so often, during a long stretch of store work.

The store's writer does its work in bursts (a batch of turns, a batch of messages
to index) that each take up to several milliseconds. Whoever it shares a CPU with
waits through a burst: in the proxy's process, the event loop waits for the GIL;
next to the writer process, a client or a local model waits for the core, as the
scheduler lets a running task finish its slice before a woken one preempts it
(bench/NOTES.md has the replay that showed it). A :class:`Pacer` gives way every
``every_s`` of work, by the clock, since giving way itself costs CPU.

Giving way is for a writer that keeps up. One that has fallen behind must take its
fair share of the CPU instead, or it falls further behind for as long as the CPU
stays busy (saturating clients filled its queue until turns were dropped); so a
pacer can be told when to give way (``only_while``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def release_gil() -> None:
    """Let another thread of this process run (``time.sleep(0)`` drops the GIL)."""
    time.sleep(0)


yield_cpu: Callable[[], None] = getattr(os, "sched_yield", release_gil)
"""Let another runnable task on this CPU run first (a no-op when none waits)."""


class Pacer:
    """Calls ``give_way`` when ``every_s`` has passed since it last did (never if None),
    if ``only_while`` (when given) says so then."""

    def __init__(
        self,
        every_s: float | None,
        give_way: Callable[[], None],
        only_while: Callable[[], bool] | None = None,
    ) -> None:
        self.every_s, self.give_way, self.only_while = every_s, give_way, only_while
        self._since = time.perf_counter()

    def restart(self) -> None:
        """Count from now: the work before was not ours (or just gave way)."""
        self._since = time.perf_counter()

    def __call__(self) -> None:
        if self.every_s is None:
            return
        now = time.perf_counter()
        if now - self._since >= self.every_s:
            if self.only_while is None or self.only_while():
                self.give_way()
            self._since = time.perf_counter()
