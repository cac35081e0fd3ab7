"""The SSE tee reassembles a streamed reply exactly as a non-streamed one reads."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from proxy.upstream.sse import ReplyAssembler
from tests.fake_upstream import build_completion, sse, stream_events

BODY = {
    "model": "gpt-4o",
    "messages": [{"role": "user", "content": "please call the tool for Paris"}],
    "tools": [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            },
        }
    ],
}


def _stream_bytes(body: dict, chunks: int = 5) -> tuple[dict, bytes]:
    completion = build_completion(body, 10)
    frames = [sse(e) for e in stream_events(completion, chunks, True)] + [sse("[DONE]")]
    return completion, b"".join(frames)


@given(st.lists(st.integers(min_value=1, max_value=64), min_size=1, max_size=200))
def test_any_split_of_the_bytes_gives_the_same_reply(cuts: list[int]) -> None:
    """However the network splits the stream, the assembled tool call and usage are right."""
    completion, data = _stream_bytes(BODY)
    asm = ReplyAssembler()
    pos = 0
    for n in cuts:
        asm.feed(data[pos : pos + n])
        pos += n
    asm.feed(data[pos:])
    want = completion["choices"][0]["message"]
    got = asm.reply()
    assert got is not None
    assert got["tool_calls"] == want["tool_calls"]
    assert json.loads(got["tool_calls"][0]["function"]["arguments"]) is not None
    assert asm.usage == completion["usage"]
    assert asm.finish_reason == "tool_calls"
    assert asm.complete


def test_text_reply_and_crlf_events() -> None:
    """Plain content is joined; CRLF-separated events and comments are understood."""
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello world"}]}
    completion, data = _stream_bytes(body, chunks=7)
    asm = ReplyAssembler()
    asm.feed(b": keep-alive\r\n\r\n" + data.replace(b"\n\n", b"\r\n\r\n"))
    reply = asm.reply()
    assert reply is not None
    assert reply["content"] == completion["choices"][0]["message"]["content"]
    assert asm.finish_reason == "stop"


def test_garbage_events_are_skipped() -> None:
    """A malformed event never breaks the tee."""
    asm = ReplyAssembler()
    asm.feed(b"data: {not json\n\ndata: [1,2]\n\nevent: x\n\n")
    asm.feed(b'data: {"choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}\n\n')
    assert asm.reply() == {"role": "assistant", "content": "ok"}
