"""Parsing a resent chat body in time that follows what is new in it.

A client resends its whole history every turn, byte for byte as it sent it the
last time, plus a message or a few. Parsing the whole history every turn makes
the cost of a conversation grow with the square of its length, in the proxy and in
the store's writer process alike (figures in bench/NOTES.md).

:class:`ResentBodies` remembers recent bodies. When a new body starts with the
same bytes as a remembered one up to the end of some of its messages, those
messages' values are taken from the remembered parse, and orjson parses only the
body with them cut out (``{…"messages": [<the rest>]…}``). The same bytes parse
to the same values, so the result equals ``orjson.loads(body)``; a test checks
that against generated conversations, types included. Reused messages are the
very objects of the earlier parse: nothing may mutate a parsed message.

Where a body's messages end (``json_spans.layout``) is found only when a later
body shares at least a quarter of it, so bodies that are never continued cost
no scan; a body parsed by reuse gets its layout from the reused one plus a scan
of what is new. An instance is used by one thread (the event loop's). A body
parsed by reuse says so (:class:`Resends`): the store's shipper sends the writer
process the bytes orjson parsed, not the body.
"""

from __future__ import annotations

import bisect
import collections
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from proxy.ingress.json_spans import Layout, elements_from, has_key_after, layout

KEY_BYTES = 64
"""Bodies are looked up by their first bytes; conversations sharing them are told apart
by comparing bytes."""
PARTIAL_CANDIDATES = 16
WORTH_REUSING = 64 << 10
"""Bodies this large are worth looking up; a smaller one is parsed whole, which costs
less than a lookup (and a burst of small, alike bodies under load would make lookups
most of the store writer's work)."""
Check = Callable[[Any, int], None]
"""Sees a parse and how many leading messages were reused; raises to refuse it."""


class Resends(NamedTuple):
    """An earlier body that a new one starts with: the new body is ``body``'s first
    ``messages`` messages, then what ``cut`` holds. ``cut`` is the new body with those
    messages cut out, the very bytes orjson parsed, so whoever holds the earlier body's
    parse (the store's writer process) rebuilds the new parse from it and ``cut``
    alone, without the new body's bytes or any comparing of them."""

    body: bytes
    messages: int
    cut: bytes


@dataclass(slots=True)
class _Body:
    raw: bytes
    messages: list[Any]
    layout: Layout | None = None
    scanned: bool = False  # layout looked for (None then means: cannot be reused)
    bid: int = -1  # its place in the cache


@dataclass(slots=True)
class _Reuse:
    body: _Body
    shared: int  # how many leading messages the new body shares with it
    cut_from: int  # where the new body's own messages begin (past a ',' or at the ']')


