"""elide-tool-results: stubs for old large tool outputs, pairing kept, newest kept whole."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.base import PolicyContext
from policies.cuts import prefix_hash
from policies.elide_tool_results import ElideToolResults
from tests.strategies import check_pairs, conversations, count, origins


def _conv(sizes: list[int]) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    for i, n in enumerate(sizes):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        msgs += [
            {"role": "user", "content": f"q{i}"},
            {"role": "assistant", "content": None, "tool_calls": [call], "x": 1},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "y" * n},
        ]
    return [*msgs, {"role": "user", "content": "now"}]


def test_elides_oldest_first_only_as_needed() -> None:
    """Old big results become stubs oldest first; the newest `keep` stay whole."""
    conv = _conv([4000, 4000, 4000, 4000])
    budget = count(conv) - 800
    ctx = PolicyContext(budget=budget, count=count)
    r = asyncio.run(ElideToolResults(keep=1, min_tokens=100).apply(conv, ctx))
    tools = [m for m in r.messages if m["role"] == "tool"]
    assert tools[0]["content"].startswith("[handoff: tool output elided — 1,0")
    assert "call_id c0; sha256:" in tools[0]["content"]
    assert tools[1:] == [m for m in conv if m["role"] == "tool"][1:]
    assert r.changed and count(r.messages) <= budget and r.removed_tokens > 0
    check_pairs(r.messages)
    assert r.cut is not None and r.cut.elided_upto == 4
    assert prefix_hash(r.messages) == prefix_hash(conv), "hash not elision-neutral"


def test_keeps_newest_and_small_results() -> None:
    """Results under min_tokens and the newest `keep` are never elided."""
    conv = _conv([10, 4000])
    r = asyncio.run(ElideToolResults(keep=1, min_tokens=100).apply(conv, PolicyContext(5, count)))
    assert not r.changed and r.messages == conv


def test_elides_arguments_when_asked() -> None:
    """With elide_arguments, old big tool-call arguments become a JSON stub."""
    conv = _conv([10, 10])
    conv[2] = {**conv[2], "tool_calls": [{**conv[2]["tool_calls"][0]}]}
    conv[2]["tool_calls"][0]["function"] = {"name": "f", "arguments": '{"a":"' + "z" * 4000 + '"}'}
    r = asyncio.run(
        ElideToolResults(keep=1, elide_arguments=True).apply(conv, PolicyContext(200, count))
    )
    args = r.messages[2]["tool_calls"][0]["function"]["arguments"]
    assert args.startswith('{"handoff_elided":"arguments elided') and r.messages[2]["x"] == 1


def test_reuses_previous_boundary() -> None:
    """A valid previous boundary is replayed even when fewer elisions would do."""
    conv = _conv([4000, 4000, 4000])
    first = asyncio.run(
        ElideToolResults(keep=0).apply(conv, PolicyContext(count(conv) - 3000, count))
    )
    ctx = PolicyContext(budget=count(conv) - 10, count=count, previous=first.cut)
    again = ElideToolResults(keep=0).replay(conv, ctx)
    assert again.messages == first.messages


@settings(max_examples=30, deadline=None)
@given(conv=conversations(max_turns=5), frac=st.floats(0.1, 1.0))
def test_structure_kept(conv: list[dict[str, Any]], frac: float) -> None:
    """Output keeps every message in order (only tool contents rewritten) and all pairs."""
    ctx = PolicyContext(budget=int(count(conv) * frac), count=count, step_tokens=50)
    r = asyncio.run(ElideToolResults(keep=1, min_tokens=20).apply(conv, ctx))
    assert len(r.messages) == len(conv) and origins(conv, r.messages) == list(range(len(conv)))
    check_pairs(r.messages)
    assert asyncio.run(ElideToolResults(keep=1, min_tokens=20).apply(conv, ctx)) == r
