"""Digests remembered between turns, so the writer's cost follows the new messages.

A client resends its whole history every turn, and the store addresses each
message by the sha256 of its canonical JSON (see ``canonical``). Serialising and
hashing the whole history every turn makes the writer's total cost grow with the
square of the conversation's length. :class:`PrefixCache` remembers, for the
latest turn of the conversations written most recently, its messages (history,
then reply) with their digests and chain hashes. A new turn whose messages start
with a remembered list reuses them and serialises only the rest. The prefix is
compared with ``==``, which runs in C and serialises nothing.

The result is exactly what hashing everything gives. ``==`` is exact for dicts,
lists, strings and None, but it equates ``1``, ``1.0`` and ``True`` (and ``0.0``
with ``-0.0``), which serialise differently; so a remembered message holding any
other value keeps its raw canonical bytes, and a match is confirmed by them.
Messages are assumed to be JSON values, as ``orjson.loads`` gives them.

Only the writer thread touches a cache (no locks). It memoises content, not the
database, so a rolled-back transaction leaves it correct.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.store.canonical import canonical, digest, extend_chain

Clean = Callable[[Any], Any]
"""What is stored for a message: identity, or redaction."""


def is_plain(value: Any) -> bool:
    """True when ``value`` holds only dicts, lists, strings and None (``==`` is then exact).

    Loops, not ``all()`` over a generator: a message costs a third of the time."""
    kind = type(value)
    if kind is str or value is None:
        return True
    if kind is dict:
        for k, v in value.items():
            if type(k) is not str or not (type(v) is str or v is None or is_plain(v)):
                return False
        return True
    if kind is list:
        for v in value:  # noqa: SIM110 (see above)
            if not (type(v) is str or v is None or is_plain(v)):
                return False
        return True
    return False


@dataclass(slots=True)
class Hashed:
    """A list of messages' digests and chain hashes, with what was serialised for them.

    ``bodies`` holds the stored (cleaned) canonical bodies of the messages that
    were serialised, by index; the ``reused`` leading ones came from the cache and
    have none. ``raw`` holds the raw canonical bytes of every message that is not
    plain; ``sizes[k]`` is the canonical size of the first ``k`` messages.
    """

    digests: list[bytes] = field(default_factory=list)
    hashes: list[bytes] = field(default_factory=list)
    bodies: dict[int, bytes] = field(default_factory=dict)
    raw: dict[int, bytes] = field(default_factory=dict)
    sizes: list[int] = field(default_factory=lambda: [0])
    reused: int = 0

    def prefix(self, n: int) -> Hashed:
        """The first ``n`` messages' figures, all counted as reused."""
        raw = {i: b for i, b in self.raw.items() if i < n}
        return Hashed(self.digests[:n], self.hashes[:n], {}, raw, self.sizes[: n + 1], n)

    def append(self, message: Any, clean: Clean) -> None:
        """Serialise and hash one more message."""
        i = len(self.digests)
        cleaned = clean(message)
        body = canonical(cleaned)
        d = digest(body)
        self.bodies[i] = body
        if not is_plain(message):
            self.raw[i] = body if cleaned is message else canonical(message)
        self.digests.append(d)
        self.hashes.append(extend_chain(self.hashes[-1] if self.hashes else b"", d))
        self.sizes.append(self.sizes[-1] + len(body))


def _shallow(message: Any) -> Hashable:
    """A cheap key for a message: equal messages have equal keys."""
    if type(message) is not dict:
        return None
    role, content = message.get("role"), message.get("content")
    return (
        role if type(role) is str else None,
        content if type(content) is str else None,
        len(message),
    )


def hash_all(messages: Sequence[Any], clean: Clean, start: Hashed | None = None) -> Hashed:
    """``start`` (or nothing) extended with ``messages`` from where it ends."""
    out = start if start is not None else Hashed()
    for m in messages[len(out.digests) :]:
        out.append(m, clean)
    return out


@dataclass(slots=True)
class _Entry:
    workspace: str
    messages: list[Any]  # the history, then the reply if there was one
    n_history: int
    hashed: Hashed
    source: Sequence[Any]  # the history as given: a later turn may say it extends it


