"""What a model was sent, as edits of the original history.

A turn's forwarded messages are stored as *ops* over its original history: a
``[start, count]`` pair keeps a run of original messages, a bare integer inserts
one message (a note or summary a policy wrote, or a rewritten message). Runs cost
a few bytes however long the history, and the same ops drive the diff view.
Pure functions only.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")
Op = list[int] | int
"""``[start, count]``: keep original[start:start+count]; ``n``: insert item ``n``."""


def encode(original: Sequence[Hashable], forwarded: Sequence[Hashable]) -> list[Op]:
    """Ops that rebuild ``forwarded`` from ``original``; inserts name forwarded indexes.

    Greedy in order: each forwarded item keeps the next equal original item after
    the last one kept, else it is an insert.
    """
    positions: dict[Hashable, list[int]] = {}
    for i, key in enumerate(original):
        positions.setdefault(key, []).append(i)
    ops: list[Op] = []
    nxt = 0
    for f, key in enumerate(forwarded):
        cands = positions.get(key, [])
        j = bisect.bisect_left(cands, nxt)
        if j == len(cands):
            ops.append(f)
            continue
        i = cands[j]
        last = ops[-1] if ops else None
        if isinstance(last, list) and last[0] + last[1] == i:
            last[1] += 1
        else:
            ops.append([i, 1])
        nxt = i + 1
    return ops


def map_inserts(ops: Sequence[Op], fn: Callable[[int], int]) -> list[Op]:
    """The same ops with each insert ``n`` replaced by ``fn(n)`` (e.g. a message id)."""
    return [list(op) if isinstance(op, list) else fn(op) for op in ops]


def decode(ops: Sequence[Op], original: Sequence[T], inserted: Callable[[int], T]) -> list[T]:
    """The forwarded list: runs of ``original`` and ``inserted(n)`` for each insert."""
    out: list[T] = []
    for op in ops:
        if isinstance(op, list):
            out.extend(original[op[0] : op[0] + op[1]])
        else:
            out.append(inserted(op))
    return out


def diff(ops: Sequence[Op], n_original: int) -> list[dict[str, Any]]:
    """Entries in forwarded order, dropped originals placed where they were.

    Each entry is ``{"op": "keep"|"drop", "index": i}`` (an original position) or
    ``{"op": "insert", "ref": n}``. Drops come before the inserts that follow them,
    so a summary reads as replacing what it summarises.
    """
    out: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    nxt = 0
    for op in ops:
        if isinstance(op, list):
            start, count = op
            out.extend({"op": "drop", "index": i} for i in range(nxt, start))
            out.extend(pending)
            pending = []
            out.extend({"op": "keep", "index": i} for i in range(start, start + count))
            nxt = max(nxt, start + count)
        else:
            pending.append({"op": "insert", "ref": op})
    out.extend({"op": "drop", "index": i} for i in range(nxt, n_original))
    out.extend(pending)
    return out
