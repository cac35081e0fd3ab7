"""The chain: compress's invariants over generated conversations."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from policies.base import CutState, Message, PolicyContext
from policies.chain import Compression, compress
from policies.elide_tool_results import ElideToolResults
from policies.errors import ContextTooLarge
from policies.middle_out import MiddleOut
from policies.summarize import Summarize
from policies.truncate import Truncate
from policies.units import pinned
from tests.strategies import check_invariants, conversations, count

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


async def fake_summary(messages: Sequence[Message], previous: str | None) -> str:
    """Deterministic stand-in for the summarizer LLM."""
    return f"Goal: test. Done: {len(messages)} messages. Before: {previous or '-'}"


async def broken_summary(messages: Sequence[Message], previous: str | None) -> str:
    raise TimeoutError("summarizer timed out")


def chains() -> st.SearchStrategy[tuple[list[Any], Any]]:
    return st.sampled_from(
        [
            ([ElideToolResults(keep=1, min_tokens=50), Summarize(64), Truncate()], fake_summary),
            ([ElideToolResults(), Summarize(), Truncate()], broken_summary),
            ([ElideToolResults(keep=2, elide_arguments=True), Truncate()], None),
            ([MiddleOut()], None),
            ([Truncate()], None),
            ([ElideToolResults(keep=0, min_tokens=0)], None),
        ]
    )


def run(messages: list[dict[str, Any]], ctx: PolicyContext, chain: list[Any]) -> Compression:
    return asyncio.run(compress(messages, ctx, chain))


SMALL_CONV: list[dict[str, Any]] = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "a " * 200},
    {"role": "assistant", "content": "b " * 200},
    {"role": "user", "content": "now"},
]


@FAST
@given(conv=conversations(), chain=chains(), data=st.data())
@example(conv=SMALL_CONV, chain=([Truncate()], None), data=None)
def test_compress_invariants(
    conv: list[dict[str, Any]], chain: tuple[list[Any], Any], data: st.DataObject | None
) -> None:
    """Compressed output fits, keeps pinned and pairs, is deterministic and idempotent."""
    policies, summarizer = chain
    floor = count(pinned(conv)) + 120
    top = max(floor, count(conv) + 20)
    budget = data.draw(st.integers(floor, top)) if data else floor
    ctx = PolicyContext(budget=budget, count=count, summarize=summarizer, step_tokens=budget // 5)
    original = [dict(m) for m in conv]
    out = run(conv, ctx, policies)
    assert conv == original, "input mutated"
    check_invariants(conv, out.messages, budget)
    assert out.tokens_after == count(out.messages) and out.tokens_before == count(conv)
    assert run(conv, ctx, policies) == out
    again = run(out.messages, ctx, policies)
    assert again.messages == out.messages and not again.steps
    if count(conv) <= budget:
        assert out.messages == conv and out.applied == ()
    else:
        assert out.applied == tuple(s.policy for s in out.steps) and out.applied


@settings(max_examples=15, deadline=None)
@given(conv=conversations(max_turns=3), data=st.data())
def test_context_too_large_only_when_pinned_cannot_fit(
    conv: list[dict[str, Any]], data: st.DataObject
) -> None:
    """ContextTooLarge carries the numbers and is raised only for uncuttable pinned messages."""
    system = {"role": "system", "content": "rules " * 400}
    conv = [system, *conv]
    budget = data.draw(st.integers(50, count([system]) - 1))
    ctx = PolicyContext(budget=budget, count=count, step_tokens=10)
    with pytest.raises(ContextTooLarge) as err:
        run(conv, ctx, [Truncate()])
    assert err.value.budget == budget
    assert err.value.pinned_tokens == count(pinned(conv)) > budget


def test_oversized_newest_user_message_is_middle_cut() -> None:
    """A pasted file bigger than the whole budget is cut in its middle, with a marker."""
    conv = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "old"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "START " + "x" * 20_000 + " END"},
    ]
    ctx = PolicyContext(budget=1000, count=count, step_tokens=200)
    out = run(conv, ctx, [Truncate()])
    last = out.messages[-1]["content"]
    assert count(out.messages) <= 1000
    assert last.startswith("START ") and last.endswith(" END")
    assert "characters cut from the middle of this message]" in last
    assert out.applied == ("truncate", "oversized")


def test_fitting_input_keeps_previous_state() -> None:
    """A request that fits is passed through and the previous cut state kept for later."""
    prev = CutState(cut=2, policy="truncate", prefix_hash="x")
    ctx = PolicyContext(budget=10_000, count=count, previous=prev)
    out = run(SMALL_CONV, ctx, [Truncate()])
    assert out.messages == SMALL_CONV and out.cut is prev and out.steps == []


def _agent(turns: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are an agent."}]
    for t in range(turns):
        msgs += [
            {"role": "user", "content": f"task {t} " + "detail " * 30},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{t}",
                        "type": "function",
                        "function": {"name": "ls", "arguments": "{}"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{t}", "content": "file\n" * (20 + 40 * (t % 3))},
            {"role": "assistant", "content": f"done {t} " + "words " * 20},
        ]
    return msgs


def test_next_turn_reuses_cut_and_summary() -> None:
    """A new turn that still fits under the previous cut forwards a byte-identical prefix."""
    calls: list[str | None] = []

    async def summarizer(messages: Sequence[Message], previous: str | None) -> str:
        calls.append(previous)
        return f"summary #{len(calls)}"

    chain: list[Any] = [ElideToolResults(), Summarize(100), Truncate()]
    conv = _agent(12)
    ctx = PolicyContext(budget=1500, count=count, summarize=summarizer, step_tokens=500)
    first = run(conv, ctx, chain)
    assert first.cut is not None and first.cut.summary == "summary #1"
    grown = [*conv, {"role": "assistant", "content": "more"}, {"role": "user", "content": "next"}]
    second = run(grown, PolicyContext(1500, count, summarizer, first.cut, 500), chain)
    assert second.messages[: len(first.messages)] == first.messages
    assert second.cut == first.cut and len(calls) == 1


def test_cut_moves_by_a_step_and_extends_summary() -> None:
    """When the cut must move it leaves step headroom and extends the cached summary."""
    calls: list[str | None] = []

    async def summarizer(messages: Sequence[Message], previous: str | None) -> str:
        calls.append(previous)
        return f"summary #{len(calls)}"

    chain: list[Any] = [Summarize(50), Truncate()]
    conv = _agent(12)
    first = run(conv, PolicyContext(1500, count, summarizer, None, 500), chain)
    grown = _agent(16)
    second = run(grown, PolicyContext(1500, count, summarizer, first.cut, 500), chain)
    assert first.cut is not None and second.cut is not None
    assert second.cut.cut > first.cut.cut
    assert calls == [None, "summary #1"]
    assert count(second.messages) <= 1500 - 500 + 50
