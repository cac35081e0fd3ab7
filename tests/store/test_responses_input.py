"""The store's chat messages as an OpenAI Responses request: system as instructions,
tool pairs by ``call_id``, images, reasoning left out; and the format ``native`` picks."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.store.export import body, carried, native
from proxy.store.responses_input import from_openai, request_body

PNG = "data:image/png;base64,iVBORw0KGgo="


def _call(cid: str, name: str, args: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}


def test_system_becomes_instructions_and_later_ones_stay_messages() -> None:
    """The leading system messages are the instructions; a developer message and a
    system message later in the conversation are message items of their role."""
    instructions, items = from_openai(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "system", "content": [{"type": "text", "text": "Be kind."}]},
            {"role": "developer", "content": "<permissions>sandboxed</permissions>"},
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "Now in French."},
        ]
    )
    assert instructions == "Be brief.\n\nBe kind."
    assert items == [
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "<permissions>sandboxed</permissions>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        {"type": "message", "role": "system",
         "content": [{"type": "input_text", "text": "Now in French."}]},
    ]  # fmt: skip
    assert from_openai([{"role": "user", "content": "hi"}])[0] is None


def test_tool_calls_and_outputs_pair_by_call_id() -> None:
    """An assistant's text and two calls, then the two replies (the second a list of
    parts): output_text, function_call items with call_id and arguments, outputs."""
    _, items = from_openai(
        [
            {"role": "user", "content": "read both"},
            {
                "role": "assistant",
                "content": "Reading.",
                "reasoning_content": "Two files; read them at once.",
                "tool_calls": [
                    _call("call_a", "read_file", '{"path": "a.py"}'),
                    _call("call_b", "read_file", '{"path": "b.py"}'),
                ],
            },
            {"role": "tool", "tool_call_id": "call_a", "content": "print('a')"},
            {"role": "tool", "tool_call_id": "call_b",
             "content": [{"type": "text", "text": "print('b')"}]},
            {"role": "assistant", "content": "Both print."},
        ]
    )  # fmt: skip
    assert items[1] == {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "Reading.", "annotations": []}],
    }
    assert items[2:4] == [
        {"type": "function_call", "call_id": "call_a", "name": "read_file",
         "arguments": '{"path": "a.py"}'},
        {"type": "function_call", "call_id": "call_b", "name": "read_file",
         "arguments": '{"path": "b.py"}'},
    ]  # fmt: skip
    assert items[4] == {"type": "function_call_output", "call_id": "call_a", "output": "print('a')"}
    assert items[5]["output"] == [{"type": "input_text", "text": "print('b')"}]
    assert items[6]["content"][0]["text"] == "Both print."
    assert all(i["type"] != "reasoning" for i in items)  # (it cannot be recreated)
    assert "Two files" not in str(items)


def test_images_are_input_images() -> None:
    """An image part (a data URL or a remote one) is an ``input_image`` with its detail."""
    _, items = from_openai(
        [
            {"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": PNG}},
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
            ]},
        ]
    )  # fmt: skip
    assert items[0]["content"] == [
        {"type": "input_text", "text": "what is this?"},
        {"type": "input_image", "image_url": PNG, "detail": "auto"},
        {"type": "input_image", "image_url": "https://x/y.png", "detail": "low"},
    ]


def test_an_assistant_that_said_nothing_is_no_item() -> None:
    """An assistant message with no text and no calls (reasoning only) writes nothing,
    and a call-only one writes only its call."""
    _, items = from_openai(
        [
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": None, "reasoning_content": "hm"},
            {"role": "assistant", "content": "", "tool_calls": [_call("c1", "ls", "{}")]},
            {"role": "tool", "tool_call_id": "c1", "content": "a b"},
        ]
    )
    assert [i["type"] for i in items] == ["message", "function_call", "function_call_output"]


def test_request_body_takes_instructions_from_the_messages() -> None:
    """A Responses turn's own fields are kept; its ``instructions`` is what the (maybe
    compressed) messages hold."""
    out = request_body(
        "gpt-5",
        [{"role": "system", "content": "Short."}, {"role": "user", "content": "hi"}],
        {"instructions": "Long original.", "store": False, "include": ["x"]},
    )
    assert out == {"model": "gpt-5", "store": False, "include": ["x"], "instructions": "Short.",
                   "input": [{"type": "message", "role": "user",
                              "content": [{"type": "input_text", "text": "hi"}]}]}  # fmt: skip


def test_native_is_the_recorded_wire_and_fields_carry_across() -> None:
    """``native`` is each wire's own body; a chat turn's fields go into a Responses body
    only as what means the same there, and a Responses turn's into a chat body too."""
    wires = ("chat", "responses", "anthropic", "other")
    assert [native(w) for w in wires] == ["openai", "responses", "anthropic", "openai"]
    msgs = [{"role": "user", "content": "hi"}]
    chat = {"max_completion_tokens": 50, "temperature": 0.2, "logprobs": True}
    assert body("responses", "m", msgs, chat, "chat") == {
        "model": "m", "max_output_tokens": 50, "temperature": 0.2, "input": from_openai(msgs)[1]
    }  # fmt: skip
    responses = {"max_output_tokens": 70, "include": ["reasoning.encrypted_content"]}
    assert body("native", "m", msgs, responses, "responses")["include"] == responses["include"]
    assert body("openai", "m", msgs, responses, "responses") == {
        "model": "m", "messages": msgs, "max_tokens": 70
    }  # fmt: skip
    assert body("native", "m", msgs, {"max_tokens": 9}, "anthropic")["max_tokens"] == 9
    assert carried({"max_tokens": 0, "top_p": 1}, "anthropic") == {"top_p": 1}


_ids = st.text("abcdef0123456789", min_size=1, max_size=6)


@st.composite
def _loops(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A chat tool loop: user turns, assistant turns with up to three calls, each answered."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}]
    for n in range(draw(st.integers(1, 5))):
        messages.append({"role": "user", "content": f"u{n}"})
        ids = draw(st.lists(_ids, max_size=3, unique=True))
        text = draw(st.sampled_from([None, "", "ok"]))
        calls = [_call(f"{n}-{i}", "f", "{}") for i in ids]
        reply: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            reply["tool_calls"] = calls
        messages.append(reply)
        messages += [{"role": "tool", "tool_call_id": c["id"], "content": "r"} for c in calls]
    return messages


@given(_loops())
def test_every_output_follows_its_call(messages: list[dict[str, Any]]) -> None:
    """Every function_call_output has its function_call earlier (what the API checks),
    every call is answered, and every user text is there in order."""
    instructions, items = from_openai(messages)
    assert instructions == "sys"
    seen: set[str] = set()
    for item in items:
        if item["type"] == "function_call":
            seen.add(item["call_id"])
        elif item["type"] == "function_call_output":
            assert item["call_id"] in seen
    outputs = [i["call_id"] for i in items if i["type"] == "function_call_output"]
    assert sorted(outputs) == sorted(seen)
    users = [i["content"][0]["text"] for i in items if i.get("role") == "user"]
    assert users == [m["content"] for m in messages if m["role"] == "user"]
