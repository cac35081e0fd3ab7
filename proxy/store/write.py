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

Only the messages after T are stored, as is (``indexer`` packs and indexes them
later, in batches). The new turn builds on the turn that *holds* T's leading
messages (``_base``), so a regenerate of a regenerate points at the original and
reading any turn never walks through earlier retries. Its digests, and the chain
hashes the lookup needs, come from a :class:`~proxy.store.prefix.PrefixCache`
when the writer remembers the turn's leading messages, and the answers to most
queries (message ids, session heads, the best turn per chain hash) from its
:class:`~proxy.store.known.Known`; so a turn costs a few inserts, following its
new messages rather than its whole history or the number of earlier retries.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.store import forwarded as fwd
from proxy.store.base import Decision, TurnRecord
from proxy.store.canonical import canonical, digest, extend_chain
from proxy.store.history import extended_ids, pack_ids
from proxy.store.known import NONE, Head, Known, Match
from proxy.store.prefix import Clean, Hashed, PrefixCache, hash_all
from proxy.store.redact import redact_json, redact_text

EMPTY_HISTORY = digest(b"")


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


def put_message(
    db: sqlite3.Connection, body: bytes | Callable[[], bytes], h: bytes, known: Known | None = None
) -> int:
    """The id of the message with digest ``h``, inserting its canonical ``body`` if new.

    A new body is stored as is; the indexer packs and indexes it later. ``body``
    may be a callable, so a message the writer already knows is not serialised.
    """
    if known is not None:
        mid = known.message_ids.get(h)
        if mid is not None:
            return mid
    raw = body() if callable(body) else body
    cur = db.execute("INSERT OR IGNORE INTO messages (hash, body) VALUES (?, ?)", (h, raw))
    if cur.rowcount == 1:
        assert cur.lastrowid is not None
        mid = cur.lastrowid
        if known is not None:
            known.inserted += 1
    else:
        mid = int(db.execute("SELECT id FROM messages WHERE hash = ?", (h,)).fetchone()[0])
    if known is not None:
        known.message_ids[h] = mid
    return mid


_BEST_SQL = """WITH c(h, n) AS (VALUES {values})
    SELECT t.id, t.session_id, c.n, s.head_turn = t.id, t.via_history,
        t.reply_msg IS NOT NULL, t.model, t.seq, t.base_turn, t.base_len
    FROM (SELECT id, session_id, reply_msg, model, seq, base_turn, base_len,
                 history_hash AS h, 1 AS via_history
          FROM turns WHERE workspace = ? AND history_hash IN (SELECT h FROM c) {where}
          UNION ALL
          SELECT id, session_id, reply_msg, model, seq, base_turn, base_len,
                 ext_hash AS h, 0 AS via_history
          FROM turns WHERE workspace = ? AND ext_hash IN (SELECT h FROM c) {where}) t
    JOIN c ON c.h = t.h
    JOIN sessions s ON s.id = t.session_id
    ORDER BY c.n DESC, s.head_turn = t.id DESC, t.id DESC LIMIT 1"""


def _best(
    db: sqlite3.Connection,
    workspace: str,
    hashes: Sequence[bytes],
    lengths: Sequence[int],
    session_id: str | None,
    known: Known | None,
) -> Match | None:
    """The best stored turn matching one of ``lengths`` leading messages (longest first)."""
    where = "AND session_id = ?" if session_id else ""
    extra: tuple[str, ...] = (session_id,) if session_id else ()
    values: list[Any] = []
    for n in lengths:
        values += (hashes[n - 1], n)
    sql = _BEST_SQL.format(values=",".join(["(?, ?)"] * len(lengths)), where=where)
    row = db.execute(sql, (*values, workspace, *extra, workspace, *extra)).fetchone()
    m = None if row is None else Match(*row[:3], *map(bool, row[3:6]), *row[6:])
    if known is not None and session_id is None:  # a global answer: remember it
        for n in lengths:
            if m is not None and n <= m.length:
                break
            known.best[(workspace, hashes[n - 1])] = NONE
        if m is not None:
            known.best[(workspace, hashes[m.length - 1])] = m
            if m.is_head:
                known.heads[m.session_id] = Head(m.turn_id, m.seq, m.model)
    return m


