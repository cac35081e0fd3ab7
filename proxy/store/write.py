"""Writing one turn: dedup its messages, thread it into a conversation, insert it.

Runs on the writer thread (or the importer), inside the caller's transaction.

Threading rules, in order:

1. ``session_hint`` names the conversation (per workspace); it wins.
2. Otherwise find the stored turn T, in this workspace, whose history or history
   + reply is the *longest* prefix of the new messages (one chain-hash lookup per
   candidate length, longest first).
3. If T is its conversation's latest turn, the request continues it. Only
   re-sending exactly T's history after T got a reply (a regenerate) forks.
4. If T is an older turn (the client edited or regenerated an earlier message),
   the request forks: a new session with ``parent_session``/``parent_turn``. Forks
   are separate sessions so every session is a straight line of turns.
"""

from __future__ import annotations

import dataclasses
import secrets
import sqlite3
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.store import forwarded as fwd
from proxy.store.base import TurnRecord
from proxy.store.canonical import canonical, chain, digest, extend_chain, pack_body
from proxy.store.redact import redact_json, redact_text

EMPTY_HISTORY = digest(b"")


@dataclass(frozen=True, slots=True)
class Match:
    turn_id: int
    session_id: str
    length: int  # how many leading messages of the request it covers
    is_head: bool
    via_history: bool
    has_reply: bool
    model: str
    seq: int


def pack_ids(ids: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(ids)}q", *ids)


