"""The SQLite store: threading, dedup, isolation, migrations, modes, retention."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from proxy.store import admin
from proxy.store.db import connect
from proxy.store.errors import AmbiguousSession, SessionNotFound, StoreMissingError
from proxy.store.migrations import MIGRATIONS, migrate
from proxy.store.read import SqliteReader
from tests.store.test_fixtures import compressed, conversation, turn, write

SYS = {"role": "system", "content": "You are terse."}
U1 = {"role": "user", "content": "hello"}
A1 = {"role": "assistant", "content": "hi"}
U2 = {"role": "user", "content": "how are you"}
A2 = {"role": "assistant", "content": "fine"}


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "handoff.db"


def test_continuation_threads_into_one_session(db_path: Path) -> None:
    """A request that resends the previous history and reply continues that session."""
    write(db_path, conversation(6))
    sessions = SqliteReader(db_path).list_sessions()
    assert [s["turns"] for s in sessions] == [6]


def test_continuation_when_client_reformats_the_reply(db_path: Path) -> None:
    """Extending the previous turn's history (not its exact reply) still continues."""
    edited_reply = {"role": "assistant", "content": "hi", "refusal": None}
    write(db_path, [turn([SYS, U1], A1), turn([SYS, U1, edited_reply, U2], A2)])
    assert [s["turns"] for s in SqliteReader(db_path).list_sessions()] == [2]


def test_edit_of_an_earlier_message_forks(db_path: Path) -> None:
    """Editing an earlier user message starts a new session linked to its parent."""
    write(
        db_path,
        [
            turn([SYS, U1], A1),
            turn([SYS, U1, A1, U2], A2),
            turn([SYS, U1, A1, U2, A2, {"role": "user", "content": "third"}], A1),
            turn([SYS, U1, A1, {"role": "user", "content": "edited"}], A2),
        ],
    )
    reader = SqliteReader(db_path)
    by_turns = {s["turns"]: s for s in reader.list_sessions()}
    assert set(by_turns) == {3, 1}
    fork, parent = by_turns[1], by_turns[3]
    assert fork["parent_session"] == parent["id"]
    full = reader.turn(fork["id"], 1)
    assert full["history"][-1] == {"role": "user", "content": "edited"}
    assert full["history"][:3] == [SYS, U1, A1]


def test_regenerate_forks_but_retry_after_error_continues(db_path: Path) -> None:
    """Resending the exact history after a reply forks; after an error it continues."""
    write(
        db_path,
        [
            turn([SYS, U1], None, status=500, error={"message": "boom"}),
            turn([SYS, U1], A1),
            turn([SYS, U1], {"role": "assistant", "content": "another take"}),
        ],
    )
    sessions = SqliteReader(db_path).list_sessions()
    assert sorted(s["turns"] for s in sessions) == [1, 2]


def test_explicit_session_id_wins(db_path: Path) -> None:
    """Turns naming a session go to it even when their messages are unrelated."""
    write(
        db_path,
        [
            turn([U1], A1, session_hint="proj"),
            turn([U2], A2, session_hint="proj"),
            turn([U2], A2),
        ],
    )
    reader = SqliteReader(db_path)
    sid = reader.resolve("proj")
    info = reader.session(sid)
    assert info["turns"] == 2 and info["name"] == "proj"
    assert reader.turn(sid, 2)["history"] == [U2]
    assert len(reader.list_sessions()) == 2


def test_workspaces_are_isolated(db_path: Path) -> None:
    """The same messages in two workspaces make two sessions, never one."""
    write(
        db_path,
        [
            turn([SYS, U1], A1, workspace="alice"),
            turn([SYS, U1, A1, U2], A2, workspace="bob"),
        ],
    )
    reader = SqliteReader(db_path)
    assert sorted(s["workspace"] for s in reader.list_sessions()) == ["alice", "bob"]
    assert [s["turns"] for s in reader.list_sessions(workspace="bob")] == [1]