def find_match(
    db: sqlite3.Connection,
    workspace: str,
    hashes: Sequence[bytes],
    session_id: str | None = None,
    known: Known | None = None,
) -> Match | None:
    """The stored turn whose history (or history + reply) is the longest prefix of ``hashes``.

    Ties go to a conversation's latest turn, then to the newest. The candidate
    lengths are looked up longest first, a few at a time (a continuation is found
    in the first lookup); what ``known`` remembers, or its filter rules out, is
    not asked of the database.
    """
    if known is not None:
        known.seen.load(db)
    end, size = len(hashes), 4
    while end > 0:
        start = max(0, end - size)
        hit: Match | None = None
        ask: list[int] = []
        for n in range(end, start, -1):
            m = known.lookup(workspace, hashes[n - 1]) if known is not None else None
            if m == NONE:
                continue
            if m is None and known is not None and not known.seen.may_have(hashes[n - 1]):
                continue  # no stored turn has this history
            if isinstance(m, Match) and session_id in (None, m.session_id):
                hit = m
                break
            ask.append(n)
        found = _best(db, workspace, hashes, ask, session_id, known) if ask else None
        if found is not None or hit is not None:
            return found or hit  # every length asked is longer than the hit
        end, size = start, min(size * 8, 400)
    return None


def squeeze(text: str, width: int = 80) -> str:
    """``" ".join(text.split())[:width]``, reading only as much of ``text`` as it needs.

    Squeezing a prefix of ``text`` gives a prefix of squeezing all of it (a word cut
    short is a prefix of the word), so a long enough one is the answer.
    """
    head = " ".join(text[: 4 * width].split())
    if len(head) >= width:
        return head[:width]
    return " ".join(text.split())[:width]


def _title(messages: Sequence[Mapping[str, Any]], clean: Clean) -> str:
    for m in messages:
        if m.get("role") == "user":
            return squeeze(message_text(clean(m)))
    return ""


@dataclass(frozen=True, slots=True)
class Place:
    """Where a turn goes: its session, seq, the turn it builds on, the previous model."""

    session_id: str
    seq: int
    match: Match | None
    prev_model: str | None
    new_session: bool = False
    hint: str | None = None


def _head(db: sqlite3.Connection, sid: str, known: Known | None) -> tuple[int, str | None]:
    """(seq of ``sid``'s head turn or 0, its model)."""
    head = known.heads.get(sid) if known is not None else None
    if head is not None:
        return head.seq, head.model
    row = db.execute(
        "SELECT t.id, t.seq, t.model FROM sessions s JOIN turns t ON t.id = s.head_turn"
        " WHERE s.id = ?",
        (sid,),
    ).fetchone()
    if row is None:
        return 0, None
    if known is not None:
        known.heads[sid] = Head(row[0], row[1], row[2])
    return int(row[1]), str(row[2])


def _hinted(db: sqlite3.Connection, workspace: str, hint: str, known: Known | None) -> str | None:
    sid = known.hints.get((workspace, hint)) if known is not None else None
    if sid is None:
        row = db.execute(
            "SELECT id FROM sessions WHERE workspace = ? AND hint = ?", (workspace, hint)
        ).fetchone()
        sid = None if row is None else str(row[0])
        if sid is not None and known is not None:
            known.hints[(workspace, hint)] = sid
    return sid