def unpack_ids(blob: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(blob) // 8}q", blob))


def message_text(msg: Mapping[str, Any]) -> str:
    """The searchable text of a message: content parts, names, tool-call arguments."""
    parts: list[str] = []
    content = msg.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        parts.extend(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    for call in msg.get("tool_calls") or ():
        if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
            parts.append(str(call["function"].get("name", "")))
            parts.append(str(call["function"].get("arguments", "")))
    return "\n".join(p for p in parts if p)


def put_message(db: sqlite3.Connection, body: bytes, h: bytes, fts: bool) -> int:
    """The id of the message with canonical ``body``, inserting (and indexing) it if new."""
    row = db.execute("SELECT id FROM messages WHERE hash = ?", (h,)).fetchone()
    if row is not None:
        return int(row[0])
    mid = db.execute(
        "INSERT INTO messages (hash, body) VALUES (?, ?)", (h, pack_body(body))
    ).lastrowid
    assert mid is not None
    if fts:
        text = message_text(orjson.loads(body)) if body.startswith(b'{"') else ""
        if text:
            db.execute("INSERT INTO messages_fts (rowid, text) VALUES (?, ?)", (mid, text))
    return mid


def find_match(
    db: sqlite3.Connection, workspace: str, hashes: Sequence[bytes], session_id: str | None = None
) -> Match | None:
    """The stored turn whose history (or history + reply) is the longest prefix of ``hashes``."""
    where = "AND t.session_id = ?" if session_id else ""
    sql = f"""SELECT t.id, t.session_id, t.history_hash = ?, s.head_turn = t.id,
                     t.reply_msg IS NOT NULL, t.model, t.seq
              FROM turns t JOIN sessions s ON s.id = t.session_id
              WHERE t.workspace = ? AND (t.history_hash = ? OR t.ext_hash = ?) {where}
              ORDER BY s.head_turn = t.id DESC, t.id DESC LIMIT 1"""
    for k in range(len(hashes), 0, -1):
        h = hashes[k - 1]
        args: tuple[Any, ...] = (h, workspace, h, h) + ((session_id,) if session_id else ())
        row = db.execute(sql, args).fetchone()
        if row is not None:
            return Match(
                row[0], row[1], k, bool(row[3]), bool(row[2]), bool(row[4]), row[5], row[6]
            )
    return None


def _title(messages: Sequence[Mapping[str, Any]]) -> str:
    for m in messages:
        if m.get("role") == "user":
            return " ".join(message_text(m).split())[:80]
    return ""


def _new_session(
    db: sqlite3.Connection,
    turn: TurnRecord,
    messages: Sequence[Mapping[str, Any]],
    hint: str | None = None,
    parent: Match | None = None,
) -> str:
    sid = secrets.token_hex(8)
    db.execute(
        "INSERT INTO sessions (id, workspace, hint, title, created_at, updated_at,"
        " parent_session, parent_turn) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (
            sid,
            turn.workspace,
            hint,
            _title(messages),
            turn.started_at,
            turn.started_at,
            parent.session_id if parent else None,
            parent.turn_id if parent else None,
        ),
    )
    return sid


def _thread(
    db: sqlite3.Connection,
    turn: TurnRecord,
    messages: Sequence[Mapping[str, Any]],
    hashes: Sequence[bytes],
    into: str | None = None,
) -> tuple[str, Match | None, str | None]:
    """(session id, the turn this one builds on, the previous turn's model)."""
    if into is not None:  # an import: the session exists, the turns go into it in order
        row = db.execute(
            "SELECT t.model FROM sessions s LEFT JOIN turns t ON t.id = s.head_turn WHERE s.id = ?",
            (into,),
        ).fetchone()
        return into, find_match(db, turn.workspace, hashes, into), row[0] if row else None
    if turn.session_hint:
        row = db.execute(
            "SELECT s.id, t.model FROM sessions s LEFT JOIN turns t ON t.id = s.head_turn"
            " WHERE s.workspace = ? AND s.hint = ?",
            (turn.workspace, turn.session_hint),
        ).fetchone()
        if row is None:
            return _new_session(db, turn, messages, hint=turn.session_hint), None, None
        return row[0], find_match(db, turn.workspace, hashes, row[0]), row[1]
    match = find_match(db, turn.workspace, hashes)
    if match is None:
        return _new_session(db, turn, messages), None, None
    regenerate = match.via_history and match.length == len(hashes) and match.has_reply
    if match.is_head and not regenerate:
        return match.session_id, match, match.model
    return _new_session(db, turn, messages, parent=match), match, match.model


def _json(obj: Any) -> str | None:
    """JSON as TEXT, so SQLite's json functions can read it."""
    return None if obj is None else orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode()


def write_turn(
    db: sqlite3.Connection, turn: TurnRecord, *, redact: bool, fts: bool, into: str | None = None
) -> int:
    """Insert ``turn`` (inside the caller's transaction) and return its id.

    ``into`` forces the session (imports); otherwise the threading rules decide.
    """
    clean: Any = redact_json if redact else (lambda x: x)
    messages = [clean(m) for m in turn.messages]
    bodies = [canonical(m) for m in messages]
    digests = [digest(b) for b in bodies]
    hashes = chain(digests)
    session_id, base, prev_model = _thread(db, turn, messages, hashes, into)
    base_len = base.length if base else 0
    tail = [put_message(db, bodies[i], digests[i], fts) for i in range(base_len, len(bodies))]
    history_hash = hashes[-1] if hashes else EMPTY_HISTORY
    reply_id = ext_hash = None
    if turn.reply is not None:
        rbody = canonical(clean(turn.reply))
        reply_id = put_message(db, rbody, digest(rbody), fts)
        ext_hash = extend_chain(history_hash, digest(rbody))
    forwarded: str | None = None
    if turn.forwarded is not None:
        fbodies = [canonical(clean(m)) for m in turn.forwarded]
        fdigests = [digest(b) for b in fbodies]
        ops = fwd.encode(digests, fdigests)
        ops = fwd.map_inserts(ops, lambda i: put_message(db, fbodies[i], fdigests[i], fts))
        forwarded = orjson.dumps(ops).decode()
    params_id = None
    if turn.request_params:
        pbody = canonical(clean(turn.request_params))
        params_id = put_message(db, pbody, digest(pbody), False)
    decision = dataclasses.asdict(turn.decision) if turn.decision else None
    raw = turn.raw_response
    if raw is not None and redact:
        raw = redact_text(raw.decode("utf-8", "replace")).encode()
    seq = db.execute(
        "SELECT COALESCE(MAX(seq), 0) + 1 FROM turns WHERE session_id = ?", (session_id,)
    ).fetchone()[0]
    tid = db.execute(
        """INSERT INTO turns (session_id, seq, workspace, started_at, model, upstream, status,
           latency_ms, streamed, cancelled, base_turn, base_len, tail, n_messages, history_hash,
           ext_hash, reply_msg, params_msg, forwarded, decision, usage, finish_reason, error,
           raw_response, handoff_from)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
        (
            session_id,
            seq,
            turn.workspace,
            turn.started_at,
            turn.model,
            turn.upstream,
            turn.status,
            turn.latency_ms,
            turn.streamed,
            turn.cancelled,
            base.turn_id if base else None,
            base_len,
            pack_ids(tail),
            len(messages),
            history_hash,
            ext_hash,
            reply_id,
            params_id,
            forwarded,
            _json(decision),
            _json(turn.usage),
            turn.finish_reason,
            _json(clean(turn.error)),
            raw,
            prev_model if prev_model and prev_model != turn.model else None,
        ),
    ).lastrowid
    db.execute(
        "UPDATE sessions SET head_turn = ?, updated_at = MAX(updated_at, ?) WHERE id = ?",
        (tid, turn.started_at, session_id),
    )
    new_ids = [*tail, *([reply_id] if reply_id else [])]
    db.executemany(
        "INSERT OR IGNORE INTO session_messages VALUES (?, ?)", [(m, session_id) for m in new_ids]
    )
    assert tid is not None
    return tid


def save_calibration(db: sqlite3.Connection, data: Mapping[str, Any]) -> None:
    db.executemany(
        "INSERT OR REPLACE INTO calibration (key, value) VALUES (?, ?)",
        [(str(k), orjson.dumps(v).decode()) for k, v in data.items()],
    )
