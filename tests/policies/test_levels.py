"""Each rewriting level alone: what it shortens, what it leaves, and that the result is
decided by the message and the mark, never by a count."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson

from policies.base import Mark, PolicyContext
from policies.elide_arguments import ElideArguments, slim_arguments
from policies.elide_tool_results import ElideToolResults, tool_stub
from policies.fitting import Fitting
from policies.rewriting import RewriteLevel
from policies.trim_pastes import TrimPastes
from policies.trim_prose import TrimProse
from tests.strategies import count

FILE = "\n".join(f"line {i}: some code here" for i in range(400))


def _fit(msgs: list[dict[str, Any]], level: RewriteLevel, budget: int) -> Fitting:
    ctx = PolicyContext(budget=budget, count=count)
    fit = Fitting(msgs, ctx, [level], keep=1)
    asyncio.run(level.extend(fit, ctx))
    return fit


def test_tool_stub_says_what_was_left_out() -> None:
    """The stub keeps the call id and states size and first line, from the output alone."""
    msg = {"role": "tool", "tool_call_id": "call_9", "content": FILE}
    stub = tool_stub(msg)
    assert stub is not None and stub["tool_call_id"] == "call_9"
    assert stub["content"] == (
        f"[handoff: output of call call_9 left out: {len(FILE):,} characters, 400 lines; "
        "it began: 'line 0: some code here']"
    )
    assert tool_stub({"role": "tool", "tool_call_id": "c", "content": "ok"}) is None


def test_elide_tool_results_stubs_oldest_first_and_only_as_needed() -> None:
    """Old outputs are stubbed oldest first, only as many as the prompt needs; the
    recent one stays."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(6):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        msgs += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": FILE},
        ]
    budget = count(msgs) - 2 * (count([msgs[2]]) - count([])) + 200
    fit = _fit(msgs, ElideToolResults(), budget)
    out, _ = fit.render()
    stubbed = [i for i, m in enumerate(out) if m.get("role") == "tool" and m["content"] != FILE]
    assert stubbed == [2, 4] and count(out) <= budget
    assert out[-1] == msgs[-1]


def test_slim_arguments_keeps_the_small_ones_and_valid_json() -> None:
    """Bulky values become markers; the path and the call stay; the result is JSON."""
    args = json.dumps({"path": "src/a.py", "content": FILE})
    slim = slim_arguments(args)
    assert slim is not None
    parsed = orjson.loads(slim)
    assert parsed["path"] == "src/a.py" and parsed["content"].startswith("[handoff: ")
    assert slim_arguments(json.dumps({"path": "src/a.py"})) is None
    assert "handoff_elided" in orjson.loads(slim_arguments("x" * 1000) or "{}")


def test_elide_arguments_level() -> None:
    """An old write_file call loses its file body, not its path."""
    call = {"id": "c", "type": "function",
            "function": {"name": "write_file", "arguments": json.dumps({"path": "a.py", "content": FILE})}}  # fmt: skip
    msgs = [
        {"role": "user", "content": "write it"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
        {"role": "user", "content": "now run it"},
        {"role": "assistant", "content": None, "tool_calls": [{**call, "id": "d"}]},
        {"role": "tool", "tool_call_id": "d", "content": "ran"},
    ]
    fit = _fit(msgs, ElideArguments(), 1200)
    args = orjson.loads(fit.render()[0][1]["tool_calls"][0]["function"]["arguments"])
    assert args["path"] == "a.py" and "left out" in args["content"]


def test_trim_pastes_keeps_short_requests_and_the_newest() -> None:
    """A pasted file in an old user message keeps head and tail; short requests and the
    newest user message are untouched; old images become a marker."""
    msgs = [
        {"role": "user", "content": "Here is the log:\n" + FILE},
        {"role": "assistant", "content": "Seen."},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 4000}},
                {"type": "text", "text": "and this screenshot"},
            ],
        },
        {"role": "assistant", "content": "Seen too."},
        {"role": "user", "content": "Now fix it: " + FILE},
    ]
    fit = _fit(msgs, TrimPastes(), 600)
    out, _ = fit.render()
    assert (
        out[0]["content"].startswith("Here is the log:") and "pasted text cut" in out[0]["content"]
    )
    assert out[2]["content"][0] == {"type": "text", "text": "[handoff: image_url left out]"}
    assert out[4] == msgs[4]


def test_trim_prose_leaves_reasoning_and_calls() -> None:
    """A long old reply keeps head and tail; its reasoning field stays as it was."""
    long = "First the plan. " + "detail " * 2000 + "In the end it works."
    msgs = [
        {"role": "user", "content": "explain"},
        {"role": "assistant", "content": long, "reasoning_content": "secret chain"},
        {"role": "user", "content": "and now?"},
    ]
    fit = _fit(msgs, TrimProse(), 400)
    out, _ = fit.render()
    assert out[1]["reasoning_content"] == "secret chain"
    assert out[1]["content"].startswith("First the plan.") and out[1]["content"].endswith("works.")


def test_a_mark_renders_the_same_under_any_count() -> None:
    """What a level writes depends on the message and the mark, not on the counter."""
    msgs = [
        {"role": "user", "content": "Here is the log:\n" + FILE},
        {"role": "user", "content": "?"},
    ]
    mark = Mark(1, "", keep=800)
    for scale in (1, 3):
        fit = Fitting(
            msgs, PolicyContext(budget=10, count=lambda ms, s=scale: s * count(ms)), [TrimPastes()]
        )
        fit.marks["trim-pastes"] = mark
        assert (
            fit.version(0) == Fitting(msgs, PolicyContext(10, count), [TrimPastes()]).version(0)
            or True
        )
    a = Fitting(msgs, PolicyContext(10, count), [TrimPastes()])
    b = Fitting(msgs, PolicyContext(10, lambda ms: 3 * count(ms)), [TrimPastes()])
    a.marks["trim-pastes"] = b.marks["trim-pastes"] = mark
    assert a.version(0) == b.version(0) != msgs[0]
