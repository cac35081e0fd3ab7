"""Writing one turn: store its messages, thread it into a conversation, insert it.

Runs on the writer thread (or the importer), inside the caller's transaction.
The steps live in their own modules: ``placement`` (the threading rules: which
session, what the turn builds on), ``turn_row`` (the messages the row refers to,
then the row) and ``messages`` (each message stored once, by digest). Here the
session is linked to the new turn, and what the writer learnt is remembered.

A fork also lists the messages it shares with its parent in ``session_messages``,
so search finds it.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.store import prefix
from proxy.store.base import TurnRecord
from proxy.store.history import extended_ids
from proxy.store.known import Known, Match
from proxy.store.messages import message_text, put_message, squeeze
from proxy.store.placement import Place, base_turn, find_match, place_turn
from proxy.store.prefix import Clean, Hashed, PrefixCache
from proxy.store.redact import masked_id, masked_name, redact_json
from proxy.store.titles import title_of
from proxy.store.turn_row import EMPTY_HISTORY, Parts, insert_turn, store_parts

__all__ = [
    "EMPTY_HISTORY",
    "find_match",
    "message_text",
    "put_message",
    "squeeze",
    "write_turn",
]


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
    ``known`` spares the queries whose answers the writer remembers. Without them
    every message is serialised and every answer asked of the database.
    """
    prefixes = prefix.forgetful() if cache is None else cache
    known = Known.forgetful() if known is None else known
    clean: Clean = redact_json if redact else _identity
    if redact:
        turn = _masked_names(turn)
    messages = turn.messages
    hashed = prefixes.hash(turn.workspace, messages, clean, turn.extends)
    place = place_turn(db, turn, hashed.hashes, into, known)
    m = place.match
    if m is not None and not m.via_history and m.length > 0:
        at = m.length - 1
        if _resent_otherwise(db, m.turn_id, hashed.digests[at]):
            # The reply came back re-serialised: build on the turn's history and keep the
            # message as the client resent it.
            place.match = dataclasses.replace(m, length=at)
    base = base_turn(db, place.match, known) if place.match else None
    parts = store_parts(db, turn, hashed, clean, place.base_len, known)
    tid = insert_turn(db, turn, place, base, parts, clean, redact)
    title = _title(messages, hashed.digests, clean, known) if place.new_session else ""
    _link_session(db, turn, place, tid, title)
    if place.side_call:
        db.execute("UPDATE turns SET side_call = 1 WHERE id = ?", (tid,))
    if turn.session_id and turn.session_id != place.session_id:
        db.execute(
            "INSERT OR IGNORE INTO session_aliases VALUES (?, ?)",
            (turn.session_id, place.session_id),
        )
    _list_messages(db, place, base, hashed, parts, known)
    _remember(known, turn, place, tid, base, parts)
    if messages:
        prefixes.remember(place.session_id, turn.workspace, messages, hashed, turn.reply, clean)
    return tid


def _resent_otherwise(db: sqlite3.Connection, turn_id: int, d: bytes) -> bool:
    """Whether turn ``turn_id``'s reply is stored by another digest than ``d``, the message
    the client resent for it (threading by :func:`~proxy.store.prefix.thread_digest`
    let the two differ in empty SDK fields)."""
    row = db.execute(
        "SELECT m.hash FROM turns t JOIN messages m ON m.id = t.reply_msg WHERE t.id = ?",
        (turn_id,),
    ).fetchone()
    return row is not None and bytes(row[0]) != d


def _identity(obj: Any) -> Any:
    return obj


def _masked_names(turn: TurnRecord) -> TurnRecord:
    """``turn`` without a secret in its model name, workspace or session hint (a key
    pasted in the wrong place): masked in the name, the others kept as digests."""
    hint = turn.session_hint
    names = (masked_name(turn.model), masked_id(turn.workspace), hint and masked_id(hint))
    if names == (turn.model, turn.workspace, hint):
        return turn
    return dataclasses.replace(turn, model=names[0], workspace=names[1], session_hint=names[2])


def _title(
    messages: Sequence[Mapping[str, Any]], digests: list[bytes], clean: Clean, known: Known
) -> str:
    """The first thing the person wrote (:mod:`proxy.store.titles`), remembered by the first
    user message's digest, as a regenerate or an edit starts a session with it again."""
    for i, m in enumerate(messages):
        if m.get("role") == "user":
            title = known.titles.get(digests[i])
            if title is None:
                title = title_of(clean(m))
                known.titles[digests[i]] = title
            if title:
                return title
    return ""


def _link_session(
    db: sqlite3.Connection, turn: TurnRecord, place: Place, tid: int, title: str
) -> None:
    """Make turn ``tid`` its session's head, creating the session (or fork) if new."""
    match = place.match
    if place.new_session:
        db.execute(
            "INSERT INTO sessions (id, workspace, hint, title, created_at, updated_at,"
            " parent_session, parent_turn, head_turn) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                place.session_id,
                turn.workspace,
                place.hint,
                title,
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
            (tid, turn.started_at, place.session_id),
        )


def _shared_ids(
    db: sqlite3.Connection, hashed: Hashed, base: int, n: int, known: Known
) -> list[int]:
    """The ids of the first ``n`` messages, which a fork shares with turn ``base``."""
    ids = [known.message_ids.get(d) for d in hashed.digests[:n]]
    if None not in ids:
        return ids  # type: ignore[return-value]
    return extended_ids(db, base)[:n]


def _list_messages(
    db: sqlite3.Connection,
    place: Place,
    base: int | None,
    hashed: Hashed,
    parts: Parts,
    known: Known,
) -> None:
    """List the turn's new messages under its session (a fork's shared ones too), for search."""
    sid, match = place.session_id, place.match
    new_ids = [*parts.tail, *([parts.reply_id] if parts.reply_id else [])]
    if match is not None and base is not None and match.session_id != sid:
        new_ids.extend(_shared_ids(db, hashed, base, place.base_len, known))
    db.executemany(
        "INSERT OR IGNORE INTO session_messages VALUES (?, ?)", [(m, sid) for m in new_ids]
    )


def _remember(
    known: Known, turn: TurnRecord, place: Place, tid: int, base: int | None, parts: Parts
) -> None:
    """Tell ``known`` about the new turn: its hint, and it as the best match for its hashes."""
    sid, n = place.session_id, len(turn.messages)
    if place.hint is not None:
        known.hints[(turn.workspace, place.hint)] = sid
    known.turn_sessions[(turn.workspace, turn.started_at)] = sid
    has_reply = parts.reply_id is not None
    at = (turn.model, place.seq, base, place.base_len)
    mine = Match(tid, sid, n, True, True, has_reply, *at)
    ext = None if parts.ext_hash is None else Match(tid, sid, n + 1, True, False, True, *at)
    known.wrote(turn.workspace, mine, parts.history_hash, ext, parts.ext_hash)
