"""Per-conversation memory of the last compression cut, so the next turn reuses it.

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


def conversation_key(messages: Sequence[Mapping[str, Any]]) -> str:
    """A stable key from the conversation's first messages."""
    h = hashlib.sha256()
    for msg in messages[:_OPENING]:
        h.update(orjson.dumps(msg, option=orjson.OPT_SORT_KEYS))
        h.update(b"\x00")
    return h.hexdigest()


class CutMemory:
    """A bounded LRU of conversation key → last :class:`CutState`."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._data: OrderedDict[str, CutState] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> CutState | None:
        with self._lock:
            state = self._data.get(key)
            if state is not None:
                self._data.move_to_end(key)
            return state

    def put(self, key: str, state: CutState) -> None:
        with self._lock:
            self._data[key] = state
            self._data.move_to_end(key)
            while len(self._data) > self._capacity:
                self._data.popitem(last=False)
