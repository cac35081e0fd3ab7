"""What the writer process holds of recent bodies, mirrored on the proxy's side.

A client resends its whole history every turn, so shipping each body to the writer
process whole moved the whole history through the kernel every turn, and the writer
then rebuilt and re-parsed each body. The proxy's parse already found what a body
resends (:class:`~proxy.ingress.incremental_parse.Resends`): an earlier body's first ``n`` messages,
then the bytes orjson parsed (the body with those messages cut out). When that
earlier body was shipped, and is still held, the proxy ships only ``n`` and those
bytes; the writer, holding the earlier body's messages, rebuilds the new parse as
its first ``n`` messages plus the parse of those bytes: no copy of the body, no
comparing, no scan.

Both ends keep one mirror and feed it the same frames in the same order (one
shipping channel, one reader), so they hold the same bodies under the same numbers:
the proxy the bodies (to know them by identity), the writer their messages. A new
writer process starts with an empty mirror on both sides, and a base the writer
does not hold (it cannot, unless a batch was lost) makes that one frame unreadable,
counted, never a wrong parse.
"""

from __future__ import annotations

import collections
from typing import Any, Generic, TypeVar

from proxy.ingress.incremental_parse import WORTH_REUSING, Resends

MIN_SAVED = 4 << 10
"""A body saving fewer bytes than this is shipped whole: the reference would save too
little."""

T = TypeVar("T")


class _Mirror(Generic[T]):
    """Items by the number of the frame that shipped them, each counted at its body's
    size, within ``max_bytes``; only bodies of ``min_bytes`` and up are held.

    Every frame is :meth:`keep`-ed at both ends with the base it was shipped against:
    the base is dropped (its conversation moved on; a fork finds the newer body just as
    well), the new one is held if large enough, and the oldest go first beyond
    ``max_bytes``. Frames carry their own number, so the ends cannot disagree on what
    a number means; and a writer holding more (the proxy side was :meth:`clear`-ed)
    only drops its extra, older items first.
    """

    def __init__(self, max_bytes: int = 16 << 20, min_bytes: int = WORTH_REUSING) -> None:
        self.max_bytes, self.min_bytes = max_bytes, min_bytes
        self._items: collections.OrderedDict[int, tuple[T, int]] = collections.OrderedDict()
        self._bytes = 0
        self.next_seq = 0

    def get(self, seq: int) -> T:
        """Held item ``seq``; KeyError if it is not held."""
        return self._items[seq][0]

    def keep(self, seq: int, item: T, size: int, base: int | None) -> None:
        """Record that frame ``seq`` shipped a body of ``size`` bytes (held as ``item``),
        against held body ``base`` if any."""
        if base is not None and base in self._items:
            self._forget(base)
        if seq in self._items:  # (cannot be, as frames are numbered: be safe anyway)
            self._forget(seq)
        if self.min_bytes <= size <= self.max_bytes:
            self._items[seq] = (item, size)
            self._held(seq, item)
            self._bytes += size
            while self._bytes > self.max_bytes:
                self._forget(next(iter(self._items)))
        self.next_seq = max(self.next_seq, seq + 1)

    def clear(self) -> None:
        """Hold nothing, numbering on: after a frame that may not have arrived."""
        for seq in list(self._items):
            self._forget(seq)

    def _held(self, seq: int, item: T) -> None:
        """(For an index of what is held.)"""

    def _forget(self, seq: int) -> None:
        _, size = self._items.pop(seq)
        self._bytes -= size

    def __len__(self) -> int:
        return len(self._items)


class ShippedBodies(_Mirror[bytes]):
    """The proxy's end: the bodies shipped, known by identity."""

    def __init__(self, max_bytes: int = 16 << 20, min_bytes: int = WORTH_REUSING) -> None:
        super().__init__(max_bytes, min_bytes)
        self._seq_of: dict[int, int] = {}  # id(body) -> its number (held bodies stay alive)

    def ship(self, body: bytes, like: Resends | None = None) -> tuple[int, int | None]:
        """Number ``body`` for shipping, keep it, and say what it is shipped against:
        ``(seq, base)``, base None to ship it whole. It is shipped against held body
        ``like.body`` (the very object its parse repeats) when that saves enough."""
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        base = None
        if like is not None and len(body) - len(like.cut) >= MIN_SAVED:
            # Only held bodies are indexed, and they are alive, as ``like.body`` is: the
            # same id is the same object.
            base = self._seq_of.get(id(like.body))
        self.keep(seq, body, len(body), base)
        return seq, base

    def _held(self, seq: int, item: bytes) -> None:
        self._seq_of[id(item)] = seq

    def _forget(self, seq: int) -> None:
        body = self._items[seq][0]
        if self._seq_of.get(id(body)) == seq:
            del self._seq_of[id(body)]
        super()._forget(seq)


class HeldMessages(_Mirror[list[Any]]):
    """The writer's end: the messages of the bodies shipped."""
