"""Session ids: unique, and ordered by creation so new rows land at the end of indexes."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from proxy.store.ids import ID_LENGTH, new_session_id
from tests.store.test_fixtures import turn, write


def test_ids_are_unique_fixed_length_hex_and_lead_with_their_creation_time() -> None:
    """Many ids made at once never repeat, and their time parts never go backwards."""
    ids = [new_session_id() for _ in range(50_000)]
    assert len(set(ids)) == len(ids)
    assert {len(i) for i in ids} == {ID_LENGTH}
    assert all(int(i, 16) >= 0 for i in ids)
    times = [int(i[:13], 16) for i in ids]
    assert times == sorted(times)
    assert abs(times[-1] / 1e6 - time.time()) < 60


def test_the_store_names_later_sessions_with_greater_ids(tmp_path: Path) -> None:
    """Sessions the writer creates one after another sort in that order."""
    write(
        tmp_path / "s.db", [turn([{"role": "user", "content": f"question {i}"}]) for i in range(5)]
    )
    db = sqlite3.connect(tmp_path / "s.db")
    rows = db.execute("SELECT id FROM sessions ORDER BY rowid").fetchall()
    db.close()
    ids = [r[0] for r in rows]
    assert len(ids) == 5 and ids == sorted(ids)
