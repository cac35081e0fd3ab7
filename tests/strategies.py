"""Hypothesis strategies for chat conversations, a fake token counter, and the
invariant checks every compressed request must pass. Reusable by any test."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from hypothesis import strategies as st

from policies.base import Message
from policies.units import HANDOFF_MARK, PINNED_ROLES, TOOL_ROLES, tail_start

Msg = dict[str, Any]


def count(messages: Sequence[Message]) -> int:
    """Fake counter: 3 per prompt plus 4 + bytes/4 per message."""
    return 3 + sum(4 + len(orjson.dumps(m)) // 4 for m in messages)


_words = st.sampled_from(
    ["fix", "the", "parser", "in", "src/app.py", "error", "ok", "déjà", "日本", "run", "tests"]
)


@st.composite
def text(draw: st.DrawFn, big: bool = False) -> str:
    """Short text, or occasionally a long one (a pasted file, a huge tool output)."""
    words = draw(st.lists(_words, min_size=1, max_size=12))
    s = " ".join(words)
    if big or draw(st.integers(0, 9)) == 0:
        s += " " + "line of output\n" * draw(st.integers(20, 150))
    return s


def content() -> st.SearchStrategy[Any]:
    """String content or a content-part array (text, image_url, input_audio, file)."""
    part = st.one_of(
        text().map(lambda t: {"type": "text", "text": t}),
        st.just({"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}),
        st.just({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}),
        st.just({"type": "file", "file": {"file_id": "file-1"}}),
    )
    return st.one_of(text(), st.lists(part, min_size=1, max_size=3))


def extras() -> st.SearchStrategy[dict[str, Any]]:
    """Fields that must pass through: name, reasoning_content, unknown ones."""
    return st.fixed_dictionaries(
        {},
        optional={
            "name": st.sampled_from(["alice", "bot"]),
            "reasoning_content": st.sampled_from(["thinking…", ""]),
            "x_vendor": st.dictionaries(
                st.sampled_from(["a", "b"]), st.integers(-(2**31), 2**31), max_size=2
            ),
        },
    )


@st.composite
def tool_round(draw: st.DrawFn, tag: str) -> list[Msg]:
    """An assistant message with tool_calls and one result per call."""
    n = draw(st.integers(1, 3))
    ids = [f"call_{tag}_{j}" for j in range(n)]
    calls = [
        {"id": i, "type": "function", "function": {"name": "read", "arguments": '{"p": 1}'}}
        for i in ids
    ]
    out: list[Msg] = [{"role": "assistant", "content": None, "tool_calls": calls}]
    for i in ids:
        out.append({"role": "tool", "tool_call_id": i, "content": draw(text())})
    return out


@st.composite
def turn(draw: st.DrawFn, tag: str) -> list[Msg]:
    msgs: list[Msg] = [{"role": "user", "content": draw(content()), **draw(extras())}]
    for r in range(draw(st.integers(0, 2))):
        msgs += draw(tool_round(f"{tag}_{r}"))
    answer: Msg = {"role": "assistant", "content": draw(text()), **draw(extras())}
    if draw(st.integers(0, 5)) == 0:
        answer = {"role": "assistant", "content": None, "refusal": "I can't help with that."}
    return [*msgs, answer]


@st.composite
def conversations(draw: st.DrawFn, max_turns: int = 8) -> list[Msg]:
    """A system prompt or two, past turns (maybe a mid-conversation system message),
    the newest user message, and maybe an agent's in-flight tool round after it."""
    msgs: list[Msg] = [
        {"role": draw(st.sampled_from(["system", "developer"])), "content": draw(text())}
        for _ in range(draw(st.integers(0, 2)))
    ]
    n = draw(st.integers(0, max_turns))
    mid_system = draw(st.integers(-1, n))
    for t in range(n):
        if t == mid_system:
            msgs.append({"role": "system", "content": "Be brief from now on."})
        msgs += draw(turn(str(t)))
    msgs.append({"role": "user", "content": draw(content()), **draw(extras())})
    if draw(st.booleans()):
        msgs += draw(tool_round("live"))
    return msgs