def test_handoff_recorded_on_model_switch(db_path: Path) -> None:
    """A model switch within a session is a handoff from the old model to the new."""
    write(db_path, conversation(5, model_for=lambda i: "gpt-4o" if i < 3 else "llama-8k"))
    reader = SqliteReader(db_path)
    (s,) = reader.list_sessions()
    assert s["handoffs"] == 1 and s["models"] == ["gpt-4o", "llama-8k"]
    rows = reader.session(s["id"])["timeline"]
    assert [r["handoff"] for r in rows][2:4] == [None, {"from": "gpt-4o", "to": "llama-8k"}]


def test_history_reconstructed_exactly(db_path: Path) -> None:
    """Every turn's history, reply and forwarded list read back as recorded."""
    turns = conversation(7)
    last = turns[-1]
    turns.append(compressed([*map(dict, last.messages), dict(last.reply or {}), U2], A2))
    write(db_path, turns)
    reader = SqliteReader(db_path)
    (s,) = reader.list_sessions()
    for n, t in enumerate(turns, start=1):
        got = reader.turn(s["id"], n)
        assert got["history"] == list(t.messages)
        assert got["reply"] == t.reply
        assert got["forwarded"] == (None if t.forwarded is None else list(t.forwarded))


def test_store_size_grows_linearly(tmp_path: Path) -> None:
    """Storing 2N turns costs about twice N turns, not four times (messages stored once)."""
    sizes = []
    for n in (100, 200):
        path = tmp_path / f"{n}.db"
        write(path, conversation(n))
        db = connect(path)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        db.close()
        sizes.append(pages)
    assert sizes[1] < 2.6 * sizes[0]


def test_each_message_stored_once(db_path: Path) -> None:
    """The messages table holds each distinct message once across all turns."""
    turns = conversation(30)
    write(db_path, turns)
    distinct = {str(sorted(m.items())) for t in turns for m in [*t.messages, t.reply or {}]}
    db = connect(db_path)
    assert db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == len(distinct)


def test_migrations_from_empty_then_noop(tmp_path: Path) -> None:
    """An empty database gets every migration once; reopening applies none."""
    raw = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    assert migrate(raw) == [m.__name__ for m in MIGRATIONS]
    assert migrate(raw) == []
    tables = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"messages", "sessions", "turns", "calibration", "_migrations"} <= tables


def test_values_bind_as_sqlite_stores_them_with_the_fast_adapters(tmp_path: Path) -> None:
    """``db`` registers pass-through adapters for None, bytes and bools (the fast path
    of Python 3.11's binding); they must not change what is stored."""
    for kind in (type(None), bytes, bool):
        assert (kind, sqlite3.PrepareProtocol) in sqlite3.adapters
    db = connect(tmp_path / "s.db")
    db.execute("CREATE TABLE t (v)")
    values = [None, b"\x00\xff", b"", True, False, 7, 1.5, "s"]
    db.executemany("INSERT INTO t VALUES (?)", [(v,) for v in values])
    rows = db.execute("SELECT typeof(v), v FROM t ORDER BY rowid").fetchall()
    assert rows == [
        ("null", None),
        ("blob", b"\x00\xff"),
        ("blob", b""),
        ("integer", 1),
        ("integer", 0),
        ("integer", 7),
        ("real", 1.5),
        ("text", "s"),
    ]
    db.close()


