"""The chain: compress's invariants over generated chats and agent loops, the sacrifice
order, byte-stable replays, the low-water mark and the last resorts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from policies.base import CutState, Level, Message, PolicyContext
from policies.chain import POLICIES, Compression, compress
from policies.elide_arguments import ElideArguments
from policies.elide_tool_results import ElideToolResults
from policies.errors import ContextTooLarge
from policies.fitting import DROP, NOTE_HEADER, Fitting
from policies.last_resort import LAST_RESORT
from policies.summarize import Summarize
from policies.trim_pastes import TrimPastes
from policies.trim_prose import TrimProse
from policies.truncate import MiddleOut, Truncate
from policies.units import PINNED_ROLES, TOOL_ROLES
from tests.strategies import agent_loops, check_invariants, conversations, count

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
LAST_NAMES = {lv.name for lv in LAST_RESORT}


async def fake_summary(messages: Sequence[Message], previous: str | None) -> str:
    """Deterministic stand-in for the summarizer LLM."""
    return f"Goal: test. Done: {len(messages)} messages. Before: {(previous or '-')[:20]}"


async def broken_summary(messages: Sequence[Message], previous: str | None) -> str:
    raise TimeoutError("summarizer timed out")


def default_chain() -> list[Level]:
    return [POLICIES[n]() for n in ("elide-tool-results", "elide-arguments", "trim-pastes",
                                    "trim-prose", "truncate")]  # fmt: skip


def chains() -> st.SearchStrategy[tuple[list[Level], Any]]:
    return st.sampled_from(
        [
            (default_chain(), None),
            ([ElideToolResults(), Summarize(64), Truncate()], fake_summary),
            ([ElideToolResults(), Summarize(64), Truncate()], broken_summary),
            ([ElideToolResults(), ElideArguments(), Truncate()], None),
            ([TrimPastes(), TrimProse(), MiddleOut()], None),
            ([Truncate()], None),
            ([ElideToolResults()], None),
        ]
    )


def run(
    messages: list[dict[str, Any]], ctx: PolicyContext, chain: Sequence[Level], keep: int = 3
) -> Compression:
    return asyncio.run(compress(messages, ctx, chain, keep=keep))


def floor(conv: Sequence[Message]) -> int:
    """A budget every conversation with these system messages can be fitted into."""
    return count([m for m in conv if m.get("role") in PINNED_ROLES]) + 900


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
    conv: list[dict[str, Any]], chain: tuple[list[Level], Any], data: st.DataObject | None
) -> None:
    """Output fits, keeps system messages, the newest user message, the last unit and
    every pair, shows each original as it was or marked, sacrifices older tool results
    first, is deterministic, and compressing it again changes nothing."""
    levels, summarizer = chain
    low = floor(conv)
    budget = data.draw(st.integers(low, max(low, count(conv) + 20))) if data else low
    ctx = PolicyContext(budget=budget, count=count, summarize=summarizer)
    original = json.loads(json.dumps(conv))
    out = run(conv, ctx, levels)
    assert conv == original, "input mutated"
    check_invariants(conv, out.messages, budget, out.origins)
    assert out.tokens_after == count(out.messages) and out.tokens_before == count(conv)
    assert run(conv, ctx, levels) == out
    again = run(out.messages, ctx, levels)
    assert again.messages == out.messages and not again.steps
    if count(conv) <= budget:
        assert out.messages == conv and out.applied == ()
    else:
        assert out.applied == tuple(s.policy for s in out.steps) and out.applied


@FAST
@given(conv=agent_loops(), data=st.data())
def test_fresh_cut_gives_up_the_cheapest_first(
    conv: list[dict[str, Any]], data: st.DataObject
) -> None:
    """On a first compression, no old unit is dropped while an old tool result it could
    have stubbed instead stands whole; and without a last resort, the recent tool
    results (the newest ``keep`` that fit half the budget) are whole."""
    low = floor(conv)
    budget = data.draw(st.integers(low, max(low, count(conv) - 1)))
    ctx = PolicyContext(budget=budget, count=count)
    out = run(conv, ctx, default_chain())
    s = Fitting([dict(m) for m in conv], ctx, [], keep=3).shape
    shown = {j: o for o, j in zip(out.messages, out.origins, strict=True) if j is not None}
    dropped = any(j not in shown for j in range(len(conv)))
    if dropped and not LAST_NAMES.intersection(out.applied):
        for i in range(s.recent):
            m = conv[i]
            if i in shown and m.get("role") in TOOL_ROLES and len(str(m["content"])) > 400:
                assert shown[i] != m, f"old result {i} whole while units were dropped"
    if not LAST_NAMES.intersection(out.applied):
        tools = [i for i, m in enumerate(conv) if m.get("role") in TOOL_ROLES and i >= s.recent]
        assert all(shown.get(i) == conv[i] for i in tools), "a recent result was cut"


@FAST
@given(conv=conversations(), chain=chains(), data=st.data())
def test_replay_keeps_the_forwarded_prefix(
    conv: list[dict[str, Any]], chain: tuple[list[Level], Any], data: st.DataObject
) -> None:
    """The next turn that fits under the previous marks forwards the previous request's
    messages byte for byte, even when the count drifts (calibration), and inserts
    nothing new."""
    levels, summarizer = chain
    split = data.draw(st.integers(max(1, len(conv) - 4), len(conv)))
    head = conv[:split]
    low = floor(conv)
    budget = data.draw(st.integers(low, max(low, count(head) - 1)))
    target = int(budget * data.draw(st.sampled_from([0.5, 0.7, 1.0])))
    first = run(head, PolicyContext(budget, count, target, summarize=summarizer), levels)
    drift = data.draw(st.sampled_from([1.0, 1.01, 0.99]))

    def drifted(ms: Sequence[Message]) -> int:
        return round(count(ms) * drift)

    second = run(
        conv, PolicyContext(budget, drifted, previous=first.cut, summarize=summarizer), levels
    )
    replayed = second.steps and all(s.note == "as on the previous turn" for s in second.steps)
    newest_cut = any(name.startswith("cut-newest") for name in first.applied)
    if replayed and first.steps and not newest_cut:
        event("replayed")
        differ = next(
            (
                i
                for i, (a, b) in enumerate(zip(first.messages, second.messages, strict=False))
                if a != b
            ),
            None,
        )
        assert differ is None and len(second.messages) >= len(first.messages), (
            f"message {differ} changed: {first.messages[differ or 0]} -> "
            f"{second.messages[differ or 0]}; split {split} of {len(conv)}, budget {budget}, "
            f"target {target}, first {first.applied}"
        )


def _agent_loop(rounds: int, lines: int = 60) -> list[dict[str, Any]]:
    """One user turn, then ``rounds`` tool rounds reading files (an agent CLI's task)."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. " * 10},
        {"role": "user", "content": "Find why the tests fail in src/ and fix it."},
    ]
    for r in range(rounds):
        cid = f"call_{r}"
        args = json.dumps({"path": f"src/module_{r}.py"})
        msgs.append(
            {
                "role": "assistant",
                "content": f"Reading module {r}.",
                "tool_calls": [
                    {
                        "id": cid,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": args},
                    }
                ],
            }
        )
        body = "\n".join(f"def f_{r}_{j}(x): return x + {j}" for j in range(lines))
        msgs.append({"role": "tool", "tool_call_id": cid, "content": body})
    return msgs