# --- invariants ---------------------------------------------------------------------


def is_made(m: Message) -> bool:
    """A message handoff wrote (note, summary), not derived from one original."""
    return isinstance(m.get("content"), str) and str(m["content"]).startswith(HANDOFF_MARK)


def _marked(m: Message) -> bool:
    return HANDOFF_MARK in orjson.dumps(m).decode() or "handoff_elided" in orjson.dumps(m).decode()


def _same_identity(o: Message, m: Message) -> bool:
    """``o`` is ``m`` with only content/tool-call arguments rewritten by handoff."""
    strip = ("content", "tool_calls")
    if {k: v for k, v in o.items() if k not in strip} != {
        k: v for k, v in m.items() if k not in strip
    }:
        return False
    calls_o, calls_m = o.get("tool_calls"), m.get("tool_calls")
    if (calls_o is None) != (calls_m is None):
        return False
    if calls_o and calls_m:
        ids = [c["id"] for c in calls_o] == [c["id"] for c in calls_m]
        if not ids:
            return False
    return _marked(o)


def origins(original: Sequence[Message], output: Sequence[Message]) -> list[int]:
    """Map each non-made output message to its original's index, in increasing order
    (matched newest first, so duplicates map to the newest); assert it is identical or
    a marked rewrite of that original."""
    j, out = len(original) - 1, []
    for o in reversed(output):
        if is_made(o) and o.get("role") == "user" and "tool_call_id" not in o:
            continue
        while j >= 0 and not (original[j] == o or _same_identity(o, original[j])):
            j -= 1
        assert j >= 0, f"output message not from the original, or out of order: {o}"
        out.append(j)
        j -= 1
    return out[::-1]


def check_pairs(messages: Sequence[Message]) -> None:
    """Every tool message follows its assistant tool_calls; every call id has a result."""
    i = 0
    while i < len(messages):
        m = messages[i]
        assert m.get("role") not in TOOL_ROLES, f"orphaned tool message at {i}"
        j = i + 1
        while j < len(messages) and messages[j].get("role") in TOOL_ROLES:
            j += 1
        if m.get("tool_calls"):
            ids = [c["id"] for c in m["tool_calls"]]
            answered = [r.get("tool_call_id") for r in messages[i + 1 : j]]
            assert sorted(ids) == sorted(answered), f"tool_calls {ids} answered by {answered}"
        i = j


def check_invariants(original: Sequence[Message], output: Sequence[Message], budget: int) -> None:
    """The invariants of every compressed request (see issue 4)."""
    assert count(output) <= budget
    sys_in = [m for m in original if m.get("role") in PINNED_ROLES]
    assert [m for m in output if m.get("role") in PINNED_ROLES] == sys_in
    newest = original[tail_start(original)]
    kept = [o for o in output if o.get("role") == "user" and not is_made(o)]
    assert kept and (kept[-1] == newest or _same_identity(kept[-1], newest))
    check_pairs(output)
    idx = origins(original, output)
    tail = tail_start(original)
    assert [i for i in idx if i >= tail] == list(range(tail, len(original))), "tail not kept"


def tool_definitions(
    texts: st.SearchStrategy[str], properties: st.SearchStrategy[dict[str, Any]], max_size: int
) -> st.SearchStrategy[list[dict[str, Any]]]:
    """``tools`` arrays of functions named and described by ``texts``."""
    return st.lists(
        st.builds(
            lambda name, desc, props: {
                "type": "function",
                "function": {
                    "name": name,
                    "description": desc,
                    "parameters": {"type": "object", "properties": props},
                },
            },
            texts,
            texts,
            properties,
        ),
        max_size=max_size,
    )
