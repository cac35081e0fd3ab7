"""What the writer knows of the database, so a turn costs a few statements.

The writer thread is the only connection that writes turns between two checks
of ``PRAGMA data_version`` (which changes when another connection commits: an
import, a prune). While that holds it can remember, instead of querying:

* message ids by digest (a resent or repeated message needs no lookup);
* each session's head turn, seq and model;
* for a chain hash, the *best* stored turn with that history or history +
  reply (the one :func:`proxy.store.placement.find_match` would pick), or that there
  is none. A remembered best that was its session's head is trusted only while
  ``heads`` still says so; writing a turn with that hash replaces it.
* a new session's title, by its first user message's digest (a regenerate or
  an edit starts a session with the same message again).

Everything is a bounded LRU and exact: the writer calls :meth:`Known.clear`
whenever the database may have changed under it (another connection committed,
a rollback, retention deleted sessions). ``seen``, a filter of every stored
chain hash, outlives a clear: it only has to hold every stored hash, so it is
reset only when another connection may have added turns. Only the writer
thread touches it.

The steps of writing a turn always ask a ``Known``; :meth:`Known.forgetful` remembers
nothing, so every answer comes from the database (imports, and the slow path the
property tests compare the writer with).
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Generic, TypeVar

from proxy.store.seen import SeenHashes

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    """A dict that forgets its least recently set entries beyond ``size``."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._d: collections.OrderedDict[K, V] = collections.OrderedDict()

    def get(self, key: K) -> V | None:
        return self._d.get(key)

    def __setitem__(self, key: K, value: V) -> None:
        if not self.size:
            return
        d = self._d
        d[key] = value
        d.move_to_end(key)
        if len(d) > self.size:
            d.popitem(last=False)

    def pop(self, key: K) -> None:
        self._d.pop(key, None)

    def clear(self) -> None:
        self._d.clear()

    def __len__(self) -> int:
        return len(self._d)


@dataclass(slots=True)  # not frozen: built every turn (see TurnRecord)
class Match:
    """A stored turn whose history (or history + reply) is a prefix of a request."""

    turn_id: int
    session_id: str
    length: int  # how many leading messages of the request it covers
    is_head: bool
    via_history: bool
    has_reply: bool
    model: str
    seq: int
    base_turn: int | None  # the matched turn's own incremental encoding
    base_len: int


@dataclass(slots=True)  # not frozen: built every turn (see TurnRecord)
class Head:
    turn_id: int
    seq: int
    model: str


NONE = "none"
"""A remembered answer: no stored turn has this chain hash."""


class Known:
    """The writer's exact, bounded memory of recent rows (see the module docstring)."""

    def __init__(
        self, max_messages: int = 50_000, max_turns: int = 20_000, max_titles: int = 1024
    ) -> None:
        self.message_ids: Lru[bytes, int] = Lru(max_messages)
        self.heads: Lru[str, Head] = Lru(max_turns)
        self.best: Lru[tuple[str, bytes], Match | str] = Lru(2 * max_turns)
        self.bases: Lru[int, tuple[int | None, int]] = Lru(max_turns)
        self.hints: Lru[tuple[str, str], str] = Lru(max_turns)
        self.titles: Lru[bytes, str] = Lru(max_titles)  # by the first user message's digest
        # the session each recent turn went into, by (workspace, started_at): a memory
        # queued for a turn names its session by it
        self.turn_sessions: Lru[tuple[str, float], str] = Lru(max_titles)
        self.seen = SeenHashes()
        self.inserted = 0  # messages inserted since the writer last indexed

    @classmethod
    def forgetful(cls) -> Known:
        """A ``Known`` that remembers nothing: every lookup misses, the filter never loads."""
        known = cls(0, 0, 0)
        known.seen = SeenHashes(enabled=False)
        return known

    def clear(self) -> None:
        for lru in (
            self.message_ids, self.heads, self.best, self.bases, self.hints, self.titles,
            self.turn_sessions,
        ):  # fmt: skip
            lru.clear()

    def lookup(self, workspace: str, h: bytes) -> Match | str | None:
        """The best turn for chain hash ``h``, :data:`NONE`, or None when not known."""
        m = self.best.get((workspace, h))
        if isinstance(m, Match) and m.is_head:
            head = self.heads.get(m.session_id)
            if head is None or head.turn_id != m.turn_id:
                return None  # no longer its session's head: another turn may now be best
        return m

    def wrote(
        self, workspace: str, m: Match, h: bytes, ext: Match | None, eh: bytes | None
    ) -> None:
        """Turn ``m`` (history hash ``h``; with its reply ``ext``, hash ``eh``) is a new head."""
        self.heads[m.session_id] = Head(m.turn_id, m.seq, m.model)
        self.bases[m.turn_id] = (m.base_turn, m.base_len)
        self.best[(workspace, h)] = m  # newest, and a head: it wins every tie
        self.seen.add(h)
        if ext is not None and eh is not None:
            self.best[(workspace, eh)] = ext
            self.seen.add(eh)
