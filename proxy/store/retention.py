"""Retention: delete old sessions, keep the file under a size cap, collect garbage.

Deleting a session must not break the ones forked from it (their first turn's
history starts in the parent), so those turns are first rewritten to hold their
whole history themselves. Messages no remaining turn refers to are then deleted,
from the FTS index too.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence

import orjson

from proxy.store.canonical import unpack_body
from proxy.store.history import history_ids, pack_ids, unpack_ids
from proxy.store.indexer import indexed_upto
from proxy.store.messages import message_text
from proxy.store.migrations import has_fts


def delete_sessions(db: sqlite3.Connection, session_ids: Sequence[str]) -> int:
    """Delete sessions and their turns (inside the caller's transaction); return the count."""
    doomed = set(session_ids)
    if not doomed:
        return 0
    marks = ",".join("?" * len(doomed))
    ids = list(doomed)
    dependants = db.execute(
        f"""SELECT t.id FROM turns t JOIN turns b ON b.id = t.base_turn
            WHERE b.session_id IN ({marks}) AND t.session_id NOT IN ({marks})""",
        ids + ids,
    ).fetchall()
    for (tid,) in dependants:
        full = history_ids(db, tid)
        db.execute(
            "UPDATE turns SET base_turn = NULL, base_len = 0, tail = ? WHERE id = ?",
            (pack_ids(full), tid),
        )
    db.execute(
        f"UPDATE sessions SET parent_session = NULL, parent_turn = NULL"
        f" WHERE parent_session IN ({marks})",
        ids,
    )
    db.execute(f"DELETE FROM turns WHERE session_id IN ({marks})", ids)
    db.execute(f"DELETE FROM session_messages WHERE session_id IN ({marks})", ids)
    db.execute(f"DELETE FROM sessions WHERE id IN ({marks})", ids)
    db.execute(f"DELETE FROM memories WHERE session_id IN ({marks})", ids)
    collect_garbage(db)
    return len(doomed)


def collect_garbage(db: sqlite3.Connection) -> int:
    """Delete messages that no turn refers to; return how many."""
    live: set[int] = set()
    for tail, reply, params, forwarded in db.execute(
        "SELECT tail, reply_msg, params_msg, forwarded FROM turns"
    ):
        live.update(unpack_ids(tail))
        live.update(x for x in (reply, params) if x is not None)
        if forwarded:
            live.update(op for op in orjson.loads(forwarded) if isinstance(op, int))
    fts = has_fts(db)
    upto = indexed_upto(db)
    dead = [
        (mid, body) for mid, body in db.execute("SELECT id, body FROM messages") if mid not in live
    ]
    for mid, stored in dead:
        body = unpack_body(stored)
        if fts and mid <= upto:  # a pending message is not in the index yet
            text = message_text(orjson.loads(body)) if body.startswith(b'{"') else ""
            if text:
                db.execute(
                    "INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', ?, ?)",
                    (mid, text),
                )
        db.execute("DELETE FROM messages WHERE id = ?", (mid,))
        db.execute("DELETE FROM session_messages WHERE message_id = ?", (mid,))
    # A new message must not reuse an id at or below the mark: it would never be indexed.
    db.execute(
        "UPDATE index_state SET upto = MIN(upto, (SELECT COALESCE(MAX(id), 0) FROM messages))"
    )
    return len(dead)


def prune(db: sqlite3.Connection, older_than_s: float, now: float | None = None) -> int:
    """Delete sessions whose last turn is older than ``older_than_s``; return the count."""
    cutoff = (time.time() if now is None else now) - older_than_s
    rows = db.execute("SELECT id FROM sessions WHERE updated_at < ?", (cutoff,)).fetchall()
    return delete_sessions(db, [r[0] for r in rows])


def used_bytes(db: sqlite3.Connection) -> int:
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    free = db.execute("PRAGMA freelist_count").fetchone()[0]
    size: int = db.execute("PRAGMA page_size").fetchone()[0]
    return int((pages - free) * size)


def enforce_max_bytes(db: sqlite3.Connection, max_bytes: int) -> int:
    """Delete the least recently updated sessions until the data fits ``max_bytes``.

    Sessions go in batches sized by the content they first stored, and the FTS
    index is then merged (its deletes are tombstones until it is).
    """
    deleted = 0
    while (over := (used := used_bytes(db)) - max_bytes) > 0:
        content = db.execute("SELECT COALESCE(SUM(length(body)), 0) FROM messages").fetchone()[0]
        target = over * min(1.0, content / used) if used else over  # indexes cost bytes too
        rows = db.execute(
            """SELECT s.id, (SELECT COALESCE(SUM(length(m.body)), 0) FROM session_messages sm
                            JOIN messages m ON m.id = sm.message_id WHERE sm.session_id = s.id)
               FROM sessions s ORDER BY s.updated_at, s.id"""
        ).fetchall()
        if not rows:
            break
        batch, freed = [], 0
        for sid, size in rows:
            batch.append(sid)
            freed += size
            if freed >= target:
                break
        db.execute("BEGIN IMMEDIATE")
        try:
            deleted += delete_sessions(db, batch)
            if has_fts(db):
                db.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    return deleted