def test_agent_loop_after_one_user_message_is_compressed() -> None:
    """The tool rounds after the newest user message are ordinary units: old outputs are
    stubbed and the oldest dropped, while the task and the newest output stay whole."""
    conv = _agent_loop(40)
    out = run(conv, PolicyContext(budget=4000, count=count, target=3000), default_chain())
    assert count(out.messages) <= 3000
    assert out.messages[1] == conv[1] and out.messages[-1] == conv[-1]
    assert "elide-tool-results" in out.applied
    stubs = [
        m for m in out.messages if m.get("role") == "tool" and m["content"].startswith("[handoff: ")
    ]
    assert stubs and all("lines; it began: 'def f_" in m["content"] for m in stubs)


def test_moved_cut_aims_at_the_low_water_mark() -> None:
    """A cut that must move goes down to the target, so the next turns append under it."""
    conv = _agent_loop(40)
    out = run(conv, PolicyContext(budget=4000, count=count, target=2500), default_chain())
    assert count(out.messages) <= 2500
    grown = _agent_loop(41)
    nxt = run(
        grown,
        PolicyContext(budget=4000, count=count, target=2500, previous=out.cut),
        default_chain(),
    )
    assert all(s.note == "as on the previous turn" for s in nxt.steps)
    assert nxt.messages[: len(out.messages)] == out.messages


