"""Session ids that sort by creation time, so a new session's rows go at the end.

A random id put every new session's rows (its ``sessions`` key, its ``turns_session``
and ``session_messages`` entries) on a random page of each index: a batch of 50 new
sessions dirtied ~50 pages per index, and the commit copied each one to the WAL.
Ids that grow with time land on the last pages instead (as UUIDv7 does): with a
regenerate in every turn, the writer's CPU per turn fell from ~270 to ~230 µs and
its commits from ~30 to ~12 µs a turn (``/tmp`` replay of bench_store_writer's
``identical`` workload, measured side by side).

16 hex digits, as before: 44 bits of milliseconds since the epoch (good until the
year 2527), then 20 random bits. Within a process the ids strictly increase, so one
writer never repeats itself however many sessions a millisecond starts.
"""

from __future__ import annotations

import os
import threading
import time

_RANDOM_BITS = 20


class _SessionIds:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def __call__(self) -> str:
        ms = time.time_ns() // 1_000_000
        fresh = (ms << _RANDOM_BITS) | (int.from_bytes(os.urandom(3)) >> 4)
        with self._lock:
            self._last = n = max(fresh, self._last + 1)
        return f"{n:016x}"


new_session_id = _SessionIds()
"""A new session id: 16 hex digits, in creation order."""
