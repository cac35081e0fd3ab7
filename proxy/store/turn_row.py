"""The turn row: the messages it refers to, stored first, then its columns.

Only the messages after the turn it builds on are stored (``tail``), as is
(``indexer`` packs and indexes them later); its digests come from the writer's
:class:`~proxy.store.prefix.PrefixCache` when it remembers the leading messages,
so a turn costs a few inserts, following its new messages, not its whole history.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from proxy.decide.decision import Decision
from proxy.store import forwarded as fwd
from proxy.store.base import TurnRecord
from proxy.store.canonical import canonical, digest, extend_chain
from proxy.store.history import pack_ids
from proxy.store.known import Known
from proxy.store.messages import put_message
from proxy.store.placement import Place
from proxy.store.prefix import Clean, Hashed
from proxy.store.redact import redact_text

EMPTY_HISTORY = digest(b"")


@dataclass(slots=True)  # not frozen: built every turn (see TurnRecord)
class Parts:
    """What a turn row refers to, once stored: ids of its messages, its chain hashes."""

    tail: list[int]  # the history after the turn it builds on
    history_hash: bytes
    reply_id: int | None
    ext_hash: bytes | None  # history + reply
    forwarded: str | None
    params_id: int | None


def store_parts(
    db: sqlite3.Connection,
    turn: TurnRecord,
    hashed: Hashed,
    clean: Clean,
    base_len: int,
    known: Known,
) -> Parts:
    """Store the turn's new history, reply, forwarded messages and params, in that order.

    Appends the reply to ``hashed``, so ``cache.remember`` does not hash it again.
    """
    messages = turn.messages

    def body(i: int) -> Callable[[], bytes]:
        return lambda: hashed.bodies.get(i) or canonical(clean(messages[i]))

    tail = [
        put_message(db, body(i), hashed.digests[i], known) for i in range(base_len, len(messages))
    ]
    history_hash = hashed.hashes[-1] if hashed.hashes else EMPTY_HISTORY
    reply_id = ext_hash = None
    if turn.reply is not None:
        n = len(messages)
        hashed.append(turn.reply, clean)
        reply_id = put_message(db, hashed.bodies[n], hashed.digests[n], known)
        ext_hash = extend_chain(history_hash, hashed.digests[n]) if n == 0 else hashed.hashes[n]
    forwarded = _forwarded(db, turn, hashed, clean, known)
    params_id = None
    if turn.request_params:
        pbody = canonical(clean(turn.request_params))
        params_id = put_message(db, pbody, digest(pbody), known)
    return Parts(tail, history_hash, reply_id, ext_hash, forwarded, params_id)


def _forwarded(
    db: sqlite3.Connection, turn: TurnRecord, hashed: Hashed, clean: Clean, known: Known
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


def _json(obj: Any) -> str | None:
    """JSON as TEXT, so SQLite's json functions can read it."""
    return None if obj is None else orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS).decode()


def _decision(d: Decision | None) -> str | None:
    return None if d is None else _json(d.as_dict())


_INSERT_TURN = """INSERT INTO turns (session_id, seq, workspace, started_at, model, upstream,
    status, latency_ms, streamed, cancelled, base_turn, base_len, tail, n_messages,
    history_hash, ext_hash, reply_msg, params_msg, forwarded, decision, usage, finish_reason,
    error, raw_response, handoff_from, wire, choices)
    VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""


def insert_turn(
    db: sqlite3.Connection,
    turn: TurnRecord,
    place: Place,
    base: int | None,
    parts: Parts,
    clean: Clean,
    redact: bool,
) -> int:
    """Insert the turn row and return its id (``handoff_from`` only when the model changed)."""
    raw = turn.raw_response
    if raw is not None and redact:
        raw = redact_text(raw.decode("utf-8", "replace")).encode()
    prev = place.prev_model
    tid = db.execute(
        _INSERT_TURN,
        (
            place.session_id,
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
            place.base_len,
            pack_ids(parts.tail),
            len(turn.messages),
            parts.history_hash,
            parts.ext_hash,
            parts.reply_id,
            parts.params_id,
            parts.forwarded,
            _decision(turn.decision),
            _json(turn.usage),
            turn.finish_reason,
            _json(clean(turn.error)),
            raw,
            prev if prev and prev != turn.model else None,
            turn.wire,
            _json(clean(turn.choices)) if turn.choices else None,
        ),
    ).lastrowid
    assert tid is not None
    return tid