class ResentBodies:
    """Up to ``max_bodies`` recent bodies of at least ``min_bytes``, within ``max_bytes``;
    the history is the array under ``key`` (``messages``; a Responses body's ``input``)."""

    def __init__(
        self,
        max_bodies: int = 256,
        max_bytes: int = 64 << 20,
        min_bytes: int = 0,
        key: str = "messages",
    ) -> None:
        self.max_bodies, self.max_bytes, self.min_bytes = max_bodies, max_bytes, min_bytes
        self.key = key
        self._bodies: collections.OrderedDict[int, _Body] = collections.OrderedDict()
        self._by_key: dict[bytes, list[int]] = {}
        self._bytes = 0
        self._next_id = 0
        self.reused_messages = 0
        self.parsed_bytes = 0

    def parse(self, body: bytes, check: Check | None = None) -> Any:
        """``orjson.loads(body)``, reusing what a remembered body shares with it.

        ``check`` sees what orjson parsed (the body, or the body with the reused messages
        cut out) and how many messages were reused, and may raise to refuse it; a
        refused body is not remembered.
        """
        return self.parse_resending(body, check)[0]

    def parse_resending(
        self, body: bytes, check: Check | None = None
    ) -> tuple[Any, Resends | None]:
        """:meth:`parse`, and which remembered body ``body`` was found to repeat, if any."""
        reuse = self._find(body) if len(body) >= self.min_bytes else None
        if reuse is not None:
            got = self._parse_reusing(body, reuse, check)
            if got is not None:
                parsed, cut = got
                return parsed, Resends(reuse.body.raw, reuse.shared, cut)
        parsed = orjson.loads(body)
        if check is not None:
            check(parsed, 0)
        self.parsed_bytes += len(body)
        messages = parsed.get(self.key) if type(parsed) is dict else None
        if type(messages) is list and messages and len(body) >= self.min_bytes:
            self._remember(_Body(body, messages))
        return parsed, None

    def _parse_reusing(
        self, body: bytes, reuse: _Reuse, check: Check | None
    ) -> tuple[Any, bytes] | None:
        """The parse of ``body`` reusing ``reuse``, and the bytes orjson parsed; None when
        those bytes do not hold exactly the body's new messages."""
        old, n = reuse.body, reuse.shared
        assert old.layout is not None
        cut = b"".join((body[: old.layout.open + 1], body[reuse.cut_from :]))
        try:
            parsed = orjson.loads(cut)
        except orjson.JSONDecodeError:
            return None
        new = parsed.get(self.key) if type(parsed) is dict else None
        if type(new) is not list or (not new and body[reuse.cut_from - 1] == ord(",")):
            return None  # (a ',' then no message: a trailing comma, which orjson refuses)
        tail = elements_from(body, reuse.cut_from) if new else ([], reuse.cut_from)
        if tail is None or len(tail[0]) != len(new) or not self._one_key(body, old, tail[1]):
            return None
        if check is not None:
            check(parsed, n)
        self.parsed_bytes += len(cut)
        self.reused_messages += n
        parsed[self.key] = messages = old.messages[:n] + new
        if body != old.raw:
            ends = old.layout.ends[:n] + tail[0]
            if n == len(old.messages):
                self._forget(old.bid)  # the conversation moved on (a fork keeps its parent)
            self._remember(_Body(body, messages, Layout(old.layout.open, ends, tail[1]), True))
        return parsed, cut

    def _one_key(self, body: bytes, old: _Body, close: int) -> bool:
        """Is the array that ends at ``close`` the body's only ``messages``? What precedes
        it is ``old``'s (checked when its layout was found); what follows is checked here,
        unless it is ``old``'s too."""
        assert old.layout is not None
        after = len(old.raw) - old.layout.close
        if len(body) - close == after and body.endswith(memoryview(old.raw)[-after:]):
            return True
        return has_key_after(body, close, self.key) is False

    def _find(self, body: bytes) -> _Reuse | None:
        """The remembered body sharing the most leading messages with ``body``, found by
        comparing bytes.

        Conversations often share their first bytes (one system prompt for all of an
        app's users), so the candidates are told apart by bytes: first, does ``body``
        resend every message of one of them (one memcmp each, which stops at the
        first difference)? Only if none, the most recent few are looked at for a
        shorter shared run of messages (an edit, a rewritten last message), which
        costs a binary search for the common prefix each.
        """
        ids = self._by_key.get(body[:KEY_BYTES])
        if not ids:
            return None
        best: _Reuse | None = None
        for bid in reversed(ids):
            old = self._bodies[bid]
            lay = old.layout
            if lay is None or (best is not None and len(lay.ends) <= best.shared):
                continue
            if body.startswith(memoryview(old.raw)[: lay.ends[-1]]):
                best = _reuse(old, body, len(lay.ends)) or best
        if best is None:
            for bid in reversed(ids[-PARTIAL_CANDIDATES:]):
                reuse = self._partly_shared(self._bodies[bid], body, self.key)
                if reuse is not None and (best is None or reuse.shared > best.shared):
                    best = reuse
        if best is not None:
            self._bodies.move_to_end(best.body.bid)
        return best

    @staticmethod
    def _partly_shared(old: _Body, body: bytes, key: str) -> _Reuse | None:
        """How many of ``old``'s leading messages ``body`` starts with, if any; ``old`` is
        scanned for its layout the first time a body shares a quarter of it."""
        raw = memoryview(old.raw)
        if old.layout is None and not old.scanned and not body.startswith(raw[: len(raw) // 4]):
            return None  # too little in common for a scan (yet)
        lay = _scanned(old, key)
        if lay is None:
            return None
        if not body.startswith(raw[: lay.ends[0]]):
            return None
        n = bisect.bisect_right(lay.ends, common_prefix(old.raw, body))
        return _reuse(old, body, n) if n else None

    def _remember(self, entry: _Body) -> None:
        if len(entry.raw) > self.max_bytes:
            return
        bid = entry.bid = self._next_id
        self._next_id += 1
        self._bodies[bid] = entry
        self._bytes += len(entry.raw)
        ids = self._by_key.setdefault(entry.raw[:KEY_BYTES], [])
        ids.append(bid)
        while len(self._bodies) > self.max_bodies or self._bytes > self.max_bytes:
            self._forget(next(iter(self._bodies)))

    def _forget(self, bid: int) -> None:
        entry = self._bodies.pop(bid)
        self._bytes -= len(entry.raw)
        unindex(self._by_key, entry.raw, bid)

    def __len__(self) -> int:
        return len(self._bodies)


def unindex(by_key: dict[bytes, list[int]], raw: bytes, n: int) -> None:
    """Take body ``n`` out of an index of bodies by their first ``KEY_BYTES``."""
    key = raw[:KEY_BYTES]
    ids = by_key[key]
    ids.remove(n)
    if not ids:
        del by_key[key]


def _scanned(old: _Body, key: str) -> Layout | None:
    """``old``'s layout, scanned for the first time it is needed; None if it cannot be
    reused."""
    if old.layout is None and not old.scanned:
        lay, old.scanned = layout(old.raw, key), True
        if lay is not None and len(lay.ends) != len(old.messages):
            lay = None  # cannot be (orjson parsed the same bytes): be safe anyway
        old.layout = lay
    return old.layout


def _reuse(old: _Body, body: bytes, n: int) -> _Reuse | None:
    """Reuse ``old``'s first ``n`` messages, which ``body`` starts with, byte for byte."""
    assert old.layout is not None
    at = _skip_space(body, old.layout.ends[n - 1])
    if at >= len(body) or body[at] not in b",]":
        return None  # cannot be, in valid JSON: be safe anyway
    return _Reuse(old, n, at + 1 if body[at] == ord(",") else at)


def common_prefix(a: bytes, b: bytes) -> int:
    """How many leading bytes ``a`` and ``b`` share: a binary search in which each step
    compares only the bytes not yet known to match, so memcmp does O(n) work in all."""
    lo, hi = 0, min(len(a), len(b))
    view = memoryview(a)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if b.startswith(view[lo:mid], lo):
            lo = mid
        else:
            hi = mid - 1
    return lo


def _skip_space(body: bytes, i: int) -> int:
    while i < len(body) and body[i] in b" \t\r\n":
        i += 1
    return i
