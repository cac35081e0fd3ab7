"""The store's writer gives way by the clock, and the indexer paces its batches."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.store import pacing
from proxy.store.base import TurnRecord
from proxy.store.db import connect
from proxy.store.indexer import PACE_ROWS, index_pending
from proxy.store.pacing import Pacer
from proxy.store.write import write_turn


class _Clock:
    """``time`` as the pacer sees it, moved by hand: a loaded machine that stalls this
    test for 10 ms must not decide whether the pacer gave way."""

    def __init__(self) -> None:
        self.now = 100.0

    def perf_counter(self) -> float:
        return self.now


def test_a_pacer_gives_way_once_its_interval_has_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(pacing, "time", clock)
    calls: list[float] = []
    pace = Pacer(0.01, lambda: calls.append(clock.now))
    clock.now += 0.009
    pace()
    assert calls == []  # not yet
    clock.now += 0.002
    pace()
    pace()  # the interval counts from the last time it gave way
    assert calls == [100.011]
    never = Pacer(None, lambda: calls.append(0.0))
    clock.now += 1.0
    never()
    assert len(calls) == 1


def test_indexing_gives_way_between_slices_and_indexes_everything(tmp_path: Path) -> None:
    db = connect(tmp_path / "h.db")
    msgs = [{"role": "user", "content": f"word{i} apple"} for i in range(100)]
    with db:
        write_turn(db, TurnRecord(workspace="w", started_at=1.0, model="m", upstream="u",
                                  messages=msgs), redact=False)  # fmt: skip
    calls = []
    with db:
        done = index_pending(db, 1000, lambda: calls.append(1))
    assert done == 100
    assert len(calls) >= 2 * (100 // PACE_ROWS)  # rows, then FTS inserts, in slices
    hits = db.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'apple'")
    assert hits.fetchone()[0] == 100
