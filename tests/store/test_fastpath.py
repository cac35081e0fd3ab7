"""The writer's fast paths: regenerate storms, deferred indexing, collapsed chains."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

from proxy.store import admin
from proxy.store.db import connect
from proxy.store.indexer import index_all, indexed_upto
from proxy.store.read import SqliteReader
from proxy.store.write import write_turn
from tests.store.test_fixtures import conversation, turn, write

SYS = {"role": "system", "content": "You are terse."}
U1 = {"role": "user", "content": "hello there"}
A1 = {"role": "assistant", "content": "hi"}


def _deepest_chain(path: Path) -> int:
    """The most base_turn steps any turn's history takes to resolve."""
    db = sqlite3.connect(path)
    bases = dict(db.execute("SELECT id, base_turn FROM turns").fetchall())
    depth = 0
    for tid in bases:
        n, b = 0, bases[tid]
        while b is not None:
            n, b = n + 1, bases[b]
        depth = max(depth, n)
    return depth


def test_regenerate_storm_threads_and_reads_back(tmp_path: Path) -> None:
    """2,000 identical requests: one conversation and 1,999 forks, each one step from its history."""
    path = tmp_path / "h.db"
    write(path, [turn([SYS, U1], A1, started_at=float(i)) for i in range(2000)])
    reader = SqliteReader(path)
    sessions = reader.list_sessions(limit=5000)
    assert len(sessions) == 2000
    assert sum(s["parent_session"] is None for s in sessions) == 1
    assert _deepest_chain(path) == 1
    for s in sessions[::97] + sessions[-1:]:
        full = reader.turn(s["id"], 1)
        assert (full["history"], full["reply"]) == ([SYS, U1], A1)
    assert len(reader.list_sessions(search="hello there", limit=5000)) == 2000


def test_continuing_a_regenerate_keeps_its_fork(tmp_path: Path) -> None:
    """After a storm, continuing the newest regenerate extends that fork, with the full history."""
    path = tmp_path / "h.db"
    u2 = {"role": "user", "content": "and then?"}
    turns = [turn([SYS, U1], A1, started_at=float(i)) for i in range(5)]
    write(path, [*turns, turn([SYS, U1, A1, u2], A1, started_at=10.0)])
    reader = SqliteReader(path)
    (two,) = [s for s in reader.list_sessions() if s["turns"] == 2]
    assert reader.turn(two["id"], 2)["history"] == [SYS, U1, A1, u2]
    assert _deepest_chain(path) <= 2


def test_search_finds_messages_before_they_are_indexed(tmp_path: Path) -> None:
    """A committed turn is searchable at once; indexing later moves the mark past it."""
    path = tmp_path / "h.db"
    db = connect(path)
    db.execute("BEGIN")
    write_turn(db, turn([{"role": "user", "content": "pending kiwis"}], A1), redact=False)
    db.execute("COMMIT")
    assert indexed_upto(db) == 0
    assert [s["title"] for s in SqliteReader(path).list_sessions(search="kiwis")] == [
        "pending kiwis"
    ]
    db.execute("BEGIN")
    assert index_all(db) == 2
    db.execute("COMMIT")
    assert indexed_upto(db) == 2
    hits = db.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'kiwis'").fetchall()
    assert hits == [(1,)]
    assert len(SqliteReader(path).list_sessions(search="kiwis")) == 1


def test_store_leaves_everything_indexed_and_packed(tmp_path: Path) -> None:
    """After shutdown no message is pending and long bodies are compressed."""
    path = tmp_path / "h.db"
    long = {"role": "user", "content": "kiwi " * 200}
    write(path, [*conversation(5), turn([long], A1)])
    db = connect(path)
    assert indexed_upto(db) == db.execute("SELECT MAX(id) FROM messages").fetchone()[0]
    assert not any(
        bytes(b).startswith(b'{"content":"kiwi kiwi')
        for (b,) in db.execute("SELECT body FROM messages")
    )


def test_pruning_the_newest_messages_lowers_the_index_mark(tmp_path: Path) -> None:
    """A pruned message's id reused by a new one is still indexed and searchable."""
    path = tmp_path / "h.db"
    write(path, [turn([{"role": "user", "content": "old apples"}], A1, started_at=100.0)])
    write(path, [turn([{"role": "user", "content": "doomed pears"}], A1, started_at=200.0)])
    assert admin.prune(path, older_than_s=50, now=240.0) == 1
    write(path, [turn([{"role": "user", "content": "fresh plums"}], A1, started_at=300.0)])
    reader = SqliteReader(path)
    assert [s["title"] for s in reader.list_sessions(search="plums")] == ["fresh plums"]
    db = connect(path)
    assert db.execute(
        "SELECT COUNT(*) FROM messages_fts WHERE messages_fts MATCH 'plums'"
    ).fetchone() == (1,)


def test_migration_collapses_old_regenerate_chains(tmp_path: Path) -> None:
    """A store whose regenerates built on each other is rewritten to build on the original."""
    path = tmp_path / "h.db"
    write(path, [turn([SYS, U1], A1, started_at=float(i)) for i in range(6)])
    db = connect(path)
    ids = [r[0] for r in db.execute("SELECT id FROM turns ORDER BY id")]
    for prev, tid in itertools.pairwise(ids):  # what older writers left
        db.execute("UPDATE turns SET base_turn = ? WHERE id = ?", (prev, tid))
    db.execute("DELETE FROM _migrations WHERE name = 'm005_collapse_bases'")
    db.close()
    assert _deepest_chain(path) == 5
    sessions = SqliteReader(path).list_sessions()  # opening applies the migration
    assert _deepest_chain(path) == 1
    reader = SqliteReader(path)
    for s in sessions:
        assert reader.turn(s["id"], 1)["history"] == [SYS, U1]