def _place(
    db: sqlite3.Connection,
    turn: TurnRecord,
    hashes: Sequence[bytes],
    into: str | None,
    known: Known | None,
) -> Place:
    """The threading rules (see the module docstring)."""
    sid = into
    if sid is None and turn.session_hint:
        sid = _hinted(db, turn.workspace, turn.session_hint, known)
        if sid is None:
            return Place(secrets.token_hex(8), 1, None, None, True, turn.session_hint)
    if sid is not None:  # an import, or a session the client named
        seq, model = _head(db, sid, known)
        return Place(sid, seq + 1, find_match(db, turn.workspace, hashes, sid, known), model)
    match = find_match(db, turn.workspace, hashes, known=known)
    if match is None:
        return Place(secrets.token_hex(8), 1, None, None, True)
    regenerate = match.via_history and match.length == len(hashes) and match.has_reply
    if match.is_head and not regenerate:
        return Place(match.session_id, match.seq + 1, match, match.model)
    return Place(secrets.token_hex(8), 1, match, match.model, True)


def _base(db: sqlite3.Connection, m: Match, known: Known | None) -> int:
    """The turn that holds ``m``'s first ``m.length`` messages itself, or builds on one that does.

    A regenerate of a regenerate builds on the original turn, so reading any turn
    walks at most one step per stored segment of its history, never every retry.
    """
    tid, base, base_len = m.turn_id, m.base_turn, m.base_len
    while base is not None and m.length <= base_len:
        tid = base
        got = known.bases.get(tid) if known is not None else None
        if got is None:
            row = db.execute(
                "SELECT base_turn, base_len FROM turns WHERE id = ?", (tid,)
            ).fetchone()
            got = (row[0], int(row[1]))
            if known is not None:
                known.bases[tid] = got
        base, base_len = got
    return tid


def _json(obj: Any) -> str | None:
    """JSON as TEXT, so SQLite's json functions can read it."""
    return None if obj is None else orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode()


def _decision(d: Decision | None) -> str | None:
    """The decision as JSON (by hand: ``dataclasses.asdict`` deep-copies)."""
    if d is None:
        return None
    return _json(
        {
            "action": d.action,
            "window": d.window,
            "budget": d.budget,
            "tokens": d.tokens,
            "forwarded_tokens": d.forwarded_tokens,
            "exact": d.exact,
            "policies": d.policies,
            "steps": d.steps,
        }
    )


