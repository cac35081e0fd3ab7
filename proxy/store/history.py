"""Rebuilding a turn's history from its incremental encoding (see ``migrations``)."""

from __future__ import annotations

import sqlite3
import struct
from collections.abc import Sequence

from proxy.store.canonical import unpack_body


def pack_ids(ids: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(ids)}q", *ids)


def unpack_ids(blob: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(blob) // 8}q", blob))


Memo = dict[int, tuple[list[int], int | None]]
"""turn id → (history message ids, reply message id)."""


def history_ids(db: sqlite3.Connection, turn_id: int, memo: Memo | None = None) -> list[int]:
    """The message ids of ``turn_id``'s full history, in order."""
    memo = {} if memo is None else memo
    pending: list[tuple[int, int | None, int, bytes, int | None]] = []
    tid: int | None = turn_id
    while tid is not None and tid not in memo:
        row = db.execute(
            "SELECT base_turn, base_len, tail, reply_msg FROM turns WHERE id = ?", (tid,)
        ).fetchone()
        if row is None:
            raise LookupError(f"turn {tid} is missing")
        pending.append((tid, row[0], row[1], row[2], row[3]))
        tid = row[0]
    for tid_, base, base_len, tail, reply in reversed(pending):
        prefix: list[int] = []
        if base is not None:
            ids, base_reply = memo[base]
            prefix = [*ids, base_reply] if base_reply is not None else ids
        memo[tid_] = (prefix[:base_len] + unpack_ids(tail), reply)
    return memo[turn_id][0]


def extended_ids(db: sqlite3.Connection, turn_id: int) -> list[int]:
    """The message ids of ``turn_id``'s history followed by its reply (if any)."""
    memo: Memo = {}
    ids = history_ids(db, turn_id, memo)
    reply = memo[turn_id][1]
    return [*ids, reply] if reply is not None else ids


def load_messages(db: sqlite3.Connection, ids: list[int]) -> dict[int, bytes]:
    """Message bodies by id (the canonical JSON bytes)."""
    out: dict[int, bytes] = {}
    unique = list(set(ids))
    for i in range(0, len(unique), 500):
        chunk = unique[i : i + 500]
        marks = ",".join("?" * len(chunk))
        rows = db.execute(f"SELECT id, body FROM messages WHERE id IN ({marks})", chunk)
        out.update((mid, unpack_body(body)) for mid, body in rows)
    return out
