"""Units, the pinned messages, the recent part, and prefix hashes."""

from __future__ import annotations

import copy
from typing import Any

from policies.base import Memo
from policies.fitting import prefix_hash
from policies.units import newest_user, shape, units

CALL = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
CONV: list[dict[str, Any]] = [
    {"role": "system", "content": "s"},
    {"role": "user", "content": "u1"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c", "content": "r"},
    {"role": "developer", "content": "d"},
    {"role": "user", "content": "u2"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c", "content": "r"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c", "content": "r"},
]


def test_units_group_tool_results_with_their_call() -> None:
    """An assistant tool_calls message and its results form one unit."""
    assert [list(u) for u in units(CONV)] == [[0], [1], [2, 3], [4], [5], [6, 7], [8, 9]]


def test_pinned_recent_and_droppable() -> None:
    """System messages and the newest user message are pinned; tool rounds after the
    newest user message are ordinary units, and only the newest ``keep`` are recent."""
    s = shape(CONV, keep=1)
    assert newest_user(CONV) == s.newest_user == 5 and s.pinned == {0, 4}
    assert s.recent == 8
    assert [list(u) for u in s.droppable()] == [[1], [2, 3], [6, 7]]
    assert [list(u) for u in s.droppable(reach_recent=True)] == [[1], [2, 3], [6, 7]]
    assert shape(CONV, keep=3).recent == 2
    assert [list(u) for u in shape(CONV, keep=0).droppable()] == [[1], [2, 3], [6, 7]]


def test_middle_out_pins_the_opening() -> None:
    """With the opening pinned, nothing up to the first user message is droppable."""
    s = shape(CONV, keep=1, pin_opening=True)
    assert {0, 1} <= s.pinned and [list(u) for u in s.droppable()] == [[2, 3], [6, 7]]


def test_prefix_hash_is_stable_and_sensitive() -> None:
    """Key order does not matter; content does."""
    a = [{"role": "user", "content": "x"}]
    assert prefix_hash(a) == prefix_hash([{"content": "x", "role": "user"}])
    assert prefix_hash(a) != prefix_hash([{"role": "user", "content": "y"}])


def test_memoised_hashes_equal_fresh_ones() -> None:
    """A memo changes the cost, never the result, and one that saw a conversation does
    not leak into another built of equal-looking objects, this turn or the next."""
    memo = Memo()
    tool = {"role": "tool", "tool_call_id": "c", "content": "a long tool result " * 50}
    conv = [*CONV, tool]
    assert prefix_hash(conv, memo) == prefix_hash(conv) == prefix_hash(conv, memo)
    other = [*CONV, {**tool, "content": "another result " * 50}]
    assert prefix_hash(other, memo) == prefix_hash(other) != prefix_hash(conv)
    later = memo.next()
    assert prefix_hash(conv, later) == prefix_hash(conv)
    assert prefix_hash(copy.deepcopy(other), later) == prefix_hash(other)
