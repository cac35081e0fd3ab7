"""Writes the CLI makes directly (not through the proxy's queue): import and prune.

Both open their own connection and take SQLite's write lock for one short
transaction, so they are safe while a proxy is writing the same file.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from proxy.decide.decision import Decision
from proxy.store import memories, portable, retention
from proxy.store.base import MemoryRecord, TurnRecord
from proxy.store.db import connect
from proxy.store.errors import InvalidDocument
from proxy.store.indexer import index_all
from proxy.store.write import write_turn


@contextmanager
def _transaction(path: str | Path) -> Iterator[sqlite3.Connection]:
    db = connect(path)
    try:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    finally:
        db.close()


def _decision(d: Mapping[str, Any] | None) -> Decision | None:
    if d is None:
        return None
    known = {k: d[k] for k in Decision.__dataclass_fields__ if k in d}
    known["policies"] = tuple(known.get("policies", ()))
    known["steps"] = tuple(known.get("steps", ()))
    return Decision(**known)


def import_document(path: str | Path, doc: Any, *, redact: bool = False) -> str:
    """Load a portable document into the store as a new session; return its id.

    Raises :class:`InvalidDocument` (naming the field) if the document is
    malformed or its conversation is already in the store.
    """
    doc = portable.validate(doc)
    sid = doc["conversation_id"]
    with _transaction(path) as db:
        if db.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone():
            raise InvalidDocument("conversation_id", f"{sid!r} is already in this store")
        hint = doc.get("name")
        if (
            hint
            and db.execute(
                "SELECT 1 FROM sessions WHERE workspace = ? AND hint = ?", (doc["workspace"], hint)
            ).fetchone()
        ):
            hint = None
        first = doc["turns"][0]["started_at"]
        db.execute(
            "INSERT INTO sessions (id, workspace, hint, title, created_at, updated_at)"
            " VALUES (?, ?, ?, ?, ?, ?)",
            (sid, doc["workspace"], hint, doc["title"], first, first),
        )
        _write_turns(db, doc, doc["turns"], sid, redact)
        mem = doc.get("memory")
        if mem is not None:
            fields = {k: mem[k] for k in portable.MEMORY_FIELDS}
            memories.insert(db, MemoryRecord(doc["workspace"], sid, **fields))
        index_all(db)
    return str(sid)


def append_turns(
    path: str | Path,
    doc: Any,
    sid: str,
    turns: Sequence[Mapping[str, Any]],
    *,
    redact: bool = False,
) -> int:
    """Add ``turns`` of a validated document to the end of session ``sid`` (a source
    that grew since it was imported); return how many."""
    with _transaction(path) as db:
        _write_turns(db, doc, turns, sid, redact)
        index_all(db)
    return len(turns)


def _write_turns(
    db: sqlite3.Connection,
    doc: Mapping[str, Any],
    turns: Sequence[Mapping[str, Any]],
    sid: str,
    redact: bool,
) -> None:
    for t in turns:
        history = portable.turn_history(doc, t)
        record = TurnRecord(
            workspace=doc["workspace"],
            started_at=t["started_at"],
            model=t["model"],
            upstream=t["upstream"],
            messages=history,
            status=t["status"],
            latency_ms=t["latency_ms"],
            streamed=t["streamed"],
            decision=_decision(t["decision"]),
            forwarded=portable.turn_forwarded(t, history),
            reply=t["reply"],
            usage=t["usage"],
            finish_reason=t["finish_reason"],
            error=t["error"],
            cancelled=t["cancelled"],
            request_params=t["request_params"],
        )
        tid = write_turn(db, record, redact=redact, into=sid)
        db.execute("UPDATE turns SET handoff_from = ? WHERE id = ?", (t["handoff_from"], tid))


def prune(path: str | Path, older_than_s: float, now: float | None = None) -> int:
    """Delete sessions idle for longer than ``older_than_s``; return how many."""
    with _transaction(path) as db:
        return retention.prune(db, older_than_s, now)