def test_file_and_directory_modes(db_path: Path) -> None:
    """The store file is created 0600 and its directory 0700."""
    write(db_path, conversation(1))
    assert stat.S_IMODE(os.stat(db_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(db_path.parent).st_mode) == 0o700
    assert connect(db_path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reader_on_missing_store_raises(tmp_path: Path) -> None:
    """Reading a store that does not exist says so and creates nothing."""
    with pytest.raises(StoreMissingError):
        SqliteReader(tmp_path / "nope.db").list_sessions()
    assert not (tmp_path / "nope.db").exists()


def test_session_prefix_resolution(db_path: Path) -> None:
    """A unique prefix names a session; an unknown one raises SessionNotFound."""
    write(db_path, conversation(1))
    reader = SqliteReader(db_path)
    (s,) = reader.list_sessions()
    assert reader.resolve(s["id"][:3]) == s["id"]
    with pytest.raises(SessionNotFound):
        reader.resolve("zz")


def test_sessions_begun_together_are_told_apart_by_the_end_of_their_ids(db_path: Path) -> None:
    """Ids start with their creation time: a short start is ambiguous, a short end is not."""
    write(db_path, [turn([U1], A1), turn([U2], A2)])
    reader = SqliteReader(db_path)
    ids = [s["id"] for s in reader.list_sessions()]
    with pytest.raises(AmbiguousSession, match="give more of the id"):
        reader.resolve(ids[0][:6])
    assert [reader.resolve(i[-6:]) for i in ids] == ids


def test_ambiguous_prefix(db_path: Path) -> None:
    """An empty prefix matching several sessions is ambiguous."""
    write(db_path, [turn([U1], A1), turn([U2], A2)])
    with pytest.raises(AmbiguousSession):
        SqliteReader(db_path).resolve("")


def test_search_filters_by_content_and_model(db_path: Path) -> None:
    """Full-text search and the model filter select the matching sessions."""
    write(
        db_path,
        [
            turn([{"role": "user", "content": "tell me about kiwis"}], A1, model="a"),
            turn([{"role": "user", "content": "tell me about mangoes"}], A2, model="b"),
        ],
    )
    reader = SqliteReader(db_path)
    assert [s["title"] for s in reader.list_sessions(search="KIWIS")] == ["tell me about kiwis"]
    assert [s["title"] for s in reader.list_sessions(search="about mangoes")] == [
        "tell me about mangoes"
    ]
    assert reader.list_sessions(search="papaya") == []
    assert [s["models"] for s in reader.list_sessions(model="b")] == [["b"]]


def test_redaction_masks_secrets_before_writing(db_path: Path) -> None:
    """With redact on, a key in a message never reaches the file."""
    secret = "sk-proj-" + "a1B2" * 10
    write(db_path, [turn([{"role": "user", "content": f"my key is {secret}"}], A1)], redact=True)
    assert secret.encode() not in db_path.read_bytes()
    (s,) = SqliteReader(db_path).list_sessions()
    assert "[REDACTED]" in SqliteReader(db_path).turn(s["id"], 1)["history"][0]["content"]


def test_prune_keeps_forks_of_deleted_sessions_readable(db_path: Path) -> None:
    """Pruning a parent rewrites its fork's history and garbage-collects messages."""
    write(
        db_path,
        [
            turn([SYS, U1], A1, started_at=100.0),
            turn([SYS, U1, A1, U2], A2, started_at=101.0),
            turn([SYS, U1, A1, {"role": "user", "content": "edited"}], A2, started_at=5000.0),
        ],
    )
    assert admin.prune(db_path, older_than_s=1000, now=5500.0) == 1
    reader = SqliteReader(db_path)
    (fork,) = reader.list_sessions()
    assert reader.turn(fork["id"], 1)["history"] == [
        SYS,
        U1,
        A1,
        {"role": "user", "content": "edited"},
    ]
    db = connect(db_path)
    assert db.execute("SELECT COUNT(*) FROM messages").fetchone()[0] == 5  # U2 gone, A2 kept
    assert reader.list_sessions(search="how are you") == []


def test_size_cap_prunes_oldest_sessions(db_path: Path) -> None:
    """With max_bytes set, the oldest sessions go until the data fits."""
    words = " ".join(f"word{j}" for j in range(3000))
    turns = [
        turn([{"role": "user", "content": f"{i} {words}"}], A1, started_at=float(i))
        for i in range(40)
    ]
    write(db_path, turns, max_bytes=300_000)
    sessions = SqliteReader(db_path).list_sessions()
    assert 0 < len(sessions) < 40
    assert min(s["started_at"] for s in sessions) > 0.0


def test_calibration_round_trip(db_path: Path) -> None:
    """Saved calibration comes back from load_calibration."""
    store = write(db_path, [])
    store.open()  # a closed store can be reopened
    store.save_calibration({"gpt-4o": {"ratio": 1.02}})
    store.shutdown()
    assert store.load_calibration() == {"gpt-4o": {"ratio": 1.02}}
    assert SqliteReader(db_path).load_calibration() == {"gpt-4o": {"ratio": 1.02}}
