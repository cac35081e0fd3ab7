"""The Messages tee, answer reader and overflow recogniser, against the fake's own SSE."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.upstream.anthropic_stream import (
    MessageAssembler,
    overflow_limit,
    prompt_tokens,
    read_message,
)
from tests.fake_upstream.anthropic import events, message, signature

BLOCKS = [
    {"type": "thinking", "thinking": "Think 日本.", "signature": signature("Think 日本.")},
    {"type": "text", "text": "Reading it now."},
    {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a.py", "n": [1, 2]}},
]


@settings(max_examples=100, deadline=None)
@given(cuts=st.lists(st.integers(0, 4000), max_size=30))
def test_stream_reassembles_whatever_the_chunking(cuts: list[int]) -> None:
    """Fed in pieces cut anywhere, the tee gives back the blocks, stop reason and usage."""
    msg = message("claude-x", BLOCKS, 1234)
    data = b"".join(events(msg))
    tee = MessageAssembler()
    at = 0
    for cut in sorted({min(c, len(data)) for c in cuts}):
        tee.feed(data[at:cut])
        at = cut
    tee.feed(data[at:])
    reply = tee.reply()
    assert reply is not None and reply["blocks"] == BLOCKS
    assert reply["content"] == "Reading it now." and reply["reasoning_content"] == "Think 日本."
    assert reply["tool_calls"][0]["function"]["arguments"] == '{"path":"a.py","n":[1,2]}'
    assert tee.finish_reason == "tool_use" and tee.stopped
    assert tee.usage is not None and tee.usage["input_tokens"] == 1234
    assert tee.usage["output_tokens"] == 5  # message_delta's figure replaces message_start's


def test_error_event_and_cut_off_tool_use() -> None:
    """An error event is kept; a stream cut inside a tool_use still yields the call."""
    tee = MessageAssembler()
    tee.feed(b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
             b'"content_block":{"type":"tool_use","id":"t","name":"R","input":{}}}\n\n'
             b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
             b'"delta":{"type":"input_json_delta","partial_json":"{\\"a\\": "}}\n\n'
             b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error",'
             b'"message":"Overloaded"}}\n\n')  # fmt: skip
    assert tee.error == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "Overloaded"},
    }
    reply = tee.reply()
    assert reply is not None and reply["blocks"][0]["input"] == {"handoff_unparsed": '{"a": '}


def test_read_message() -> None:
    """A whole answer gives its reply, stop reason and usage; an error its body."""
    body = orjson.dumps(message("claude-x", BLOCKS[1:2], 10))
    reply, reason, usage, error = read_message(200, body)
    assert reply is not None and reply["content"] == "Reading it now." and reason == "end_turn"
    assert usage is not None and usage["input_tokens"] == 10 and error is None
    err = {"type": "error", "error": {"type": "invalid_request_error", "message": "no"}}
    assert read_message(400, orjson.dumps(err)) == (None, None, None, err)
    assert read_message(502, b"<html>bad gateway")[3] == {
        "type": "error",
        "error": {"message": "<html>bad gateway"},
    }


def test_overflow_limit() -> None:
    """Anthropic's overflow wordings name the window; other 400s are not overflows."""

    def body(message: str) -> bytes:
        return orjson.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                        "message": message}})  # fmt: skip

    assert (
        overflow_limit(400, body("prompt is too long: 210,311 tokens > 200000 maximum")) == 200_000
    )
    assert overflow_limit(400, body(
        "input length and `max_tokens` exceed context limit: 190000 + 32000 > 200000, "
        "decrease input length or `max_tokens` and try again")) == 200_000  # fmt: skip
    assert overflow_limit(400, body("prompt is too long")) == 0
    assert overflow_limit(400, body("max_tokens: Field required")) is None
    assert overflow_limit(200, body("prompt is too long: 5 tokens > 4 maximum")) is None


def test_prompt_tokens_adds_the_cache() -> None:
    """The prompt's size is input plus cache read and creation tokens."""
    usage = {"input_tokens": 5, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20}
    assert prompt_tokens(usage) == 125
    assert prompt_tokens({"output_tokens": 3}) is None
