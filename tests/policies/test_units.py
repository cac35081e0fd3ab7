"""units, regions and prefix hashes."""

from __future__ import annotations

import copy
from typing import Any

from policies.base import Memo
from policies.cuts import content_digest, dumps, fingerprint, prefix_hash
from policies.units import region, tail_start, units

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
]


def test_units_group_tool_results_with_their_call() -> None:
    """An assistant tool_calls message and its results form one unit."""
    assert [list(u) for u in units(CONV)] == [[0], [1], [2, 3], [4], [5], [6, 7]]


def test_tail_and_region() -> None:
    """The tail starts at the newest user message; pinned roles are not droppable."""
    assert tail_start(CONV) == 5
    reg = region(CONV)
    assert reg.points == [0, 1, 3] and reg.dropped(3) == [1, 2, 3] and reg.end(1) == 2


def test_prefix_hash_is_stable_and_sensitive() -> None:
    """Key order does not matter; content does."""
    a = [{"role": "user", "content": "x"}]
    assert prefix_hash(a) == prefix_hash([{"content": "x", "role": "user"}])
    assert prefix_hash(a) != prefix_hash([{"role": "user", "content": "y"}])


def test_memoised_digests_equal_fresh_ones() -> None:
    """A context's memo changes the cost, never the result: the same fingerprint and
    size for a content, and the same prefix hash, with or without it, and a memo that
    saw one conversation does not leak into another built of equal-looking objects,
    this turn or the next."""
    memo = Memo()
    tool = {"role": "tool", "tool_call_id": "c", "content": "a long tool result " * 50}
    assert content_digest(tool["content"], memo.contents) == content_digest(tool["content"])
    assert content_digest(tool["content"], memo.contents) == (
        fingerprint(tool["content"]),
        len(dumps(tool["content"])),
    )
    conv = [*CONV, tool]
    assert prefix_hash(conv, memo) == prefix_hash(conv) == prefix_hash(conv, memo)
    other = [*CONV, {**tool, "content": "another result " * 50}]
    assert prefix_hash(other, memo) == prefix_hash(other) != prefix_hash(conv)
    later = memo.next()
    assert prefix_hash(conv, later) == prefix_hash(conv)
    assert prefix_hash(copy.deepcopy(other), later) == prefix_hash(other)
