"""Short session ids, as git shortens hashes: the shortest start, six characters at least,
that names one session in the store, so a table fits a terminal and the id still works."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

MIN_LEN = 6


def _common(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def short_ids(
    every: Sequence[str], wanted: Iterable[str], min_len: int = MIN_LEN
) -> dict[str, str]:
    """For each id in ``wanted``, its shortest start (``min_len`` at least) that no other id
    in ``every`` starts or ends with (a session is named by a unique start or end)."""
    ids = sorted(set(every))
    ends = sorted(i[::-1] for i in ids)
    out: dict[str, str] = {}
    for sid in wanted:
        at = bisect.bisect_left(ids, sid)
        near = [ids[j] for j in (at - 1, at + 1) if 0 <= j < len(ids)]
        if at < len(ids) and ids[at] != sid:
            near.append(ids[at])
        n = max([min_len - 1, *(_common(sid, other) for other in near)]) + 1
        while n < len(sid) and _ends_another(ends, sid, sid[:n]):
            n += 1
        out[sid] = sid[:n]
    return out


def _ends_another(ends: list[str], sid: str, start: str) -> bool:
    """Does an id other than ``sid`` end with ``start``? (``ends`` holds the ids reversed.)"""
    key = start[::-1]
    j = bisect.bisect_left(ends, key)
    while j < len(ends) and ends[j].startswith(key):
        if ends[j] != sid[::-1]:
            return True
        j += 1
    return False
