"""The Responses tee: the reply, usage and end read from a stream however it is cut."""

from __future__ import annotations

import json

from proxy.upstream.responses_stream import ResponsesAssembler, read_answer
from tests.fake_upstream.responses import ResponseMaker, response_events, sse_event

TOOLS = [{"type": "function", "name": "read_file", "parameters": {"type": "object"}}]


def _stream(body: dict[str, object]) -> bytes:
    response = ResponseMaker().response(body, 42)  # type: ignore[arg-type]
    return b"".join(sse_event(e) for e in response_events(response, 3))


def test_fed_byte_by_byte_it_gives_the_call_and_usage() -> None:
    """Split anywhere: the function call (arguments from their deltas), usage with chat's
    names added, ``tool_calls`` as the finish reason, complete at response.completed."""
    data = _stream({"model": "m", "input": "use the tool", "tools": TOOLS})
    tee = ResponsesAssembler()
    for i in range(len(data)):
        tee.feed(data[i : i + 1])
    reply = tee.reply()
    assert reply is not None and reply["tool_calls"][0]["function"]["name"] == "read_file"
    assert json.loads(reply["tool_calls"][0]["function"]["arguments"]) == {"path": "file_1.txt"}
    assert tee.usage is not None and tee.usage["prompt_tokens"] == tee.usage["input_tokens"] == 42
    assert tee.finish_reason == "tool_calls" and tee.complete and tee.error is None


def test_a_stream_cut_before_its_end_keeps_the_text_so_far() -> None:
    """Without response.completed or the item's done event, the deltas make the reply."""
    data = _stream({"model": "m", "input": "hello"})
    cut = data[: data.index(b"response.output_text.done")]
    tee = ResponsesAssembler()
    tee.feed(cut)
    reply = tee.reply()
    assert (
        reply is not None
        and reply["content"] == "Seen 1 items; last: hello"[: len(reply["content"])]
    )
    assert reply["content"] and not tee.complete and tee.finish_reason is None


def test_failed_and_error_events_are_the_turns_error() -> None:
    """``response.failed`` carries the response's error; an ``error`` event its own."""
    failed = {"type": "response.failed", "sequence_number": 1,
              "response": {"status": "failed", "output": [],
                           "error": {"code": "context_length_exceeded", "message": "too long"}}}  # fmt: skip
    tee = ResponsesAssembler()
    tee.feed(sse_event(failed))
    assert tee.error == {"error": {"code": "context_length_exceeded", "message": "too long"}}
    assert tee.finish_reason == "error" and tee.complete
    tee = ResponsesAssembler()
    tee.feed(sse_event({"type": "error", "sequence_number": 0, "code": "server_error",
                        "message": "boom", "param": None}))  # fmt: skip
    assert tee.error == {"error": {"code": "server_error", "message": "boom", "param": None}}


def test_a_whole_answer_reads_like_the_stream() -> None:
    """A non-streamed response body gives the same reply and usage as its stream."""
    body = {"model": "m", "input": "hi"}
    response = ResponseMaker().response(body, 7)  # type: ignore[arg-type]
    reply, finish, usage, error = read_answer(200, json.dumps(response).encode())
    assert reply is not None and reply["content"].startswith("Seen 1 items")
    assert (finish, error) == ("stop", None) and usage is not None and usage["prompt_tokens"] == 7
    err = {"error": {"message": "x", "code": "context_length_exceeded"}}
    assert read_answer(400, json.dumps(err).encode())[3] == err
