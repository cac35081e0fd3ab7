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
   are separate sessions so every session is a straight line of turns. A fork
   also lists the messages it shares with its parent in ``session_messages``, so
   search finds it.

Only the messages after T are stored. Their digests, and the chain hashes the
lookup needs, come from a :class:`~proxy.store.prefix.PrefixCache` when the
writer remembers the turn's leading messages, so a turn's cost follows its new
messages rather than its whole history.
"""

from __future__ import annotations

import dataclasses
import secrets
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.store import forwarded as fwd
from proxy.store.base import TurnRecord
from proxy.store.canonical import canonical, digest, extend_chain, pack_body
from proxy.store.history import extended_ids, pack_ids
from proxy.store.prefix import Clean, Hashed, PrefixCache, hash_all
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


_MATCH_SQL = """SELECT t.id, t.session_id, t.via_history, s.head_turn = t.id,
    t.reply_msg IS NOT NULL, t.model, t.seq, t.h
    FROM (SELECT id, session_id, reply_msg, model, seq, history_hash AS h, 1 AS via_history
          FROM turns WHERE workspace = ? AND history_hash IN ({marks}) {where}
          UNION ALL
          SELECT id, session_id, reply_msg, model, seq, ext_hash AS h, 0 AS via_history
          FROM turns WHERE workspace = ? AND ext_hash IN ({marks}) {where}) t
    JOIN sessions s ON s.id = t.session_id"""


def find_match(
    db: sqlite3.Connection, workspace: str, hashes: Sequence[bytes], session_id: str | None = None
) -> Match | None:
    """The stored turn whose history (or history + reply) is the longest prefix of ``hashes``.

    Ties go to a conversation's latest turn, then to the newest. The candidate
    lengths are looked up longest first, a few at a time (a continuation is found
    in the first lookup), each an index search on ``history_hash``/``ext_hash``.
    """
    where = "AND session_id = ?" if session_id else ""
    extra: tuple[str, ...] = (session_id,) if session_id else ()
    end, size = len(hashes), 4
    while end > 0:
        start = max(0, end - size)
        chunk = list(hashes[start:end])
        sql = _MATCH_SQL.format(marks=",".join("?" * len(chunk)), where=where)
        rows = db.execute(sql, (workspace, *chunk, *extra, workspace, *chunk, *extra)).fetchall()
        if rows:
            length = {h: start + i + 1 for i, h in enumerate(chunk)}
            r = max(rows, key=lambda r: (length[r[7]], r[3], r[0]))
            return Match(r[0], r[1], length[r[7]], bool(r[3]), bool(r[2]), bool(r[4]), r[5], r[6])
        end, size = start, min(size * 8, 400)
    return None


def _title(messages: Sequence[Mapping[str, Any]], clean: Clean) -> str:
    for m in messages:
        if m.get("role") == "user":
            return " ".join(message_text(clean(m)).split())[:80]
    return ""


def _new_session(
    db: sqlite3.Connection,
    turn: TurnRecord,
    clean: Clean,
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
            _title(turn.messages, clean),
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
    clean: Clean,
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
            return _new_session(db, turn, clean, hint=turn.session_hint), None, None
        return row[0], find_match(db, turn.workspace, hashes, row[0]), row[1]
    match = find_match(db, turn.workspace, hashes)
    if match is None:
        return _new_session(db, turn, clean), None, None
    regenerate = match.via_history and match.length == len(hashes) and match.has_reply
    if match.is_head and not regenerate:
        return match.session_id, match, match.model
    return _new_session(db, turn, clean, parent=match), match, match.model


def _json(obj: Any) -> str | None:
    """JSON as TEXT, so SQLite's json functions can read it."""
    return None if obj is None else orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode()


def _forwarded(
    db: sqlite3.Connection, turn: TurnRecord, hashed: Hashed, clean: Clean, fts: bool
) -> str | None:
    """The forwarded list as ops over the history, storing the messages policies wrote.

    A forwarded message that is the very object of a history message (policies
    share them) reuses its digest instead of being serialised again.
    """
    sent = turn.forwarded
    if sent is None:
        return None
    position = {id(m): i for i, m in enumerate(turn.messages)}
    bodies: dict[int, bytes] = {}
    digests: list[bytes] = []
    for f, m in enumerate(sent):
        i = position.get(id(m))
        if i is not None:
            digests.append(hashed.digests[i])
        else:
            bodies[f] = canonical(clean(m))
            digests.append(digest(bodies[f]))

    def put(f: int) -> int:
        body = bodies.get(f) or canonical(clean(sent[f]))
        return put_message(db, body, digests[f], fts)

    ops = fwd.map_inserts(fwd.encode(hashed.digests, digests), put)
    return orjson.dumps(ops).decode()


def _identity(obj: Any) -> Any:
    return obj


def write_turn(
    db: sqlite3.Connection,
    turn: TurnRecord,
    *,
    redact: bool,
    fts: bool,
    into: str | None = None,
    cache: PrefixCache | None = None,
) -> int:
    """Insert ``turn`` (inside the caller's transaction) and return its id.

    ``into`` forces the session (imports); otherwise the threading rules decide.
    ``cache`` (the writer's) spares serialising the messages it remembers.
    """
    clean: Clean = redact_json if redact else _identity
    messages = turn.messages
    if cache is not None:
        hashed = cache.hash(turn.workspace, messages, clean)
    else:
        hashed = hash_all(messages, clean)
    hashes = hashed.hashes
    session_id, base, prev_model = _thread(db, turn, clean, hashes, into)
    base_len = base.length if base else 0
    tail = [
        put_message(
            db, hashed.bodies.get(i) or canonical(clean(messages[i])), hashed.digests[i], fts
        )
        for i in range(base_len, len(messages))
    ]
    history_hash = hashes[-1] if hashes else EMPTY_HISTORY
    reply_id = ext_hash = None
    if turn.reply is not None:
        rbody = canonical(clean(turn.reply))
        reply_id = put_message(db, rbody, digest(rbody), fts)
        ext_hash = extend_chain(history_hash, digest(rbody))
    forwarded = _forwarded(db, turn, hashed, clean, fts)
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
    if base is not None and base.session_id != session_id:  # a fork holds its parent's prefix
        new_ids.extend(extended_ids(db, base.turn_id)[:base_len])
    db.executemany(
        "INSERT OR IGNORE INTO session_messages VALUES (?, ?)", [(m, session_id) for m in new_ids]
    )
    assert tid is not None
    if cache is not None and messages:
        cache.remember(session_id, turn.workspace, messages, hashed, turn.reply, clean)
    return tid


def save_calibration(db: sqlite3.Connection, data: Mapping[str, Any]) -> None:
    db.executemany(
        "INSERT OR REPLACE INTO calibration (key, value) VALUES (?, ?)",
        [(str(k), orjson.dumps(v).decode()) for k, v in data.items()],
    )
