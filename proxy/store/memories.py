"""Session memories in SQLite: written in the writer's transactions, read per workspace.

The proxy's memories (its memory keeper, the MCP ``remember`` tool) are queued to the
store's writer and written in its transaction (:func:`write`): a commit of another
connection would make the writer forget what it knows (``known``). The CLI, with no
writer of its own, writes one in a short transaction (:func:`save`), as ``admin`` does.
Recall ranks a workspace's newest memories by how many of the asker's words they
contain (a workspace holds few, so this reads at most :data:`CANDIDATES` of them),
newest first among equals.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from pathlib import Path
from typing import Any

import orjson

from proxy.store.base import MemoryRecord
from proxy.store.db import connect
from proxy.store.known import Known
from proxy.store.redact import redact_json, redact_text

CANDIDATES = 50
"""A workspace's newest memories that recall ranks."""
RECENT_TURNS = 20_000
"""How far back (in turn rows) a turn's session is looked for."""


def save(path: str | Path, rec: MemoryRecord, *, redact: bool = False) -> None:
    """Write ``rec`` into the store at ``path``, replacing the session's last memory
    (with ``redact``, keys and tokens in it masked, as ``store.redact`` masks messages)."""
    if redact:
        rec = dataclasses.replace(rec, text=redact_text(rec.text), memory=redact_json(rec.memory))
    db = connect(path)
    try:
        insert(db, rec)
    finally:
        db.close()


def write(
    db: sqlite3.Connection, rec: MemoryRecord, known: Known, *, redact: bool = False
) -> str | None:
    """Write ``rec`` inside the writer's transaction and return its session; a memory of
    a turn (``of_turn``) goes to the session the writer threaded that turn into, None
    (nothing written) when that turn was never written."""
    sid = rec.session_id
    if not sid and rec.of_turn is not None:
        key = (rec.workspace, rec.of_turn)
        sid = known.turn_sessions.get(key) or session_of_turn(db, *key) or ""
    if not sid:
        return None
    rec = dataclasses.replace(rec, session_id=sid, of_turn=None)
    if redact:
        rec = dataclasses.replace(rec, text=redact_text(rec.text), memory=redact_json(rec.memory))
    insert(db, rec)
    return sid


def insert(db: sqlite3.Connection, rec: MemoryRecord) -> None:
    db.execute(
        "INSERT OR REPLACE INTO memories"
        " (session_id, workspace, updated_at, turns, source, reason, body, text)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            rec.session_id,
            rec.workspace,
            rec.updated_at,
            rec.turns,
            rec.source,
            rec.reason,
            orjson.dumps(dict(rec.memory)),
            rec.text,
        ),
    )


_COLS = "session_id, workspace, updated_at, turns, source, reason, body, text"


def _row(r: tuple[Any, ...]) -> dict[str, Any]:
    return {
        "session_id": r[0],
        "workspace": r[1],
        "updated_at": r[2],
        "turns": r[3],
        "source": r[4],
        "reason": r[5],
        "memory": orjson.loads(r[6]),
        "text": r[7],
    }


def of_session(db: sqlite3.Connection, sid: str) -> dict[str, Any] | None:
    row = db.execute(f"SELECT {_COLS} FROM memories WHERE session_id = ?", (sid,)).fetchone()
    return None if row is None else _row(row)


def ranked(
    db: sqlite3.Connection, workspace: str, terms: list[str], limit: int
) -> list[dict[str, Any]]:
    """``workspace``'s memories, most of the query's ``terms`` matched first, then newest."""
    rows = db.execute(
        f"SELECT {_COLS} FROM memories WHERE workspace = ? ORDER BY updated_at DESC LIMIT ?",
        (workspace, CANDIDATES),
    ).fetchall()
    words = {t.lower() for t in terms}
    found = [_row(r) for r in rows]

    def score(m: dict[str, Any]) -> int:
        text = m["text"].lower()
        return sum(t in text for t in words)

    order = sorted(range(len(found)), key=lambda i: (-score(found[i]), i))
    return [found[i] for i in order[:limit]]


def session_of_turn(db: sqlite3.Connection, workspace: str, started_at: float) -> str | None:
    """The session of the turn begun at ``started_at`` among the recent ones (when the
    writer's ``known`` has forgotten it)."""
    row = db.execute(
        "SELECT session_id FROM turns WHERE id > (SELECT COALESCE(MAX(id), 0) - ? FROM turns)"
        " AND workspace = ? AND started_at = ? ORDER BY id DESC LIMIT 1",
        (RECENT_TURNS, workspace, started_at),
    ).fetchone()
    return None if row is None else str(row[0])


REPLAY_CANDIDATES = 20


def recalled_openings(db: sqlite3.Connection, workspace: str, n_messages: int) -> list[str]:
    """Sessions of ``workspace`` whose first turn had ``n_messages`` messages and recalled
    (newest first): where a recalled message to replay may be."""
    rows = db.execute(
        "SELECT session_id FROM turns WHERE workspace = ? AND seq = 1 AND n_messages = ?"
        " AND CAST(decision AS TEXT) LIKE '%\"recall\"%' ORDER BY id DESC LIMIT ?",
        (workspace, n_messages, REPLAY_CANDIDATES),
    ).fetchall()
    return [str(r[0]) for r in rows]
