"""Per-conversation memory of the last compression's marks, for each window, so the
next turn to the same window replays them (and a larger window never gets the cut a
smaller one needed).

A conversation is recognised by its opening messages (system prompt and first
user turn), which every resend of the same history repeats. When the snapshot
store threads conversations, this key stays a cheap in-memory stand-in for it.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from policies.base import CutState

_OPENING = 2

CutKey = tuple[str, int]
"""(conversation key, the target model's context window)."""


def conversation_key(messages: Sequence[Mapping[str, Any]]) -> str:
    """A stable key from the conversation's first messages."""
    h = hashlib.sha256()
    for msg in messages[:_OPENING]:
        h.update(orjson.dumps(msg, option=orjson.OPT_SORT_KEYS))
        h.update(b"\x00")
    return h.hexdigest()


class CutMemory:
    """A bounded LRU of (conversation key, window) → last :class:`CutState`."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._data: OrderedDict[CutKey, CutState] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: CutKey) -> CutState | None:
        with self._lock:
            state = self._data.get(key)
            if state is not None:
                self._data.move_to_end(key)
            return state

    def put(self, key: CutKey, state: CutState) -> None:
        with self._lock:
            self._data[key] = state
            self._data.move_to_end(key)
            while len(self._data) > self._capacity:
                self._data.popitem(last=False)
