"""truncate and middle-out: newest whole units kept, one accurate note at the cut."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.base import PolicyContext
from policies.cuts import size
from policies.middle_out import MiddleOut
from policies.truncate import Truncate
from policies.units import pinned
from tests.strategies import check_invariants, check_pairs, conversations, count, is_made

NOTE = re.compile(r"^\[handoff: ([\d,]+) earlier messages \(([\d,]+) tokens\) were omitted")


@settings(max_examples=40, deadline=None)
@given(
    conv=conversations(max_turns=6),
    policy=st.sampled_from([Truncate(), MiddleOut()]),
    data=st.data(),
)
def test_note_is_accurate_and_invariants_hold(
    conv: list[dict[str, Any]], policy: Truncate, data: st.DataObject
) -> None:
    """The note's counts match what was dropped; the output keeps pinned, pairs and order."""
    budget = data.draw(st.integers(count(pinned(conv)) // 2, count(conv) + 10))
    ctx = PolicyContext(budget=budget, count=count, step_tokens=budget // 5)
    r = asyncio.run(policy.apply(conv, ctx))
    check_pairs(r.messages)
    notes = [m for m in r.messages if is_made(m)]
    if not r.changed:
        assert r.messages == conv and not notes
        return
    (note,) = notes
    assert note["role"] == "user"
    m = NOTE.match(note["content"])
    assert m, note
    kept_ids = {id(x) for x in r.messages}
    dropped = [x for x in conv if id(x) not in kept_ids]
    assert int(m.group(1).replace(",", "")) == len(dropped) == r.removed_messages
    assert int(m.group(2).replace(",", "")) == sum(size(ctx, x) for x in dropped)
    if count(r.messages) <= budget:
        check_invariants(conv, r.messages, budget)
        assert asyncio.run(policy.apply(r.messages, ctx)).changed is False


def test_middle_out_keeps_first_user_turn() -> None:
    """middle-out keeps the system prompt and first user message, drops right after them."""
    conv = [{"role": "system", "content": "s"}, {"role": "user", "content": "the task"}]
    for i in range(10):
        conv += [
            {"role": "assistant", "content": f"a{i} " * 50},
            {"role": "user", "content": f"u{i}"},
        ]
    r = asyncio.run(MiddleOut().apply(conv, PolicyContext(300, count, step_tokens=50)))
    assert r.messages[:2] == conv[:2] and is_made(r.messages[2]) and r.messages[-1] == conv[-1]
    t = asyncio.run(Truncate().apply(conv, PolicyContext(300, count, step_tokens=50)))
    assert t.messages[1] != conv[1]


def test_a_retry_below_the_previous_cut_keeps_it() -> None:
    """The previous turn's cut already drops every droppable unit and no longer fits (an
    upstream refused it, so the retry aims lower): the cut is kept, not an IndexError."""
    conv = [
        {"role": "user", "content": "old " * 40},
        {"role": "assistant", "content": "ok " * 40},
        {"role": "user", "content": "latest " * 400},
    ]
    first = asyncio.run(Truncate().apply(conv, PolicyContext(budget=count(conv) - 50, count=count)))
    assert first.changed and first.cut is not None
    ctx = PolicyContext(budget=count(conv[-1:]) // 2, count=count, previous=first.cut)
    again = asyncio.run(Truncate().apply(conv, ctx))
    assert again.messages == first.messages and again.cut == first.cut
