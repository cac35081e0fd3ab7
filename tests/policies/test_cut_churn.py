"""Moves that are worth their cost: the drop mark does not creep every turn, the note is
not left shrunk when the last resorts made room for it, and the recent part weighs
its calls' arguments too (issue 28, the 8k agent rows of bench_cuts)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from itertools import pairwise
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from policies.base import Level, PolicyContext
from policies.chain import POLICIES, Compression, compress
from policies.fitting import DROP, NOTE_HEADER, Fitting
from policies.last_resort import LAST_RESORT
from policies.rewriting import RewriteLevel
from policies.truncate import restore_note
from policies.units import PINNED_ROLES, shape
from tests.strategies import agent_loops, count

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _chain() -> list[Level]:
    return [POLICIES[n]() for n in ("elide-tool-results", "elide-arguments", "trim-pastes",
                                    "trim-prose", "truncate")]  # fmt: skip


def _loop(rounds: int, lines: int = 70, system: int = 300) -> list[dict[str, Any]]:
    """An agent's task: a long system prompt, one request, ``rounds`` file reads of
    ``lines`` lines each (about 9 tokens a line)."""
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent. " * system},
        {"role": "user", "content": "Find why the tests fail in src/ and fix it."},
    ]
    for r in range(rounds):
        cid = f"call_{r}"
        call = {"name": "read_file", "arguments": json.dumps({"path": f"src/module_{r}.py"})}
        msgs.append(
            {
                "role": "assistant",
                "content": f"Reading module {r}.",
                "tool_calls": [{"id": cid, "type": "function", "function": call}],
            }
        )
        body = "\n".join(f"def f_{r}_{j}(x): return x + {j}" for j in range(lines))
        msgs.append({"role": "tool", "tool_call_id": cid, "content": body})
    return msgs


def _run(msgs: list[dict[str, Any]], ctx: PolicyContext) -> Compression:
    return asyncio.run(compress(msgs, ctx, _chain()))


def _note(out: Compression) -> str | None:
    return next(
        (m["content"] for m in out.messages if str(m.get("content", "")).startswith(NOTE_HEADER)),
        None,
    )


def test_the_drop_mark_does_not_creep_every_turn() -> None:
    """opencode's case: the three newest whole results keep the prompt above the
    low-water mark, so after the old result is stubbed nothing reaches it. Before, the
    drop mark moved over the two stubbed messages each turn (the note, near the start,
    changed every turn); now it moves only when that frees a fair share of the room."""
    budget, prev, note = 4000, None, None
    changed: list[int] = []
    for r in range(12, 30):
        ctx = PolicyContext(budget, count, target=int(budget * 0.6), previous=prev)
        out = _run(_loop(r), ctx)
        assert out.tokens_after <= budget
        now = _note(out)
        if r > 12 and now != note:
            changed.append(r)
        note, prev = now, out.cut
    assert changed, "the session should move the cut now and then"
    assert all(b - a > 1 for a, b in pairwise(changed)), changed
    assert len(changed) <= 8, changed


def test_a_note_shrunk_before_the_recent_results_were_stubbed_is_written_back() -> None:
    """The counterexample: shrinking the note alone could not fit (the system prompt and
    the recent results are over the budget), and stubbing a recent result then left
    ~330 tokens spare where the digest needed ~80; the note stayed a bare count."""
    out = _run(_loop(20, system=380), PolicyContext(4000, count, target=2400))
    assert "elide-recent-results" in out.applied and out.tokens_after <= 4000
    assert out.cut is not None and out.cut.marks[DROP].keep == 0
    note = _note(out)
    assert note is not None and "• read: src/module_0.py; src/module_1.py" in note


@FAST
@given(conv=agent_loops(), data=st.data())
def test_the_note_is_shrunk_only_when_it_cannot_fit_whole(
    conv: list[dict[str, Any]], data: st.DataObject
) -> None:
    """On a first compression, a note left shrunk is one that, written whole, would not
    fit the budget with everything else as the last resorts left it."""
    low = count([m for m in conv if m.get("role") in PINNED_ROLES]) + 900
    budget = data.draw(st.integers(low, max(low, count(conv) - 1)))
    ctx = PolicyContext(budget, count, target=int(budget * data.draw(st.sampled_from([0.6, 1]))))
    out = _run(conv, ctx)
    mark = out.cut.marks.get(DROP) if out.cut is not None else None
    if mark is None or not mark.keep:
        return
    levels = [*_chain(), *LAST_RESORT]
    rewriters = [lv for lv in levels if isinstance(lv, RewriteLevel)]
    fit = Fitting([dict(m) for m in conv], replace(ctx, previous=out.cut), rewriters)
    assert fit.render()[0] == out.messages
    assert restore_note(fit, ctx) and fit.tokens() > budget


def test_the_recent_part_weighs_the_arguments_of_its_calls() -> None:
    """Three writes of big files have tiny results; counted alone they all fit the recent
    share, and their arguments (~2k tokens each at 8k) set a floor no move could go
    below. With the units counted whole, only the newest that fit are spared."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Write the modules."}]
    for r in range(3):
        cid = f"w{r}"
        body = "\n".join(f"def g_{r}_{j}(x): return x * {j}" for j in range(200))
        args = json.dumps({"path": f"src/m{r}.py", "content": body})
        call = {"name": "write_file", "arguments": args}
        msgs.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"id": cid, "type": "function", "function": call}],
            }
        )
        msgs.append({"role": "tool", "tool_call_id": cid, "content": f"Wrote src/m{r}.py"})
    budget = 4 * count([msgs[-2]])

    def room(indices: list[int]) -> bool:
        return sum(count([msgs[i]]) for i in indices) <= budget // 2

    assert shape(msgs, keep=3).recent == 1
    assert shape(msgs, keep=3, room=room).recent == 5