class PrefixCache:
    """The latest turn of up to ``max_sessions`` conversations, within ``max_bytes`` of JSON."""

    def __init__(
        self, max_sessions: int = 256, max_bytes: int = 32 << 20, lookback: int = 8
    ) -> None:
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self.lookback = lookback
        self._entries: collections.OrderedDict[str, _Entry] = collections.OrderedDict()
        self._index: dict[tuple[str, int, Hashable], str] = {}  # where a remembered list ends
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def hash(
        self,
        workspace: str,
        messages: Sequence[Any],
        clean: Clean,
        extends: tuple[Sequence[Any], int] | None = None,
    ) -> Hashed:
        """Digests and chain hashes of ``messages``, serialising only what is not remembered.

        Only a remembered list that ends within the last ``lookback`` messages is
        looked for (found through ``_index``, by its last message): a turn adds a
        message or a few, and a longer jump costs one full hashing, not a wrong answer.
        ``extends`` (see ``TurnRecord.extends``) spares comparing a remembered history
        that ``messages`` is known to start with.
        """
        msgs = messages if isinstance(messages, list) else list(messages)
        for n in range(len(msgs), max(0, len(msgs) - self.lookback), -1):
            key = self._index.get((workspace, n, _shallow(msgs[n - 1])))
            entry = self._entries.get(key) if key is not None else None
            if entry is not None and self._covers(entry, msgs, n, extends):
                assert key is not None
                self.hits += 1
                self._entries.move_to_end(key)
                return hash_all(msgs, clean, entry.hashed.prefix(n))
        self.misses += 1
        return hash_all(msgs, clean)

    def _covers(
        self,
        entry: _Entry,
        msgs: list[Any],
        n: int,
        extends: tuple[Sequence[Any], int] | None,
    ) -> bool:
        """Are ``msgs[:n]`` exactly ``entry``'s first ``n`` messages (its whole list or history)?"""
        if n not in (len(entry.messages), entry.n_history) or msgs[n - 1] != entry.messages[n - 1]:
            return False
        if extends is not None and extends[0] is entry.source and extends[1] >= entry.n_history:
            # The history is the very objects: only the reply (if within n) is compared,
            # and confirmed by its bytes if ``==`` could be loose.
            i = n - 1
            return i < entry.n_history or (
                i not in entry.hashed.raw or canonical(msgs[i]) == entry.hashed.raw[i]
            )
        theirs = entry.messages if n == len(entry.messages) else entry.messages[:n]
        return msgs[:n] == theirs and all(
            canonical(msgs[i]) == raw for i, raw in entry.hashed.raw.items() if i < n
        )

    def remember(
        self,
        key: str,
        workspace: str,
        messages: Sequence[Any],
        hashed: Hashed,
        reply: Any | None,
        clean: Clean,
    ) -> Hashed:
        """Remember ``messages`` (+ ``reply``) as conversation ``key``'s latest turn.

        Returns the figures of messages + reply (the reply hashed here).
        """
        full = [*messages, reply] if reply is not None else list(messages)
        ext = hash_all(full, clean, hashed)
        same = self._holding(workspace, full, len(messages), ext)
        if same is not None:  # a regenerate that got the same reply: nothing new to remember
            self._entries.move_to_end(same)
            return ext
        self._forget(key)
        size = ext.sizes[-1]
        if size <= self.max_bytes:
            kept = Hashed(ext.digests, ext.hashes, {}, ext.raw, ext.sizes, len(full))
            entry = _Entry(workspace, full, len(messages), kept, messages)
            self._entries[key] = entry
            self._bytes += size
            for n in {len(full), len(messages)} - {0}:
                self._index[(workspace, n, _shallow(full[n - 1]))] = key
        while self._entries and (
            len(self._entries) > self.max_sessions or self._bytes > self.max_bytes
        ):
            self._forget(next(iter(self._entries)))
        return ext

    def _holding(self, workspace: str, full: list[Any], n_history: int, ext: Hashed) -> str | None:
        """The key of an entry that already holds exactly ``full`` (``n_history`` of it history)."""
        if not full or ext.raw:
            return None
        key = self._index.get((workspace, len(full), _shallow(full[-1])))
        entry = self._entries.get(key) if key is not None else None
        if (
            entry is None
            or entry.n_history != n_history
            or entry.hashed.raw
            or entry.messages != full
        ):
            return None
        return key

    def _forget(self, key: str) -> None:
        old = self._entries.pop(key, None)
        if old is None:
            return
        self._bytes -= old.hashed.sizes[-1]
        for n in {len(old.messages), old.n_history} - {0}:
            ikey = (old.workspace, n, _shallow(old.messages[n - 1]))
            if self._index.get(ikey) == key:
                del self._index[ikey]

    def __len__(self) -> int:
        return len(self._entries)