def test_digest_only_grows_as_the_cut_moves() -> None:
    """Each move of the cut appends a block to the note; earlier blocks stay as they were."""
    ctx = PolicyContext(budget=3000, count=count, target=2000)
    chain = [Truncate()]
    conv = _agent_loop(30, lines=20)
    first = run(conv, ctx, chain)
    note1 = next(
        m["content"]
        for m in first.messages
        if m["content"] and m["content"].startswith(NOTE_HEADER)
    )
    grown = _agent_loop(45, lines=20)
    second = run(grown, PolicyContext(3000, count, target=2000, previous=first.cut), chain)
    note2 = next(
        m["content"]
        for m in second.messages
        if m["content"] and m["content"].startswith(NOTE_HEADER)
    )
    assert second.cut is not None and first.cut is not None
    assert second.cut.marks[DROP].upto > first.cut.marks[DROP].upto
    assert note2.startswith(note1) and len(note2) > len(note1)


def test_summary_blocks_are_written_once_and_continued() -> None:
    """With a summarizer, each move of the cut asks for a summary of only the newly dropped
    messages, given what was summarized before; replays ask for nothing."""
    calls: list[tuple[int, str | None]] = []

    async def summarizer(messages: Sequence[Message], previous: str | None) -> str:
        calls.append((len(messages), previous))
        return f"summary #{len(calls)}"

    chain: list[Level] = [ElideToolResults(), Summarize(40), Truncate()]
    conv = _agent_loop(30, lines=20)
    first = run(conv, PolicyContext(3000, count, target=2000, summarize=summarizer), chain)
    assert len(calls) == 1 and calls[0][1] is None
    same = run(
        [*conv],
        PolicyContext(3000, count, target=2000, summarize=summarizer, previous=first.cut),
        chain,
    )
    assert same.messages == first.messages and len(calls) == 1
    grown = _agent_loop(60, lines=20)
    run(
        grown,
        PolicyContext(3000, count, target=2000, summarize=summarizer, previous=first.cut),
        chain,
    )
    assert len(calls) == 2 and calls[1][1] is not None and "summary #1" in calls[1][1]


def test_failed_summarizer_falls_back_to_the_digest() -> None:
    """A summarizer that fails never fails the request: the note is the digest, and the
    step says why the summary was not used."""
    conv = _agent_loop(30, lines=20)
    out = run(conv, PolicyContext(3000, count, target=2000, summarize=broken_summary),
              [Summarize(40), Truncate()])  # fmt: skip
    step = next(s for s in out.steps if s.policy == "summarize")
    assert "summary not used: summarizer failed: TimeoutError" in step.note
    assert any(m["content"] and m["content"].startswith(NOTE_HEADER) for m in out.messages)


