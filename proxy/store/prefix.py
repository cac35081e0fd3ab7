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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.store.canonical import canonical, digest, extend_chain

Clean = Callable[[Any], Any]
"""What is stored for a message: identity, or redaction."""


def is_plain(value: Any) -> bool:
    """True when ``value`` holds only dicts, lists, strings and None (``==`` is then exact)."""
    kind = type(value)
    if kind is str or value is None:
        return True
    if kind is dict:
        return all(type(k) is str and is_plain(v) for k, v in value.items())
    if kind is list:
        return all(is_plain(v) for v in value)
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


class PrefixCache:
    """The latest turn of up to ``max_sessions`` conversations, within ``max_bytes`` of JSON."""

    def __init__(self, max_sessions: int = 256, max_bytes: int = 32 << 20) -> None:
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self._entries: collections.OrderedDict[str, _Entry] = collections.OrderedDict()
        self._bytes = 0
        self.hits = 0
        self.misses = 0

    def hash(self, workspace: str, messages: Sequence[Any], clean: Clean) -> Hashed:
        """Digests and chain hashes of ``messages``, serialising only what is not remembered."""
        msgs = messages if isinstance(messages, list) else list(messages)
        best_key, best_n = None, 0
        for key, entry in self._entries.items():
            n = self._match(entry, workspace, msgs, best_n)
            if n:
                best_key, best_n = key, n
        if best_key is None:
            self.misses += 1
            return hash_all(msgs, clean)
        self.hits += 1
        self._entries.move_to_end(best_key)
        return hash_all(msgs, clean, self._entries[best_key].hashed.prefix(best_n))

    def _match(self, entry: _Entry, workspace: str, msgs: list[Any], longer_than: int) -> int:
        """How many leading messages of ``msgs`` are ``entry``'s (its whole list or history)."""
        if entry.workspace != workspace:
            return 0
        for n in (len(entry.messages), entry.n_history):
            if not longer_than < n <= len(msgs) or msgs[n - 1] != entry.messages[n - 1]:
                continue
            theirs = entry.messages if n == len(entry.messages) else entry.messages[:n]
            if msgs[:n] == theirs and all(
                canonical(msgs[i]) == raw for i, raw in entry.hashed.raw.items() if i < n
            ):
                return n
        return 0

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
        old = self._entries.pop(key, None)
        if old is not None:
            self._bytes -= old.hashed.sizes[-1]
        size = ext.sizes[-1]
        if size <= self.max_bytes:
            kept = Hashed(ext.digests, ext.hashes, {}, ext.raw, ext.sizes, len(full))
            self._entries[key] = _Entry(workspace, full, len(messages), kept)
            self._bytes += size
        while self._entries and (
            len(self._entries) > self.max_sessions or self._bytes > self.max_bytes
        ):
            _, evicted = self._entries.popitem(last=False)
            self._bytes -= evicted.hashed.sizes[-1]
        return ext

    def __len__(self) -> int:
        return len(self._entries)
