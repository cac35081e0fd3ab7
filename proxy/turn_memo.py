"""What the engine derived from a conversation's latest turn, for its next turn.

A resent history's messages are the objects of the last turn's parse
(``proxy.resent``), so their token counts, prefix digests and elision stubs can
be looked up by identity instead of derived again (``proxy.recall``). Counts and
stubs depend on how tokens are counted, so a memo is only carried on while the
counter and its calibration factor stay the same; otherwise the turn starts afresh.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from policies.base import Memo
from proxy.recall import Recall
from proxy.tokens import ModelCounter


@dataclass(frozen=True, slots=True)
class TurnMemo:
    counter: ModelCounter
    factor: float
    counts: Recall = field(default_factory=Recall)
    policies: Memo = field(default_factory=Memo)

    def next(self) -> TurnMemo:
        return TurnMemo(self.counter, self.factor, self.counts.next(), self.policies.next())


class TurnMemos:
    """The memo of the latest turn of up to ``capacity`` conversations (each holds that
    turn's messages alive, which the resent bodies mostly hold too)."""

    def __init__(self, capacity: int = 32) -> None:
        self.capacity = capacity
        self._memos: OrderedDict[str, TurnMemo] = OrderedDict()

    def begin(self, key: str, counter: ModelCounter, factor: float) -> TurnMemo:
        """The memo for a new turn of conversation ``key``, kept as its latest at once
        (a concurrent turn of the same conversation may start from it: entries are
        checked by identity, so a partly filled memo is still right)."""
        last = self._memos.pop(key, None)
        if last is not None and last.counter is counter and last.factor == factor:
            memo = last.next()
        else:
            memo = TurnMemo(counter, factor)
        self._memos[key] = memo
        while len(self._memos) > self.capacity:
            self._memos.popitem(last=False)
        return memo

    def __len__(self) -> int:
        return len(self._memos)
