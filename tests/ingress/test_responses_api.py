"""The Responses adapter: generated inputs parsed, compressed by the real policy chain and
written back keep every call with its output, every reasoning item byte for byte (or
drop it with its turn), every untouched item and every other member byte for byte."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from policies.base import PolicyContext
from policies.chain import compress
from policies.errors import ContextTooLarge
from proxy.config import CompressionSettings
from proxy.decide.policy_chain import build_chain
from proxy.errors import InvalidRequest
from proxy.ingress.incremental_parse import ResentBodies
from proxy.ingress.json_spans import element_start, layout
from proxy.ingress.responses_api import parse_responses

_words = st.lists(st.sampled_from(["alpha", "beta", "gamma", "δέλτα", "x", "42"]), min_size=1)
text = _words.map(" ".join)


@st.composite
def turn(draw: st.DrawFn, n: int) -> list[dict[str, Any]]:
    """A user message, then rounds of reasoning, text and calls with their outputs."""
    user: Any = draw(text)
    if draw(st.booleans()):
        user = [{"type": "input_text", "text": user}]
    items: list[dict[str, Any]] = [{"type": "message", "role": "user", "content": user}]
    for r in range(draw(st.integers(0, 3))):
        rid = f"{n}_{r}"
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{rid}",
                "summary": [{"type": "summary_text", "text": draw(text)}],
                "encrypted_content": "gAAA" + draw(st.binary(min_size=8, max_size=40)).hex(),
            }
        )
        if draw(st.booleans()):
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": draw(text), "annotations": []}],
                }
            )
        calls = draw(st.integers(0 if items[-1]["type"] == "message" else 1, 2))
        kinds = [draw(st.sampled_from(["function_call", "custom_tool_call"])) for _ in range(calls)]
        for c, kind in enumerate(kinds):
            field = "arguments" if kind == "function_call" else "input"
            asked = draw(st.one_of(text, st.integers(1, 300).map(lambda n: "arg " * n)))
            items.append({"type": kind, "call_id": f"call_{rid}_{c}", "name": "read", field: asked})
        for c, kind in enumerate(kinds):
            size = draw(st.integers(1, 400))
            items.append(
                {"type": f"{kind}_output", "call_id": f"call_{rid}_{c}", "output": "line " * size}
            )
        if draw(st.integers(0, 9)) == 0:
            items.append(draw(st.sampled_from([
                {"type": "item_reference", "id": f"ref_{rid}"},
                {"type": "future_item", "payload": {"k": [1, 2.5, None]}},
            ])))  # fmt: skip
    return items


@st.composite
def requests(draw: st.DrawFn) -> tuple[bytes, dict[str, Any]]:
    """A Responses body as some client would write it (indentation, escapes vary)."""
    items = [i for n in range(draw(st.integers(1, 6))) for i in draw(turn(n))]
    items.append({"role": "user", "content": draw(text)})
    body: dict[str, Any] = {"model": "m", "input": items, "store": False}
    if draw(st.booleans()):
        body["instructions"] = draw(text)
    if draw(st.booleans()):
        body["future_field"] = {"nested": [1, "é", {"a": None}]}
    raw = json.dumps(
        body, indent=draw(st.sampled_from([None, 1, 2])), ensure_ascii=draw(st.booleans())
    ).encode()
    return raw, body


_FOLLOWERS = ("reasoning", "function_call", "custom_tool_call")


def _count(messages: Any) -> int:
    return sum(len(orjson.dumps(m)) // 4 + 3 for m in messages)


def _item_bytes(raw: bytes) -> list[bytes]:
    lay = layout(raw, "input")
    assert lay is not None
    return [raw[element_start(raw, lay, k) : lay.ends[k]] for k in range(len(lay.ends))]


def _compressed(raw: bytes, share: float) -> bytes | None:
    req = parse_responses(raw)
    budget = max(1, int(_count(req.messages) * share))
    ctx = PolicyContext(budget=budget, count=_count)
    chain = build_chain(CompressionSettings(), has_summarizer=False)
    try:
        result = asyncio.run(compress(req.messages, ctx, chain))
    except ContextTooLarge:
        return None
    return req.rendered(result.messages, result.origins)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests(), st.floats(0.2, 1.2))
def test_compressed_input_keeps_pairs_reasoning_and_bytes(
    request: tuple[bytes, dict[str, Any]], share: float
) -> None:
    """Whatever the chain drops or rewrites: each output still follows its call, each call
    still has its output, each reasoning item is one of the client's, byte for byte, and
    still followed by what followed it; untouched items and every other member keep
    their bytes; the newest user message arrives."""
    raw, body = request
    out = _compressed(raw, share)
    if out is None:
        return
    event("rewritten" if len(out) != len(raw) else "as sent")
    sent = orjson.loads(out)
    assert {k: v for k, v in sent.items() if k != "input"} == {
        k: v for k, v in body.items() if k != "input"
    }
    lay_in, lay_out = layout(raw, "input"), layout(out, "input")
    assert lay_in is not None and lay_out is not None
    assert out[: lay_out.open] == raw[: lay_in.open]  # instructions and the rest, as sent
    assert out[lay_out.close :] == raw[lay_in.close :]
    originals = _item_bytes(raw)
    by_value = {orjson.dumps(orjson.loads(b)): b for b in originals}
    items = sent["input"]
    assert items[-1] == body["input"][-1]
    seen_calls: set[Any] = set()
    for k, (item, piece) in enumerate(zip(items, _item_bytes(out), strict=True)):
        kind = item.get("type")
        if kind in ("function_call", "custom_tool_call"):
            seen_calls.add(item["call_id"])
            assert any(
                o.get("call_id") == item["call_id"] and o.get("type") == f"{kind}_output"
                for o in items[k + 1 :]
            )
        elif kind in ("function_call_output", "custom_tool_call_output"):
            assert item["call_id"] in seen_calls
        elif kind == "reasoning":
            assert piece in originals  # never edited
            nxt = items[k + 1] if k + 1 < len(items) else {}
            assert nxt.get("role") == "assistant" or nxt.get("type") in _FOLLOWERS
        canonical = orjson.dumps(item)
        if canonical in by_value:
            assert piece == by_value[canonical]  # an untouched item: the client's bytes


@given(requests())
@settings(max_examples=50, deadline=None)
def test_roomy_render_is_the_client_body(request: tuple[bytes, dict[str, Any]]) -> None:
    """Every message written back as it came gives the client's very bytes."""
    raw, _ = request
    req = parse_responses(raw)
    assert req.rendered(req.messages, list(range(len(req.messages)))) == raw