@settings(max_examples=25, deadline=None)
@given(conv=conversations(max_turns=3), data=st.data())
def test_context_too_large_only_when_the_system_prompt_cannot_fit(
    conv: list[dict[str, Any]], data: st.DataObject
) -> None:
    """ContextTooLarge is raised only when the system messages alone exceed the budget."""
    system = {"role": "system", "content": "rules " * 400}
    conv = [system, *conv]
    pinned = count([m for m in conv if m.get("role") in PINNED_ROLES])
    budget = data.draw(st.integers(50, pinned - 1))
    with pytest.raises(ContextTooLarge) as err:
        run(conv, PolicyContext(budget=budget, count=count), [Truncate()])
    assert err.value.budget == budget and err.value.pinned_tokens == pinned


def test_huge_newest_user_message_is_cut_not_refused() -> None:
    """A user message bigger than the whole budget (a client's own compaction request) is
    cut in its middle, with a marker, and the request fits."""
    conv = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "old"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "START " + "x" * 20_000 + " END"},
    ]
    out = run(conv, PolicyContext(budget=1000, count=count), [Truncate()])
    last = out.messages[-1]["content"]
    assert count(out.messages) <= 1000
    assert last.startswith("START ") and last.endswith(" END")
    assert "characters cut from the middle of this message]" in last
    assert "cut-newest-user" in out.applied


def test_single_newest_result_over_the_budget_keeps_head_and_tail() -> None:
    """Only the newest tool result may be cut when it alone exceeds the budget."""
    conv = _agent_loop(3, lines=20)
    conv[-1] = {**conv[-1], "content": "HEAD\n" + "row\n" * 8000 + "TAIL"}
    out = run(conv, PolicyContext(budget=2000, count=count), default_chain())
    newest = out.messages[-1]["content"]
    assert count(out.messages) <= 2000
    assert newest.startswith("HEAD") and newest.endswith("TAIL") and "cut from the middle" in newest


def test_fitting_input_keeps_previous_state() -> None:
    """A request that fits is passed through and the previous marks kept for later."""
    prev = CutState({})
    out = run(SMALL_CONV, PolicyContext(budget=10_000, count=count, previous=prev), [Truncate()])
    assert out.messages == SMALL_CONV and out.cut is prev and out.steps == []


def test_a_changed_history_invalidates_the_marks() -> None:
    """Marks hold only while the history starts with the messages they covered."""
    conv = _agent_loop(30, lines=20)
    first = run(conv, PolicyContext(3000, count, target=2000), default_chain())
    edited = [conv[0], {"role": "user", "content": "A different task."}, *conv[2:]]
    second = run(
        edited, PolicyContext(3000, count, target=2000, previous=first.cut), default_chain()
    )
    assert not any(s.note == "as on the previous turn" for s in second.steps)
    assert second.messages[1] == edited[1]


def test_a_retry_below_a_cut_that_dropped_everything() -> None:
    """The previous cut already drops every droppable unit and the upstream refused it, so
    the retry aims lower: what is left to give up (the newest user message's middle) goes,
    and nothing raises."""
    conv = [
        {"role": "user", "content": "old " * 40},
        {"role": "assistant", "content": "ok " * 40},
        {"role": "user", "content": "latest " * 400},
    ]
    first = run(conv, PolicyContext(budget=count(conv) - 50, count=count), [Truncate()])
    assert first.cut is not None and DROP in first.cut.marks
    budget = count(conv[-1:]) // 2
    again = run(conv, PolicyContext(budget=budget, count=count, previous=first.cut), [Truncate()])
    assert count(again.messages) <= budget and "cut-newest-user" in again.applied


@pytest.mark.parametrize("budget", [0, 1, 50])
def test_nothing_to_give_up_is_context_too_large(budget: int) -> None:
    """No messages, or only a system prompt, in a budget too small: ContextTooLarge from
    every level and last resort, never an exception of their own."""
    for conv in ([], [{"role": "system", "content": "rules " * 100}]):
        if count(conv) <= budget:
            continue
        with pytest.raises(ContextTooLarge):
            run(conv, PolicyContext(budget=budget, count=count), default_chain())
