"""The Messages adapter: generated Claude Code-like conversations, compressed by the real
chain at random budgets and written back, are accepted by the strict fake's validator
(pairs never split, roles alternating, results first, signatures intact) and keep
every block they show either the client's byte for byte or a changed text without
``cache_control``; thinking, images and documents are never edited; system pinned."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from policies.base import PolicyContext
from policies.chain import compress
from policies.errors import ContextTooLarge
from policies.last_resort import LAST_RESORT
from proxy.errors import InvalidRequest
from proxy.ingress.anthropic_clearing import PLACEHOLDER
from proxy.ingress.anthropic_messages import parse_messages
from proxy.ingress.incremental_parse import ResentBodies
from tests.fake_upstream.anthropic import signature, validate
from tests.policies.test_chain import default_chain
from tests.strategies import count

LAST_RESORTS = {level.name for level in LAST_RESORT}
_words = st.sampled_from(["read", "the", "file", "src/app.py", "error", "ok", "déjà", "日本"])
_text = st.lists(_words, min_size=1, max_size=30).map(" ".join)
_big = st.integers(0, 3000).map(lambda n: "line of output\n" * n + "end")
_cache = st.sampled_from([None, {"type": "ephemeral"}])
_PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"  # a 1x1 PNG's head


def _text_block(text: str, cache: Any) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "text", "text": text}
    if cache:
        block["cache_control"] = cache
    return block


@st.composite
def conversations(draw: st.DrawFn) -> dict[str, Any]:
    """A Messages request body: a user prompt, then tool-loop turns (thinking, text,
    tool_use; tool_result answers with optional text), then maybe a user follow-up."""
    ids = itertools.count()
    breakpoints = [0]

    def cached() -> Any:
        c = draw(_cache)
        if c and breakpoints[0] < 3:
            breakpoints[0] += 1
            return c
        return None

    first: list[dict[str, Any]] = [_text_block(draw(_text), cached())]
    if draw(st.booleans()):
        first.append({"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": _PNG}})  # fmt: skip
    if draw(st.booleans()):
        first.append({"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                                     "data": draw(_big)}})  # fmt: skip
    messages: list[dict[str, Any]] = [{"role": "user", "content": draw(st.sampled_from(
        [first, draw(_text)]))}]  # fmt: skip
    if draw(st.booleans()):
        messages.append({"role": "system", "content": "Stay in the repository."})
    for _ in range(draw(st.integers(0, 7))):
        blocks: list[dict[str, Any]] = []
        if draw(st.booleans()):
            thought = draw(_text)
            blocks.append(
                {"type": "thinking", "thinking": thought, "signature": signature(thought)}
            )
        if draw(st.booleans()):
            blocks.append({"type": "redacted_thinking", "data": "EmwKAhgBEgy" + draw(_text)})
        if draw(st.booleans()):
            blocks.append(_text_block(draw(_big), cached()))
        uses = [f"toolu_{next(ids)}" for _ in range(draw(st.integers(0, 2)))]
        for u in uses:
            blocks.append({"type": "tool_use", "id": u, "name": "Read",
                           "input": {"path": draw(_text), "body": draw(_big)}})  # fmt: skip
        if not blocks:
            blocks.append({"type": "text", "text": draw(_text)})
        messages.append({"role": "assistant", "content": blocks})
        answer: list[dict[str, Any]] = []
        for u in uses:
            result: dict[str, Any] = {"type": "tool_result", "tool_use_id": u,
                                      "content": draw(st.sampled_from([draw(_big), [
                                          _text_block(draw(_big), None)]]))}  # fmt: skip
            if cached():
                result["cache_control"] = {"type": "ephemeral"}
            answer.append(result)
        if not uses or draw(st.booleans()):
            answer.append(_text_block(draw(_text), None))
        messages.append({"role": "user", "content": answer})
    body: dict[str, Any] = {"model": "claude-sonnet-4-5", "max_tokens": 1000, "messages": messages}
    system = draw(st.sampled_from([None, "You are Claude Code.", [_text_block("You are Claude Code.",
                                                                  {"type": "ephemeral"})]]))  # fmt: skip
    if system is not None:
        body["system"] = system
    if draw(st.booleans()):
        body["tools"] = [{"name": "Read", "description": "Read a file",
                          "input_schema": {"type": "object", "properties": {}}}]  # fmt: skip
    return body


def _sent(body: dict[str, Any], budget: int) -> dict[str, Any]:
    return _compressed(body, budget)[0]


def _compressed(body: dict[str, Any], budget: int) -> tuple[dict[str, Any], tuple[str, ...]]:
    req = parse_messages(orjson.dumps(body))
    ctx = PolicyContext(budget=budget, count=count)
    try:
        out = asyncio.run(compress(req.messages, ctx, default_chain()))
    except ContextTooLarge:  # the pinned turns alone overflow: nothing is sent
        assume(False)
        raise
    sent: dict[str, Any] = orjson.loads(req.rendered(out.messages, out.origins))
    return sent, out.applied


def _blocks(messages: list[dict[str, Any]]) -> list[Any]:
    return [b for m in messages if isinstance(m["content"], list) for b in m["content"]]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=conversations(), budget=st.integers(300, 20_000))
@example(body={"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "x"}]},
         budget=300)  # fmt: skip
@example(  # a system message between two user turns once their assistant is dropped
    body={"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "read"}, {"type": "document",
         "source": {"type": "text", "media_type": "text/plain", "data": "x\n" * 300}}]},
        {"role": "system", "content": "Stay in the repository."},
        {"role": "assistant", "content": [{"type": "text", "text": "line\n" * 200}]},
        {"role": "user", "content": [{"type": "text", "text": "read"}]}]},
    budget=300,
)  # fmt: skip
def test_compressed_requests_keep_anthropic_invariants(body: dict[str, Any], budget: int) -> None:
    """Whatever the budget, what is sent is valid Messages and edits only text."""
    sent, applied = _compressed(body, budget)
    validate(sent)  # alternation, pairs, results first, signatures, breakpoints
    assert {k: v for k, v in sent.items() if k != "messages"} == {
        k: v for k, v in body.items() if k != "messages"
    }  # the top-level system (and every other field) as it came
    assert [m for m in sent["messages"] if m["role"] == "system"] == [
        m for m in body["messages"] if m["role"] == "system"
    ]
    original = {orjson.dumps(b) for b in _blocks(body["messages"])}
    for block in _blocks(sent["messages"]):
        if orjson.dumps(block) in original:
            continue  # the client's very block
        assert "cache_control" not in block, block
        assert block["type"] in ("text", "tool_result", "tool_use"), block  # never thinking…
    uses = {b["id"] for b in _blocks(sent["messages"]) if b["type"] == "tool_use"}
    results = {b["tool_use_id"] for b in _blocks(sent["messages"]) if b["type"] == "tool_result"}
    assert results <= uses
    if not LAST_RESORTS.intersection(applied):
        last = [m for m in body["messages"] if m["role"] != "system"][-1]
        newest = [m for m in sent["messages"] if m["role"] != "system"][-1]
        assert newest == last or newest["content"][-len(last["content"]) :] == last["content"]


@settings(max_examples=60, deadline=None)
@given(body=conversations())
def test_a_request_that_fits_renders_as_it_came(body: dict[str, Any]) -> None:
    """Rendering every message unchanged gives the client's request back."""
    sent = _sent(body, 10_000_000)
    assert sent == body