def test_messages_for_a_codex_turn() -> None:
    """Reasoning, text and parallel calls are one assistant message; outputs are tool
    messages; instructions a leading system message; an unknown item a pinned one."""
    body = {
        "model": "m",
        "instructions": "be brief",
        "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {"type": "function_call", "call_id": "a", "name": "shell", "arguments": "{}"},
            {"type": "local_shell_call", "call_id": "b", "action": {"command": ["ls"]}},
            {"type": "function_call_output", "call_id": "a", "output": "ok"},
            {"type": "local_shell_call_output", "id": "b", "output": "files"},
            {"type": "compaction", "encrypted_content": "zz"},
        ],
    }
    req = parse_responses(orjson.dumps(body))
    roles = [m["role"] for m in req.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "developer"]
    calls = req.messages[2]["tool_calls"]
    assert [c["id"] for c in calls] == ["a", "b"]
    assert calls[1]["function"] == {"name": "local_shell", "arguments": '{"command":["ls"]}'}
    assert req.messages[4]["tool_call_id"] == "b"
    assert req.params is not None and req.params["instructions"] == "be brief"


@pytest.mark.parametrize(
    "body",
    [
        b'{"model": "m", "input": [{"type": "custom_tool_call_output"}]}',
        b'{"model": "m", "input": "x", "instructions": 5}',
        b'{"model": "", "input": "x"}',
    ],
)
def test_bad_bodies_are_refused(body: bytes) -> None:
    """A body handoff could not fit is refused by name, before any upstream call."""
    with pytest.raises(InvalidRequest):
        parse_responses(body)


def test_string_input_rewritten_becomes_a_message_item() -> None:
    """A string ``input`` that a policy shortened goes back as one user message item."""
    raw = b'{"model": "m", "input": "long text"}'
    req = parse_responses(raw)
    out = orjson.loads(req.rendered([{"role": "user", "content": "short"}], [0]))
    assert out == {"model": "m", "input": [{"role": "user", "content": "short"}]}


@given(requests(), st.lists(text, min_size=1, max_size=3))
@settings(max_examples=60, deadline=None)
def test_a_resent_input_is_parsed_for_its_new_items_only(
    request: tuple[bytes, dict[str, Any]], more: list[str]
) -> None:
    """The next turn resends the input and adds items: its parse reuses the earlier one's
    items and equals a parse from scratch, messages and the body written back alike."""
    raw, body = request
    bodies = ResentBodies(key="input")
    parse_responses(raw, bodies)
    grown = {**body, "input": [*body["input"], *({"role": "user", "content": t} for t in more)]}
    nxt = json.dumps(grown).encode()
    if not nxt.startswith(raw[: raw.rfind(b"]")].rstrip()[:64]):
        return  # (a differently spaced dump: nothing shared)
    reused = bodies.reused_messages
    fresh, again = parse_responses(nxt), parse_responses(nxt, bodies)
    assert again.messages == fresh.messages and again.params == fresh.params
    assert again.rendered(again.messages, list(range(len(again.messages)))) == nxt
    if json.dumps(body).encode() == raw:  # the same spacing: the old items are reused
        assert bodies.reused_messages - reused == len(body["input"])


def test_a_bad_new_item_is_refused_with_its_own_index() -> None:
    """Reused items are not checked again, and a new bad one is named by its index."""
    items = [{"role": "user", "content": f"{i}" * 100} for i in range(4)]
    bodies = ResentBodies(key="input")
    for n in (2, 3):
        parse_responses(json.dumps({"model": "m", "input": items[:n]}).encode(), bodies)
    assert bodies.reused_messages == 2  # the second resent the first's two items
    bad = json.dumps({"model": "m", "input": [*items[:3], 7]}).encode()
    with pytest.raises(InvalidRequest) as e:
        parse_responses(bad, bodies)
    assert e.value.param == "input[3]"