def _forwarded(
    db: sqlite3.Connection, turn: TurnRecord, hashed: Hashed, clean: Clean, known: Known | None
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
        return put_message(db, body, digests[f], known)

    ops = fwd.map_inserts(fwd.encode(hashed.digests[: len(turn.messages)], digests), put)
    return orjson.dumps(ops).decode()


def _identity(obj: Any) -> Any:
    return obj


def _shared_ids(
    db: sqlite3.Connection, hashed: Hashed, base: int, n: int, known: Known | None
) -> list[int]:
    """The ids of the first ``n`` messages, which a fork shares with turn ``base``."""
    if known is not None:
        ids = [known.message_ids.get(d) for d in hashed.digests[:n]]
        if None not in ids:
            return ids  # type: ignore[return-value]
    return extended_ids(db, base)[:n]


_INSERT_TURN = """INSERT INTO turns (session_id, seq, workspace, started_at, model, upstream,
    status, latency_ms, streamed, cancelled, base_turn, base_len, tail, n_messages,
    history_hash, ext_hash, reply_msg, params_msg, forwarded, decision, usage, finish_reason,
    error, raw_response, handoff_from)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""


def write_turn(
    db: sqlite3.Connection,
    turn: TurnRecord,
    *,
    redact: bool,
    into: str | None = None,
    cache: PrefixCache | None = None,
    known: Known | None = None,
) -> int:
    """Insert ``turn`` (inside the caller's transaction) and return its id.

    ``into`` forces the session (imports); otherwise the threading rules decide.
    ``cache`` (the writer's) spares serialising the messages it remembers;
    ``known`` spares the queries whose answers the writer remembers.
    """
    clean: Clean = redact_json if redact else _identity
    messages = turn.messages
    hashed = cache.hash(turn.workspace, messages, clean) if cache else hash_all(messages, clean)
    hashes = hashed.hashes
    place = _place(db, turn, hashes, into, known)
    sid, match = place.session_id, place.match
    base_len = match.length if match else 0
    base = _base(db, match, known) if match else None

    def body(i: int) -> Callable[[], bytes]:
        return lambda: hashed.bodies.get(i) or canonical(clean(messages[i]))

    tail = [
        put_message(db, body(i), hashed.digests[i], known) for i in range(base_len, len(messages))
    ]
    history_hash = hashes[-1] if hashes else EMPTY_HISTORY
    reply_id = ext_hash = None
    if turn.reply is not None:
        n = len(messages)
        hashed.append(turn.reply, clean)  # so ``cache.remember`` does not hash it again
        reply_id = put_message(db, hashed.bodies[n], hashed.digests[n], known)
        ext_hash = extend_chain(history_hash, hashed.digests[n]) if n == 0 else hashed.hashes[n]
    forwarded = _forwarded(db, turn, hashed, clean, known)
    params_id = None
    if turn.request_params:
        pbody = canonical(clean(turn.request_params))
        params_id = put_message(db, pbody, digest(pbody), known)
    raw = turn.raw_response
    if raw is not None and redact:
        raw = redact_text(raw.decode("utf-8", "replace")).encode()
    prev = place.prev_model
    tid = db.execute(
        _INSERT_TURN,
        (
            sid,
            place.seq,
            turn.workspace,
            turn.started_at,
            turn.model,
            turn.upstream,
            turn.status,
            turn.latency_ms,
            turn.streamed,
            turn.cancelled,
            base,
            base_len,
            pack_ids(tail),
            len(messages),
            history_hash,
            ext_hash,
            reply_id,
            params_id,
            forwarded,
            _decision(turn.decision),
            _json(turn.usage),
            turn.finish_reason,
            _json(clean(turn.error)),
            raw,
            prev if prev and prev != turn.model else None,
        ),
    ).lastrowid
    assert tid is not None
    if place.new_session:
        db.execute(
            "INSERT INTO sessions (id, workspace, hint, title, created_at, updated_at,"
            " parent_session, parent_turn, head_turn) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                sid,
                turn.workspace,
                place.hint,
                _title(messages, clean),
                turn.started_at,
                turn.started_at,
                match.session_id if match else None,
                match.turn_id if match else None,
                tid,
            ),
        )
    else:
        db.execute(
            "UPDATE sessions SET head_turn = ?, updated_at = MAX(updated_at, ?) WHERE id = ?",
            (tid, turn.started_at, sid),
        )
    new_ids = [*tail, *([reply_id] if reply_id else [])]
    if match is not None and base is not None and match.session_id != sid:
        new_ids.extend(_shared_ids(db, hashed, base, base_len, known))  # a fork holds them too
    db.executemany(
        "INSERT OR IGNORE INTO session_messages VALUES (?, ?)", [(m, sid) for m in new_ids]
    )
    if known is not None:
        if place.hint is not None:
            known.hints[(turn.workspace, place.hint)] = sid
        mine = Match(
            tid,
            sid,
            len(messages),
            True,
            True,
            reply_id is not None,
            turn.model,
            place.seq,
            base,
            base_len,
        )
        ext = None
        if ext_hash is not None:
            ext = Match(
                tid,
                sid,
                len(messages) + 1,
                True,
                False,
                True,
                turn.model,
                place.seq,
                base,
                base_len,
            )
        known.wrote(turn.workspace, mine, history_hash, ext, ext_hash)
    if cache is not None and messages:
        cache.remember(sid, turn.workspace, messages, hashed, turn.reply, clean)
    return tid


def save_calibration(db: sqlite3.Connection, data: Mapping[str, Any]) -> None:
    db.executemany(
        "INSERT OR REPLACE INTO calibration (key, value) VALUES (?, ?)",
        [(str(k), orjson.dumps(v).decode()) for k, v in data.items()],
    )
