"""The request bodies the writer process holds, mirrored on the proxy's side.

A client resends its whole history every turn, so shipping each body to the writer
process whole moved ~500 KB a turn at 500 turns through the kernel: the largest
part of what snapshots cost the proxy. Both ends keep one :class:`ShippedBodies`
and feed it the same bodies in the same order (one shipping channel, one reader),
so they hold the same bodies under the same numbers. The proxy then ships a body
that starts with a held one as "the first ``shared`` bytes of body ``base``, then
these bytes"; the writer rebuilds it with one copy in its own memory.

Nothing here needs the two ends to agree on anything but the order of frames: a
new writer process starts with an empty mirror on both sides, and a base the
writer does not hold (it cannot, unless a batch was lost) makes that one frame
unreadable, counted, never a wrong body.
"""

from __future__ import annotations

import collections

from proxy.resent import KEY_BYTES, WORTH_REUSING, Resends, common_prefix, unindex

CANDIDATES = 16
MIN_SHARED = 4 << 10
"""A shorter shared run is shipped whole: the reference would save too little."""


class ShippedBodies:
    """Bodies of at least ``min_bytes``, by the number of the frame that shipped them,
    within ``max_bytes``.

    Every body shipped is :meth:`keep`-ed at both ends, with the base it was shipped
    against: the base is dropped (its conversation moved on; a fork finds the newer
    body just as well), the body is kept if large enough, and the oldest go first
    beyond ``max_bytes``. Frames carry their own number, so the ends cannot disagree
    on what a number means; and a writer holding more (the proxy side was
    :meth:`clear`-ed) only drops its extra, older bodies first.
    """

    def __init__(self, max_bytes: int = 16 << 20, min_bytes: int = WORTH_REUSING) -> None:
        self.max_bytes, self.min_bytes = max_bytes, min_bytes
        self._bodies: collections.OrderedDict[int, bytes] = collections.OrderedDict()
        self._by_key: dict[bytes, list[int]] = {}
        self._bytes = 0
        self.next_seq = 0

    def ship(self, body: bytes, like: Resends | None = None) -> tuple[int, int | None, int]:
        """Number ``body`` for shipping, keep it, and say what to ship it against:
        ``(seq, base, shared)``, base None (and shared 0) to ship it whole. ``like`` (from
        parsing ``body``) names the earlier body it repeats: if that is held, no bytes
        are compared."""
        seq, self.next_seq = self.next_seq, self.next_seq + 1
        if len(body) < self.min_bytes:  # neither held nor shipped against: as keep() would
            return seq, None, 0
        base, shared = self._named(body, like) or self._base_for(body) or (None, 0)
        self.keep(seq, body, base)
        return seq, base, shared

    def _named(self, body: bytes, like: Resends | None) -> tuple[int, int] | None:
        if like is None or like.shared < MIN_SHARED or len(body) < self.min_bytes:
            return None
        for seq in reversed(self._by_key.get(body[:KEY_BYTES], [])):
            if self._bodies[seq] is like.body:
                return seq, like.shared
        return None

    def _base_for(self, body: bytes) -> tuple[int, int] | None:
        """The held body ``body`` shares the longest start with, and how many bytes; None
        when none shares ``MIN_SHARED``. A held body sharing less than its first half
        is not measured (memcmp stops at the first difference, so that is cheap)."""
        if len(body) < self.min_bytes:
            return None
        best: tuple[int, int] | None = None
        for seq in reversed(self._by_key.get(body[:KEY_BYTES], [])[-CANDIDATES:]):
            old = self._bodies[seq]
            if not body.startswith(memoryview(old)[: len(old) // 2]):
                continue
            shared = common_prefix(old, body)
            if shared >= MIN_SHARED and (best is None or shared > best[1]):
                best = (seq, shared)
        return best

    def get(self, seq: int) -> bytes:
        """Held body ``seq``; KeyError if it is not held."""
        return self._bodies[seq]

    def keep(self, seq: int, body: bytes, base: int | None) -> None:
        """Record that frame ``seq`` shipped ``body``, against held body ``base`` if any."""
        if base is not None and base in self._bodies:
            self._forget(base)
        if seq in self._bodies:  # (cannot be, as frames are numbered: be safe anyway)
            self._forget(seq)
        if self.min_bytes <= len(body) <= self.max_bytes:
            self._bodies[seq] = body
            self._by_key.setdefault(body[:KEY_BYTES], []).append(seq)
            self._bytes += len(body)
            while self._bytes > self.max_bytes:
                self._forget(next(iter(self._bodies)))
        self.next_seq = max(self.next_seq, seq + 1)

    def clear(self) -> None:
        """Hold nothing, numbering on: after a frame that may not have arrived."""
        self._bodies.clear()
        self._by_key.clear()
        self._bytes = 0

    def _forget(self, seq: int) -> None:
        body = self._bodies.pop(seq)
        self._bytes -= len(body)
        unindex(self._by_key, body, seq)

    def __len__(self) -> int:
        return len(self._bodies)
