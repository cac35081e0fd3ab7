"""A Bloom filter of every stored turn's chain hashes, so a new history costs no query.

Most requests start a conversation or add to one, and then no stored turn has
their full history's chain hash, and asking SQLite so was a large share of a turn.
A chain hash is a sha256, so its bytes already are uniform: two 32-bit slices
pick the filter's bits, with no hashing of our own.

The filter answers "maybe stored" for every hash it was given, so a hash it
says is absent is in no turn. Extra entries only cost a query, so rows deleted
(retention) or rolled back leave it correct; only rows another connection
*added* (an import) make it wrong, and the writer then :meth:`SeenHashes.reset`\\ s
it and it reloads from the database on next use. 2^25 bits keep false positives
below one in a thousand up to a million turns.
"""

from __future__ import annotations

import sqlite3

_LOAD = """SELECT history_hash FROM turns
    UNION ALL SELECT ext_hash FROM turns WHERE ext_hash IS NOT NULL"""


class SeenHashes:
    """The chain hashes of stored turns (a superset), loaded lazily from the database."""

    def __init__(self, bits_log2: int = 25, *, enabled: bool = True) -> None:
        """``enabled=False``: never loads, so it rules nothing out (a forgetful writer's)."""
        self._enabled = enabled
        self._mask = (1 << bits_log2) - 1
        self._bits_log2 = bits_log2
        self._bits: bytearray | None = None

    def reset(self) -> None:
        """Forget everything: the next :meth:`load` rereads the database."""
        self._bits = None

    @property
    def loaded(self) -> bool:
        return self._bits is not None

    def load(self, db: sqlite3.Connection) -> None:
        """Add every stored turn's history and extended-history hash (once after a reset)."""
        if self._bits is not None or not self._enabled:
            return
        self._bits = bytearray(1 << (self._bits_log2 - 3))
        for (h,) in db.execute(_LOAD):
            self.add(h)

    def add(self, h: bytes) -> None:
        bits = self._bits
        if bits is None:
            return  # not loaded: the load will see the row
        mask = self._mask
        a = int.from_bytes(h[:4], "little") & mask
        b = int.from_bytes(h[4:8], "little") & mask
        bits[a >> 3] |= 1 << (a & 7)
        bits[b >> 3] |= 1 << (b & 7)

    def may_have(self, h: bytes) -> bool:
        """False only when no stored turn has chain hash ``h`` (True when not loaded)."""
        bits = self._bits
        if bits is None:
            return True
        mask = self._mask
        a = int.from_bytes(h[:4], "little") & mask
        if not bits[a >> 3] & (1 << (a & 7)):
            return False
        b = int.from_bytes(h[4:8], "little") & mask
        return bool(bits[b >> 3] & (1 << (b & 7)))
