"""Digests remembered between turns, so the writer's cost follows the new messages.

A client resends its whole history every turn, and the store addresses each
message by the sha256 of its canonical JSON (see ``canonical``). Serialising and
hashing the whole history every turn makes the writer's total cost grow with the
square of the conversation's length. :class:`PrefixCache` remembers, for the
latest turn of the conversations written most recently, its history (and reply)
with their digests and chain hashes. A new turn whose messages start with a
remembered history (or history + reply) takes that entry over: its lists become
the new turn's, extended by the new messages, with nothing copied, and the turn is
remembered in their place once written. (A turn that forks off a conversation so
takes it from that conversation; the conversation's own next turn then finds the
fork's entry, which holds their shared history, and hashes only what follows.)
The prefix is compared with ``==``, which runs in C and serialises nothing, or not
at all when the turn is known to extend the remembered history
(``TurnRecord.extends``).

The result is exactly what hashing everything gives. ``==`` is exact for dicts,
lists, strings and None, but it equates ``1``, ``1.0`` and ``True`` (and ``0.0``
with ``-0.0``), which serialise differently; so a remembered message holding any
other value keeps its raw canonical bytes, and a match is confirmed by them.
Messages are assumed to be JSON values, as ``orjson.loads`` gives them, and a
remembered history list is never changed by its owner.

Only the writer thread touches a cache (no locks). It memoises content, not the
database, so a rolled-back transaction leaves it correct.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

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

    def pop(self) -> _Figures:
        """Take the last message's figures off."""
        i = len(self.digests) - 1
        size = self.sizes.pop()
        return _Figures(self.digests.pop(), self.hashes.pop(), size, self.raw.pop(i, None))

    def push(self, f: _Figures) -> None:
        """Put figures taken off (:meth:`pop`) back on."""
        if f.raw is not None:
            self.raw[len(self.digests)] = f.raw
        self.digests.append(f.digest)
        self.hashes.append(f.hash)
        self.sizes.append(f.size)

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
        td = thread_digest(cleaned, d)
        self.hashes.append(extend_chain(self.hashes[-1] if self.hashes else b"", td))
        self.sizes.append(self.sizes[-1] + len(body))


_SDK_EMPTY = frozenset({"refusal", "annotations", "audio", "function_call", "tool_calls"})
"""Fields an SDK writes into an assistant message it re-serialises, empty when unused."""


def _is_empty(value: Any) -> bool:
    return value is None or value == [] or value == {}


def thread_digest(message: Any, d: bytes) -> bytes:
    """The digest a message threads by: ``d``, or, for an assistant message with empty SDK
    fields (``refusal: null``, ``annotations: []``, as the openai SDK re-serialises a
    reply), the digest of it without them, so a reply resent that way still extends its
    turn. Other messages keep their digest, as stores written before have it."""
    if type(message) is not dict or message.get("role") != "assistant":
        return d
    if not any(k in _SDK_EMPTY and _is_empty(v) for k, v in message.items()):
        return d
    kept = {k: v for k, v in message.items() if not (k in _SDK_EMPTY and _is_empty(v))}
    return digest(canonical(kept))


class _Figures(NamedTuple):
    """One message's figures: digest, chain hash, the list's size through it, raw bytes."""

    digest: bytes
    hash: bytes
    size: int
    raw: bytes | None


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
    history: list[Any]  # as given, not copied
    hashed: Hashed  # the history's figures
    reply: Any | None
    reply_figures: _Figures | None
    size: int = 0  # canonical bytes, history and reply
    keys: tuple[tuple[str, int, Hashable], ...] = ()  # where ``_index`` finds it

    def __post_init__(self) -> None:
        n, f = len(self.history), self.reply_figures
        self.size = f.size if f is not None else self.hashed.sizes[-1]
        ends = [(n, self.history[n - 1])] if n else []
        if self.reply is not None:
            ends.append((n + 1, self.reply))
        self.keys = tuple((self.workspace, k, _shallow(last)) for k, last in ends)

    def ends_at(self, n: int) -> Any:
        """The message it ends with when ``n`` long (its history, or with its reply); a
        sentinel no message equals when it cannot be that long."""
        nh = len(self.history)
        if n == nh and n:
            return self.history[n - 1]
        if n == nh + 1 and self.reply is not None:
            return self.reply
        return _NOTHING


_NOTHING = object()


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
        that ``messages`` is known to start with. An entry found is taken out of the
        cache: its figures are the result's (:meth:`remember` files them again).
        """
        msgs = messages if isinstance(messages, list) else list(messages)
        for n in range(len(msgs), max(0, len(msgs) - self.lookback), -1):
            key = self._index.get((workspace, n, _shallow(msgs[n - 1])))
            entry = self._entries.get(key) if key is not None else None
            if entry is not None and self._covers(entry, msgs, n, extends):
                assert key is not None
                self.hits += 1
                self._forget(key)
                start = entry.hashed
                if n > len(entry.history):
                    assert entry.reply_figures is not None
                    start.push(entry.reply_figures)
                start.reused = n  # (its ``bodies`` were dropped when it was remembered)
                return hash_all(msgs, clean, start)
        self.misses += 1
        return hash_all(msgs, clean)

    def _covers(
        self,
        entry: _Entry,
        msgs: list[Any],
        n: int,
        extends: tuple[Sequence[Any], int] | None,
    ) -> bool:
        """Are ``msgs[:n]`` exactly ``entry``'s first ``n`` messages (its history, or its
        history and reply)?"""
        history = entry.history
        nh = len(history)
        last = entry.ends_at(n)
        if last is _NOTHING or msgs[n - 1] != last:
            return False
        if n > nh:  # the reply: equal, and if == could be loose, the same bytes
            f = entry.reply_figures
            assert f is not None
            if f.raw is not None and canonical(msgs[nh]) != f.raw:
                return False
        if extends is not None and extends[0] is history and extends[1] >= nh:
            return True  # the history is the very objects
        return msgs[:nh] == history and all(
            canonical(msgs[i]) == raw for i, raw in entry.hashed.raw.items()
        )

    def remember(
        self,
        key: str,
        workspace: str,
        messages: Sequence[Any],
        hashed: Hashed,
        reply: Any | None,
        clean: Clean,
    ) -> None:
        """Remember ``messages`` (+ ``reply``) as conversation ``key``'s latest turn.

        ``hashed`` (the figures of ``messages``, or of messages + reply) is taken over,
        not copied; the caller must not use it afterwards.
        """
        history = messages if type(messages) is list else list(messages)
        hashed = hash_all(history, clean, hashed)
        reply_figures = None
        if reply is not None:
            if len(hashed.digests) == len(history):
                hashed.append(reply, clean)
            reply_figures = hashed.pop()
        hashed.bodies = {}
        self._forget(key)
        entry = _Entry(workspace, history, hashed, reply, reply_figures)
        if entry.size <= self.max_bytes:
            self._entries[key] = entry
            self._bytes += entry.size
            for ikey in entry.keys:
                self._index[ikey] = key
        while self._entries and (
            len(self._entries) > self.max_sessions or self._bytes > self.max_bytes
        ):
            self._forget(next(iter(self._entries)))

    def _forget(self, key: str) -> None:
        old = self._entries.pop(key, None)
        if old is None:
            return
        self._bytes -= old.size
        for ikey in old.keys:
            if self._index.get(ikey) == key:
                del self._index[ikey]

    def __len__(self) -> int:
        return len(self._entries)


def forgetful() -> PrefixCache:
    """A cache that keeps nothing, so every message is serialised (the slow path)."""
    return PrefixCache(max_sessions=0, max_bytes=0)