def test_string_contents_and_notes_merge_into_alternating_turns() -> None:
    """A dropped stretch becomes handoff's note, merged into the user turn after it."""
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "first " * 400},
            {"role": "assistant", "content": "answer " * 400},
            {"role": "user", "content": "second " * 400},
            {"role": "assistant", "content": "answer " * 400},
            {"role": "user", "content": "now"},
        ],
    }
    sent = _sent(body, 700)
    validate(sent)
    assert sent["messages"][-1] == {"role": "user", "content": "now"}
    assert any("[handoff: " in orjson.dumps(m).decode() for m in sent["messages"])


def test_context_management_clearing_is_counted_not_sent() -> None:
    """Over its trigger, the request's own clear_tool_uses edit shrinks the counted view
    (older results as a placeholder), while the client's blocks still go as they came."""
    body = {
        "model": "m",
        "max_tokens": 10,
        "context_management": {"edits": [{"type": "clear_tool_uses_20250919",
                                          "trigger": {"type": "input_tokens", "value": 100},
                                          "keep": {"type": "tool_uses", "value": 1}}]},
        "messages": [{"role": "user", "content": "go"}],
    }  # fmt: skip
    for t in range(3):
        body["messages"] += [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{t}", "name": "R", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"t{t}", "content": "data " * 200}
                ],
            },
        ]
    req = parse_messages(orjson.dumps(body))
    tools = [m for m in req.messages if m["role"] == "tool"]
    assert [m["content"] == PLACEHOLDER for m in tools] == [True, True, False]
    sent = orjson.loads(req.rendered(req.messages, list(range(len(req.messages)))))
    assert sent == body


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b"[]", "JSON object"),
        (b'{"messages": []}', "model"),
        (b'{"model": "m", "messages": {}}', "messages"),
        (b'{"model": "m", "messages": [{"role": "tool", "content": "x"}]}', "role"),
        (b'{"model": "m", "messages": [{"role": "user", "content": 3}]}', "content"),
        (b'{"model": "m", "messages": [{"role": "user", "content": [1]}]}', "content block"),
    ],
)
def test_bad_requests_are_refused_by_name(body: bytes, says: str) -> None:
    """What handoff cannot read is a 400 naming the field."""
    with pytest.raises(InvalidRequest, match=says):
        parse_messages(body)


def test_a_resent_history_reuses_its_parse() -> None:
    """Each turn resending the last one's history is parsed only for its new messages
    (``resends``), and reads as a fresh parse does."""
    bodies = ResentBodies()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start " * 20_000}]
    for t in range(4):
        messages += [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{t}", "name": "R", "input": {"n": t}}],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"t{t}", "content": f"result {t} " * 500}
                ],
            },
        ]
        raw = orjson.dumps({"model": "m", "max_tokens": 10, "messages": messages})
        req = parse_messages(raw, bodies)
        fresh = parse_messages(raw)
        assert req.messages == fresh.messages and req.body == fresh.body
        assert (req.resends is not None) == (t > 0)
        assert orjson.loads(req.rendered(req.messages, range(len(req.messages)))) == orjson.loads(
            raw
        )
