"""Hypothesis strategies for chat conversations, a fake token counter, and the
invariant checks every compressed request must pass. Reusable by any test.

Conversations come in two shapes: a chat (user and assistant turns, some with tool
rounds) and an agent loop (one user message, then dozens of tool rounds), with
multimodal parts, reasoning fields, pastes, parallel calls and huge single messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from hypothesis import strategies as st

from policies.base import Message
from policies.units import HANDOFF_MARK, PINNED_ROLES, TOOL_ROLES, newest_user, units

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
        s += "\n" + "line of output\n" * draw(st.integers(20, 150))
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
def arguments(draw: st.DrawFn) -> str:
    """Tool-call arguments: a path, a command, or a file's contents being written."""
    kind = draw(st.integers(0, 3))
    if kind == 0:
        return orjson.dumps({"path": "src/app.py"}).decode()
    if kind == 1:
        return orjson.dumps({"command": "pytest -q"}).decode()
    if kind == 2:
        body = "x = 1\n" * draw(st.integers(60, 400))
        return orjson.dumps({"path": "src/new.py", "content": body}).decode()
    return draw(st.sampled_from(["{}", "not json", '{"p": 1}']))


@st.composite
def tool_round(draw: st.DrawFn, tag: str) -> list[Msg]:
    """An assistant message with tool_calls (maybe text too) and one result per call."""
    n = draw(st.integers(1, 3))
    ids = [f"call_{tag}_{j}" for j in range(n)]
    calls = [
        {"id": i, "type": "function", "function": {"name": "read", "arguments": draw(arguments())}}
        for i in ids
    ]
    said = draw(st.one_of(st.none(), text()))
    out: list[Msg] = [{"role": "assistant", "content": said, "tool_calls": calls}]
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


def _system(draw: st.DrawFn) -> list[Msg]:
    return [
        {"role": draw(st.sampled_from(["system", "developer"])), "content": draw(text())}
        for _ in range(draw(st.integers(0, 2)))
    ]


@st.composite
def chats(draw: st.DrawFn, max_turns: int = 8) -> list[Msg]:
    """A system prompt or two, past turns (maybe a mid-conversation system message),
    the newest user message, and maybe an agent's in-flight tool round after it."""
    msgs = _system(draw)
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


@st.composite
def agent_loops(draw: st.DrawFn, max_rounds: int = 24) -> list[Msg]:
    """An agent CLI's task: a system prompt, maybe earlier turns, one user message, then
    many tool rounds (the whole task is one user turn)."""
    msgs = _system(draw)
    for t in range(draw(st.integers(0, 2))):
        msgs += draw(turn(f"e{t}"))
    msgs.append({"role": "user", "content": draw(content())})
    for r in range(draw(st.integers(1, max_rounds))):
        msgs += draw(tool_round(f"a{r}"))
    if draw(st.booleans()):
        msgs.append({"role": "assistant", "content": draw(text())})
    return msgs


def conversations(max_turns: int = 8) -> st.SearchStrategy[list[Msg]]:
    """Chats and agent loops."""
    return st.one_of(chats(max_turns), agent_loops(3 * max_turns))


# --- invariants ---------------------------------------------------------------------


def is_made(m: Message) -> bool:
    """A message handoff wrote (the note), not derived from one original."""
    return isinstance(m.get("content"), str) and str(m["content"]).startswith(HANDOFF_MARK)


def marked(m: Message) -> bool:
    """Carries one of handoff's markers somewhere (a stub, a cut, slimmed arguments)."""
    return HANDOFF_MARK in orjson.dumps(m).decode()


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
    if calls_o and calls_m and [c["id"] for c in calls_o] != [c["id"] for c in calls_m]:
        return False
    return marked(o)


def check_origins(
    original: Sequence[Message], output: Sequence[Message], origins: Sequence[int | None]
) -> None:
    """Each output message shows the original its origin names (identical, or a marked
    rewrite of it), in increasing order; the one message without an origin is the note."""
    assert len(origins) == len(output)
    seen = [j for j in origins if j is not None]
    assert seen == sorted(set(seen)), "origins out of order or repeated"
    assert sum(1 for j in origins if j is None) <= 1, "more than one note"
    for o, j in zip(output, origins, strict=True):
        if j is None:
            assert is_made(o) and o.get("role") == "user"
        else:
            assert o == original[j] or _same_identity(o, original[j]), f"{o} from {original[j]}"


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


def check_sacrifice_order(
    original: Sequence[Message], output: Sequence[Message], origins: Sequence[int | None]
) -> None:
    """A newer tool result is never cut while an older one stands whole (cut: stubbed,
    trimmed or dropped), unless the older one is too small to be worth a stub."""
    shown = {j: o for o, j in zip(output, origins, strict=True) if j is not None}
    results = [i for i, m in enumerate(original) if m.get("role") in TOOL_ROLES]
    whole = [i for i in results if i in shown and shown[i] == original[i]]
    cut = [i for i in results if i not in shown or shown[i] != original[i]]
    for j in cut:
        for i in whole:
            if i < j:
                assert len(str(original[i].get("content"))) < 200, (
                    f"result {j} cut while older result {i} is whole"
                )


def check_invariants(
    original: Sequence[Message],
    output: Sequence[Message],
    budget: int,
    origins: Sequence[int | None] | None = None,
) -> None:
    """The invariants of every compressed request."""
    assert count(output) <= budget
    sys_in = [m for m in original if m.get("role") in PINNED_ROLES]
    assert [m for m in output if m.get("role") in PINNED_ROLES] == sys_in
    check_pairs(output)
    if origins is None:
        return
    check_origins(original, output, origins)
    user = newest_user(original)
    if user >= 0:
        assert user in origins, "newest user message dropped"
    last = units(original)[-1]
    assert all(i in origins for i in last), "the last unit was not kept"
    check_sacrifice_order(original, output, origins)


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
