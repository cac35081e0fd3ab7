"""Session ids: unique, in creation order, the same 16 hex digits as before."""

from __future__ import annotations

import re
import threading
import time

from proxy.store.ids import new_session_id


def test_ids_strictly_increase_within_a_millisecond_and_across_threads() -> None:
    """Many ids a millisecond, from several threads: all distinct, each thread's in order."""
    per_thread: list[list[str]] = []

    def make() -> None:
        per_thread.append([new_session_id() for _ in range(5000)])

    threads = [threading.Thread(target=make) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [i for ids in per_thread for i in ids]
    assert len(set(every)) == len(every) == 20_000
    for ids in per_thread:
        assert ids == sorted(ids)
    assert all(re.fullmatch(r"[0-9a-f]{16}", i) for i in every)


def test_ids_sort_by_creation_time() -> None:
    """An id made later sorts after, and its leading bits are the time it was made."""
    before = time.time_ns() // 1_000_000
    first = new_session_id()
    time.sleep(0.002)
    second = new_session_id()
    after = time.time_ns() // 1_000_000
    assert first < second
    assert before <= int(first, 16) >> 20 <= int(second, 16) >> 20 <= after
