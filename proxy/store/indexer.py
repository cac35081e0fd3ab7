"""Deferred work on new messages: full-text indexing and compression, in batches.

A turn's writer stores a new message's canonical JSON packed. Indexing its text in
FTS5 costs far more per message when done one turn (one commit) at a time than in a
batch: FTS5 builds a segment per transaction. (Bodies stored unpacked by older
versions are packed here.)
So the writer calls :func:`index_pending` every few hundred new messages, every
couple of seconds, and before it stops; imports call it before they commit.

``index_state.upto`` is the highest message id already processed; every message
above it is *pending*. Readers search pending messages by scanning them (see
``read``), so search finds a message as soon as its turn is committed.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import orjson

from proxy.store.canonical import pack_body, unpack_body
from proxy.store.messages import message_text
from proxy.store.migrations import has_fts


def indexed_upto(db: sqlite3.Connection) -> int:
    """The highest message id whose text is indexed and body packed."""
    row = db.execute("SELECT upto FROM index_state").fetchone()
    return int(row[0]) if row else 0


PACE_ROWS = 32


def index_pending(
    db: sqlite3.Connection, limit: int = 2000, pace: Callable[[], None] | None = None
) -> int:
    """Index and pack up to ``limit`` pending messages (inside the caller's transaction).

    Returns how many were processed; call again while it returns ``limit``. ``pace``
    is called every ``PACE_ROWS`` messages (the writer gives way: ``pacing``).
    """
    upto = indexed_upto(db)
    rows = db.execute(
        "SELECT id, body FROM messages WHERE id > ? ORDER BY id LIMIT ?", (upto, limit)
    ).fetchall()
    if not rows:
        return 0
    fts = has_fts(db)
    texts: list[tuple[int, str]] = []
    packed: list[tuple[bytes, int]] = []
    for i, (mid, stored) in enumerate(rows):
        if pace is not None and i % PACE_ROWS == 0:
            pace()
        body = unpack_body(stored)
        if fts and body.startswith(b'{"'):
            text = message_text(orjson.loads(body))
            if text:
                texts.append((mid, text))
        small = pack_body(body)
        if small is not stored and small != stored:
            packed.append((small, mid))
    for at in range(0, len(texts), PACE_ROWS):  # (FTS5 builds one segment all the same)
        if pace is not None:
            pace()
        db.executemany(
            "INSERT INTO messages_fts (rowid, text) VALUES (?, ?)", texts[at : at + PACE_ROWS]
        )
    if packed:
        db.executemany("UPDATE messages SET body = ? WHERE id = ?", packed)
    db.execute("UPDATE index_state SET upto = ?", (rows[-1][0],))
    return len(rows)


def index_all(db: sqlite3.Connection) -> int:
    """Process every pending message; return how many."""
    total = 0
    while n := index_pending(db):
        total += n
    return total
