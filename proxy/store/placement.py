"""Threading a turn: which conversation it continues or forks, and what it builds on.

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
5. Unless a session's latest turn explains the request as well (its history + reply
   covers all of T's but the last message): then the request continues that session.
   A rerun of a whole conversation forks once, at its first turn, and the fork goes on
   as one session instead of one fork per turn (:func:`_head_continued`).

The new turn builds on the turn that *holds* T's leading messages
(:func:`base_turn`), so a regenerate of a regenerate points at the original and
reading any turn never walks through earlier retries. Most answers (session
heads, hints, the best turn per chain hash, bases) come from the writer's
:class:`~proxy.store.known.Known` instead of the database.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.store.base import TurnRecord
from proxy.store.ids import new_session_id
from proxy.store.known import NONE, Head, Known, Match

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
    known: Known,
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
    if session_id is None:  # a global answer: remember it
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
    not asked of the database (none, without ``known``).
    """
    if known is None:
        known = Known.forgetful()
    known.seen.load(db)
    end, size = len(hashes), 4
    while end > 0:
        start = max(0, end - size)
        hit: Match | None = None
        ask: list[int] = []
        for n in range(end, start, -1):
            m = known.lookup(workspace, hashes[n - 1])
            if m == NONE:
                continue
            if m is None and not known.seen.may_have(hashes[n - 1]):
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


@dataclass(slots=True)  # not frozen: built every turn (see TurnRecord)
class Place:
    """Where a turn goes: its session, seq, the turn it builds on, the previous model."""

    session_id: str
    seq: int
    match: Match | None
    prev_model: str | None
    new_session: bool = False
    hint: str | None = None
    side_call: bool = False
    """A request the client made in a session it named that shares nothing with it and
    carries no tools: its title or compaction call, attached to the session it serves."""

    @property
    def base_len(self) -> int:
        """How many leading messages the turn shares with the one it builds on."""
        return self.match.length if self.match else 0


def _head(db: sqlite3.Connection, sid: str, known: Known) -> tuple[int, str | None]:
    """(seq of ``sid``'s head turn or 0, its model)."""
    head = known.heads.get(sid)
    if head is not None:
        return head.seq, head.model
    row = db.execute(
        "SELECT t.id, t.seq, t.model FROM sessions s JOIN turns t ON t.id = s.head_turn"
        " WHERE s.id = ?",
        (sid,),
    ).fetchone()
    if row is None:
        return 0, None
    known.heads[sid] = Head(row[0], row[1], row[2])
    return int(row[1]), str(row[2])


def _hinted(db: sqlite3.Connection, workspace: str, hint: str, known: Known) -> str | None:
    sid = known.hints.get((workspace, hint))
    if sid is None:
        row = (
            db.execute(
                "SELECT id FROM sessions WHERE workspace = ? AND hint = ?", (workspace, hint)
            ).fetchone()
            or db.execute(  # the full id handoff's x-handoff-session header gave
                "SELECT id FROM sessions WHERE workspace = ? AND id = ?", (workspace, hint)
            ).fetchone()
        )
        sid = None if row is None else str(row[0])
        if sid is not None:
            known.hints[(workspace, hint)] = sid
    return sid


def _fresh_id(db: sqlite3.Connection, turn: TurnRecord) -> str:
    """The id for a new session: the one the proxy announced, unless a session has it."""
    sid = turn.session_id
    if sid and db.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone() is None:
        return sid
    return new_session_id()


def place_turn(
    db: sqlite3.Connection,
    turn: TurnRecord,
    hashes: Sequence[bytes],
    into: str | None,
    known: Known,
) -> Place:
    """The threading rules (see the module docstring); ``into`` forces the session."""
    sid = into
    if sid is None and turn.session_hint:
        sid = _hinted(db, turn.workspace, turn.session_hint, known)
        if sid is None:
            return Place(_fresh_id(db, turn), 1, None, None, True, turn.session_hint)
    if sid is not None:  # an import, or a session the client named
        seq, model = _head(db, sid, known)
        match = find_match(db, turn.workspace, hashes, sid, known)
        side = into is None and seq > 0 and match is None and not turn.request_params.get("tools")
        return Place(sid, seq + 1, match, model, side_call=side)
    match = find_match(db, turn.workspace, hashes, known=known)
    if match is None:
        return Place(_fresh_id(db, turn), 1, None, None, True)
    regenerate = match.via_history and match.length == len(hashes) and match.has_reply
    if match.is_head and not regenerate:
        return Place(match.session_id, match.seq + 1, match, match.model)
    head = _head_continued(db, turn.workspace, hashes, match.length, known)
    if head is not None:
        return Place(head.session_id, head.seq + 1, head, head.model)
    return Place(_fresh_id(db, turn), 1, match, match.model, True)


_HEADS_ONLY = (
    "AND EXISTS (SELECT 1 FROM sessions h WHERE h.id = turns.session_id AND h.head_turn = turns.id)"
)
"""Only a session's latest turn: looked up by the candidate's session (its primary key), so
the cost follows the few turns the hash index found, never the workspace's sessions."""


def _head_continued(
    db: sqlite3.Connection,
    workspace: str,
    hashes: Sequence[bytes],
    fork_at: int,
    known: Known,
) -> Match | None:
    """A session's latest turn whose history (+ reply) is a strict prefix of ``hashes`` at
    least ``fork_at - 1`` long: the fork the request goes on with. Asked only when the
    request would fork; one query, against session heads only, and none when ``known``'s
    filter says no stored turn has either length's chain hash (a resent first request)."""
    lengths = [
        n
        for n in (fork_at, fork_at - 1)
        if 0 < n < len(hashes) and known.seen.may_have(hashes[n - 1])
    ]
    if not lengths:
        return None
    values: list[Any] = []
    for n in lengths:
        values += (hashes[n - 1], n)
    sql = _BEST_SQL.format(values=",".join(["(?, ?)"] * len(lengths)), where=_HEADS_ONLY)
    row = db.execute(sql, (*values, workspace, workspace)).fetchone()
    return None if row is None else Match(*row[:3], *map(bool, row[3:6]), *row[6:])


def base_turn(db: sqlite3.Connection, m: Match, known: Known) -> int:
    """The turn that holds ``m``'s first ``m.length`` messages itself, or builds on one that does.

    A regenerate of a regenerate builds on the original turn, so reading any turn
    walks at most one step per stored segment of its history, never every retry.
    """
    tid, base, base_len = m.turn_id, m.base_turn, m.base_len
    while base is not None and m.length <= base_len:
        tid = base
        got = known.bases.get(tid)
        if got is None:
            row = db.execute(
                "SELECT base_turn, base_len FROM turns WHERE id = ?", (tid,)
            ).fetchone()
            got = (row[0], int(row[1]))
            known.bases[tid] = got
        base, base_len = got
    return tid
