"""What the engine derived from a conversation's latest turn, for its next turn.

A resent history's messages are the objects of the last turn's parse
(``proxy.ingress.incremental_parse``), so their token counts, prefix digests and elision stubs can
be looked up by identity instead of derived again (``policies.identity_memo``). Counts and
stubs depend on how tokens are counted, so a memo is only carried on while the
counter and its calibration factor stay the same; otherwise the turn starts afresh.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from policies.base import Memo
from policies.identity_memo import IdentityMemo
from proxy.decide.tokens import ModelCounter


@dataclass(frozen=True, slots=True)
class TurnMemo:
    counter: ModelCounter
    factor: float
    weight: int = 0  # the request body's size: what the memo keeps alive is about that
    counts: IdentityMemo = field(default_factory=IdentityMemo)
    policies: Memo = field(default_factory=Memo)

    def next(self, weight: int) -> TurnMemo:
        return TurnMemo(self.counter, self.factor, weight, self.counts.next(), self.policies.next())


class TurnMemos:
    """The memo of the latest turn of up to ``capacity`` conversations whose bodies add
    up to ``max_bytes``. A memo holds its turn's messages alive (parsed, several times
    their JSON's size), which the resent bodies mostly hold too."""

    def __init__(self, capacity: int = 32, max_bytes: int = 16 << 20) -> None:
        self.capacity, self.max_bytes = capacity, max_bytes
        self._memos: OrderedDict[str, TurnMemo] = OrderedDict()
        self._bytes = 0

    def begin(self, key: str, counter: ModelCounter, factor: float, weight: int) -> TurnMemo:
        """The memo for a new turn of conversation ``key`` (whose body is ``weight``
        bytes), kept as its latest at once: a concurrent turn of the same conversation
        may start from it, and entries are checked by identity, so a partly filled memo
        is still right."""
        last = self._memos.pop(key, None)
        if last is not None:
            self._bytes -= last.weight
        if last is not None and last.counter is counter and last.factor == factor:
            memo = last.next(weight)
        else:
            memo = TurnMemo(counter, factor, weight)
        self._memos[key] = memo
        self._bytes += weight
        while self._memos and (len(self._memos) > self.capacity or self._bytes > self.max_bytes):
            self._bytes -= self._memos.popitem(last=False)[1].weight
        return memo

    def __len__(self) -> int:
        return len(self._memos)
