"""Memories go through the store's writer: in its transaction, into the turn's session."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from proxy.store.base import MemoryRecord
from proxy.store.process import ProcessStore
from proxy.store.read import SqliteReader
from proxy.store.sqlite import SqliteStore
from tests.store.test_fixtures import conversation

KEY = "sk-" + "a1B2c3D4e5F6g7H8i9J0" * 2


def _memory(text: str, *, session_id: str = "", of_turn: float | None = None) -> MemoryRecord:
    return MemoryRecord("ws", session_id, {"goal": text}, text, "digest", "turns", 4, 1.0, of_turn)


@pytest.mark.parametrize("writer", ["thread", "process"])
async def test_a_memory_of_a_turn_lands_in_its_session_and_one_of_no_turn_nowhere(
    tmp_path: Path, writer: str
) -> None:
    """Queued right after its turn, a memory named by the turn's start is written into the
    session the writer threaded it into (redacted as messages are); one naming a turn that
    was never recorded writes nothing; the writer's commits are the only ones."""
    path = tmp_path / "h.db"
    store = (SqliteStore if writer == "thread" else ProcessStore)(path, redact=True)
    await store.start()
    turns = conversation(4)
    for t in turns:
        store.record(t)
    store.save_memory(_memory(f"goal with {KEY}", of_turn=turns[-1].started_at))
    store.save_memory(_memory("a turn never recorded", of_turn=12.5))
    await store.close()
    assert store.health().write_failures == 0 and store.health().lost_turns == 0
    reader = SqliteReader(path)
    (session,) = reader.list_sessions()
    mem = reader.memory(session["id"])
    assert mem is not None and mem["session_id"] == session["id"]
    assert KEY not in mem["text"] and "goal with" in mem["text"]
    assert KEY not in mem["memory"]["goal"]
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT count(*) FROM memories").fetchone()[0] == 1


async def test_a_memory_named_by_session_replaces_the_last(tmp_path: Path) -> None:
    """A memory that names its session (the MCP remember tool's) replaces that session's."""
    path = tmp_path / "h.db"
    store = ProcessStore(path)
    await store.start()
    for t in conversation(2):
        store.record(t)
    await store.close()
    (session,) = SqliteReader(path).list_sessions()
    await store.start()
    store.save_memory(_memory("first", session_id=session["id"]))
    store.save_memory(_memory("second", session_id=session["id"]))
    await store.close()
    mem = SqliteReader(path).memory(session["id"])
    assert mem is not None and mem["text"] == "second"
