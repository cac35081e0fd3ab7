"""The fake upstream behaves like OpenAI where a proxy could get it wrong."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from openai import AsyncOpenAI

from tests.fake_upstream import (
    ApiError,
    FakeUpstream,
    Fault,
    FaultKind,
    authorization_fingerprint,
    build_completion,
    check_tool_pairing,
    free_port,
    running,
    stream_events,
)
from tests.fixtures_upstream import FakeUpstreamFactory, fake_upstream, fake_upstream_factory

__all__ = ["fake_upstream", "fake_upstream_factory"]  # fixtures, imported to be found

USER: Any = [{"role": "user", "content": "Hello there"}]
WEATHER: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
ORPHAN = (
    "Invalid parameter: messages with role 'tool' must be a response to a preceeding "
    "message with 'tool_calls'."
)


@pytest.fixture
async def client(fake_upstream: FakeUpstream) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=fake_upstream.url, api_key="sk-test", max_retries=0) as c:
        yield c


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def tool_turns(call_id: str = "call_1") -> Any:
    call = {"id": call_id, "type": "function", "function": {"name": "f", "arguments": "{}"}}
    return [
        {"role": "user", "content": "use a tool"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": "42"},
    ]


# ---------------------------------------------------------------- replies


async def test_non_streaming_reply_echoes_and_counts(client: AsyncOpenAI) -> None:
    """A plain request gets an OpenAI-shaped completion echoing the last user text."""
    raw = await client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER)
    reply = raw.parse()
    assert reply.id.startswith("chatcmpl-")
    assert reply.choices[0].message.content == "Echo: Hello there"
    assert reply.choices[0].finish_reason == "stop"
    assert reply.usage is not None
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert raw.headers["x-request-id"].startswith("req_")
    assert raw.headers["x-fake-saw-authorization"] == authorization_fingerprint("Bearer sk-test")


async def test_injected_counter_sets_prompt_tokens(
    fake_upstream_factory: FakeUpstreamFactory,
) -> None:
    """An injected token counter is what usage.prompt_tokens reports."""
    fake = await fake_upstream_factory(count_tokens=lambda body: 1234)
    async with AsyncOpenAI(base_url=fake.url, api_key="k", max_retries=0) as client:
        reply = await client.chat.completions.create(model="gpt-4o", messages=USER)
    assert reply.usage is not None and reply.usage.prompt_tokens == 1234


async def test_n_and_max_tokens_are_respected(client: AsyncOpenAI) -> None:
    """n gives n choices; a tiny max_tokens cuts the reply with finish_reason length."""
    reply = await client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "x" * 100}], n=2, max_tokens=2
    )
    assert [c.index for c in reply.choices] == [0, 1]
    assert reply.choices[1].finish_reason == "length"
    assert len(reply.choices[0].message.content or "") <= 8


async def test_streaming_sends_role_content_finish_usage_done(
    fake_upstream: FakeUpstream, http: aiohttp.ClientSession
) -> None:
    """A stream is real SSE: role delta, several content chunks, finish, usage, [DONE]."""
    body = {"model": "gpt-4o", "messages": USER, "stream": True}
    body["stream_options"] = {"include_usage": True}
    async with http.post(fake_upstream.url + "/chat/completions", json=body) as response:
        assert response.content_type == "text/event-stream"
        text = (await response.read()).decode()
    frames = text.split("\n\n")
    assert frames[-2:] == ["data: [DONE]", ""]
    events = [json.loads(f.removeprefix("data: ")) for f in frames[:-2]]
    assert events[0]["choices"][0]["delta"]["role"] == "assistant"
    content = [e["choices"][0]["delta"].get("content") for e in events[1:-2]]
    assert len(content) == 4 and "".join(content) == "Echo: Hello there"
    assert events[-2]["choices"][0]["finish_reason"] == "stop"
    assert events[-1]["choices"] == [] and events[-1]["usage"]["completion_tokens"] > 0


async def test_sdk_stream_assembles_the_same_text(client: AsyncOpenAI) -> None:
    """The SDK reads the stream into the same text the non-streamed reply has."""
    stream = await client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
    parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    assert "".join(parts) == "Echo: Hello there"


async def test_tool_trigger_returns_a_tool_call(client: AsyncOpenAI) -> None:
    """A user message saying 'tool' with tools given yields a call to the first tool."""
    messages: Any = [{"role": "user", "content": "Please call a tool for Paris"}]
    reply = await client.chat.completions.create(
        model="gpt-4o",
        messages=messages,
        tools=[WEATHER],
    )
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    assert call.id.startswith("call_") and call.function.name == "get_weather"
    assert set(json.loads(call.function.arguments)) == {"city"}


async def test_streamed_tool_call_arrives_in_fragments(client: AsyncOpenAI) -> None:
    """Streamed tool-call deltas carry id and name first, then argument fragments."""
    messages: Any = [{"role": "user", "content": "tool please"}]
    stream = await client.chat.completions.create(
        model="gpt-4o",
        messages=messages,
        tools=[WEATHER],
        stream=True,
    )
    deltas = [c.choices[0].delta for c in [c async for c in stream] if c.choices]
    calls = [d.tool_calls[0] for d in deltas if d.tool_calls]
    assert calls[0].id and calls[0].function and calls[0].function.name == "get_weather"
    fragments = [c.function.arguments or "" for c in calls[1:] if c.function]
    assert len(fragments) > 1 and set(json.loads("".join(fragments))) == {"city"}


async def test_models_lists_windows_when_asked(fake_upstream_factory: FakeUpstreamFactory) -> None:
    """/v1/models has OpenAI's list shape, plus vLLM/OpenRouter window fields if configured."""
    fake = await fake_upstream_factory(
        models={"a-8k": 8192}, model_list_extras=("max_model_len", "context_length")
    )
    async with AsyncOpenAI(base_url=fake.url, api_key="k", max_retries=0) as client:
        page = await client.models.list()
    model = page.data[0].model_dump()
    assert model["id"] == "a-8k" and model["object"] == "model"
    assert model["max_model_len"] == model["context_length"] == 8192


# ---------------------------------------------------------------- strict errors


async def test_orphaned_tool_message_is_rejected(client: AsyncOpenAI) -> None:
    """A tool message without its assistant tool_calls gets OpenAI's 400."""
    messages = tool_turns()
    del messages[1]
    with pytest.raises(openai.BadRequestError) as info:
        await client.chat.completions.create(model="gpt-4o", messages=messages)
    error = info.value.body
    assert isinstance(error, dict)
    assert error["message"] == ORPHAN and error["param"] == "messages.[1].role"
    assert error["type"] == "invalid_request_error"


async def test_unanswered_tool_call_is_rejected(client: AsyncOpenAI) -> None:
    """An assistant tool call with no tool answer gets OpenAI's 400 naming the id."""
    messages: Any = [*tool_turns("call_abc")[:2], {"role": "user", "content": "and?"}]
    with pytest.raises(openai.BadRequestError, match="did not have response messages: call_abc"):
        await client.chat.completions.create(model="gpt-4o", messages=messages)


async def test_paired_tool_conversation_is_accepted(client: AsyncOpenAI) -> None:
    """A well-paired tool exchange passes validation."""
    reply = await client.chat.completions.create(model="gpt-4o", messages=tool_turns())
    assert reply.choices[0].message.content == "Echo: use a tool"


@pytest.mark.parametrize(
    ("body", "param", "code"),
    [
        (b"{not json", None, None),
        (b"[]", "body", "invalid_type"),
        (b'{"messages": []}', None, None),
        (b'{"model": "gpt-4o"}', "messages", "missing_required_parameter"),
        (b'{"model": "gpt-4o", "messages": "hi"}', "messages", "invalid_type"),
        (b'{"model": "gpt-4o", "messages": []}', "messages", "empty_array"),
        (
            b'{"model": "gpt-4o", "messages": [{"content": "x"}]}',
            "messages[0].role",
            "missing_required_parameter",
        ),
        (
            b'{"model": "gpt-4o", "messages": [{"role": "bot", "content": "x"}]}',
            "messages[0].role",
            "invalid_value",
        ),
        (
            b'{"model": "gpt-4o", "messages": [{"role": "user", "content": 3}]}',
            "messages[0].content",
            "invalid_type",
        ),
        (
            b'{"model": "gpt-4o", "messages": [{"role": "user"}]}',
            "messages[0].content",
            "missing_required_parameter",
        ),
        (
            b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}], '
            b'"stream_options": {"include_usage": true}}',
            "stream_options",
            None,
        ),
        (
            b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}], "n": 100000000}',
            "n",
            "integer_above_max_value",
        ),
        (
            b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}], "n": 0}',
            "n",
            "integer_below_min_value",
        ),
    ],
)
async def test_bad_bodies_get_openai_400s(
    fake_upstream: FakeUpstream,
    http: aiohttp.ClientSession,
    body: bytes,
    param: str | None,
    code: str | None,
) -> None:
    """Each malformed body gets 400 with OpenAI's error shape, param and code."""
    async with http.post(fake_upstream.url + "/chat/completions", data=body) as response:
        assert response.status == 400
        error = (await response.json())["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", param, code)


async def test_unknown_model_is_404(client: AsyncOpenAI) -> None:
    """An unknown model gets 404 model_not_found."""
    with pytest.raises(openai.NotFoundError) as info:
        await client.chat.completions.create(model="nope", messages=USER)
    assert info.value.code == "model_not_found"


async def test_context_overflow_gives_openai_message(
    fake_upstream_factory: FakeUpstreamFactory,
) -> None:
    """Prompt tokens over the window get OpenAI's context_length_exceeded text."""
    fake = await fake_upstream_factory(count_tokens=lambda body: 9000)
    async with AsyncOpenAI(base_url=fake.url, api_key="k", max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(model="small-8k", messages=USER)
        assert info.value.code == "context_length_exceeded"
        assert info.value.body == {
            "message": "This model's maximum context length is 8192 tokens. However, your "
            "messages resulted in 9000 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error",
            "param": "messages",
            "code": "context_length_exceeded",
        }
        reply = await client.chat.completions.create(model="big-1m", messages=USER)
    assert reply.usage is not None and reply.usage.prompt_tokens == 9000


async def test_max_tokens_counts_against_the_window(client: AsyncOpenAI) -> None:
    """A prompt that fits is refused when max_tokens pushes it past the window."""
    with pytest.raises(
        openai.BadRequestError, match=r"\(\d+ in the messages, 8190 in the completion\)"
    ):
        await client.chat.completions.create(model="small-8k", messages=USER, max_tokens=8190)


# ---------------------------------------------------------------- recording and transparency


async def test_records_exact_bytes_and_headers(
    fake_upstream: FakeUpstream, http: aiohttp.ClientSession
) -> None:
    """The recorded body is byte-identical to what was sent; headers are case-insensitive."""
    sent = '{ "model":"gpt-4o",  "messages":[{"role":"user","content":"h\\u00e9 ✓"}] }'.encode()
    headers = {"X-Custom": "yes", "Authorization": "Bearer sk-secret"}
    async with http.post(
        fake_upstream.url + "/chat/completions?a=1", data=sent, headers=headers
    ) as r:
        assert r.status == 200
        assert r.headers["x-fake-saw-authorization"] == authorization_fingerprint(
            "Bearer sk-secret"
        )
    [recorded] = await fake_upstream.wait_for_requests(1)
    assert recorded.body == sent and recorded.query_string == "a=1"
    assert recorded.headers["x-custom"] == "yes" and recorded.method == "POST"


async def test_other_routes_echo(fake_upstream: FakeUpstream, http: aiohttp.ClientSession) -> None:
    """Any other /v1 route answers 200 with an echo of method, path, query and body size."""
    async with http.post(fake_upstream.url + "/embeddings?x=1", data=b"12345") as response:
        echo = await response.json()
    assert echo == {
        "method": "POST",
        "path": "/v1/embeddings",
        "query": {"x": "1"},
        "body_length": 5,
    }
    assert fake_upstream.requests[0].body == b"12345"


# ---------------------------------------------------------------- faults


async def test_stopped_server_and_free_port_refuse(
    fake_upstream: FakeUpstream, http: aiohttp.ClientSession
) -> None:
    """A stopped fake, like a free port, refuses connections."""
    url = fake_upstream.url
    await fake_upstream.stop()
    for target in (url, f"http://127.0.0.1:{free_port()}/v1"):
        with pytest.raises(aiohttp.ClientConnectorError):
            await http.get(target + "/models")


async def test_reset_before_headers(
    fake_upstream: FakeUpstream, http: aiohttp.ClientSession
) -> None:
    """A reset before headers is a disconnect, and the next request is served again."""
    fake_upstream.inject(Fault(FaultKind.RESET_BEFORE_HEADERS))
    body = {"model": "gpt-4o", "messages": USER}
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await http.post(fake_upstream.url + "/chat/completions", json=body)
    async with http.post(fake_upstream.url + "/chat/completions", json=body) as response:
        assert response.status == 200


@pytest.mark.parametrize("stream", [True, False])
async def test_reset_mid_stream(
    fake_upstream: FakeUpstream, http: aiohttp.ClientSession, stream: bool
) -> None:
    """A mid-stream reset sends headers and part of the body, then breaks the connection."""
    fake_upstream.fault = Fault(FaultKind.RESET_MID_STREAM, after_events=2)
    body = {"model": "gpt-4o", "messages": USER, "stream": stream}
    async with http.post(fake_upstream.url + "/chat/completions", json=body) as response:
        assert response.status == 200
        with pytest.raises(aiohttp.ClientPayloadError):
            await response.read()


@pytest.mark.parametrize("kind", [FaultKind.HANG_BEFORE_HEADERS, FaultKind.HANG_MID_STREAM])
async def test_hang_ends_when_client_leaves(
    fake_upstream: FakeUpstream, http: aiohttp.ClientSession, kind: FaultKind
) -> None:
    """A hanging answer stays silent until the client gives up, which is recorded."""
    fake_upstream.inject(Fault(kind, after_events=1))
    body = {"model": "gpt-4o", "messages": USER, "stream": True}
    timeout = aiohttp.ClientTimeout(sock_read=0.2)
    with pytest.raises(asyncio.TimeoutError):
        async with http.post(
            fake_upstream.url + "/chat/completions", json=body, timeout=timeout
        ) as r:
            await r.read()
    [cancelled] = await fake_upstream.wait_for_cancelled(1)
    assert cancelled.index == 0


async def test_client_disconnect_mid_stream_is_recorded(
    fake_upstream: FakeUpstream, http: aiohttp.ClientSession
) -> None:
    """A client that leaves a slow stream is seen as cancelled."""
    fake_upstream.chunk_delay = 0.2
    body = {"model": "gpt-4o", "messages": USER, "stream": True}
    async with http.post(fake_upstream.url + "/chat/completions", json=body) as response:
        await response.content.readline()
    assert len(await fake_upstream.wait_for_cancelled(1)) == 1


async def test_delay_spaces_chunks(fake_upstream: FakeUpstream, client: AsyncOpenAI) -> None:
    """With a chunk delay, the first chunk reaches the client before the last is sent."""
    fake_upstream.chunk_delay = 0.05
    stream = await client.chat.completions.create(model="gpt-4o", messages=USER, stream=True)
    first = await anext(aiter(stream))
    sent_at_first = fake_upstream.frames_sent
    rest = [chunk async for chunk in stream]
    assert first.choices[0].delta.role == "assistant"
    assert sent_at_first < len(rest) + 2 == fake_upstream.frames_sent


@pytest.mark.parametrize(
    ("kind", "status", "exception"),
    [
        (FaultKind.SERVER_ERROR, 500, openai.InternalServerError),
        (FaultKind.RATE_LIMIT, 429, openai.RateLimitError),
    ],
)
async def test_error_faults(
    fake_upstream: FakeUpstream,
    client: AsyncOpenAI,
    kind: FaultKind,
    status: int,
    exception: type[openai.APIStatusError],
) -> None:
    """Server and rate-limit faults give OpenAI's status and error body."""
    fake_upstream.inject(Fault(kind, retry_after=7))
    with pytest.raises(exception) as info:
        await client.chat.completions.create(model="gpt-4o", messages=USER)
    assert info.value.status_code == status
    if kind is FaultKind.RATE_LIMIT:
        assert info.value.code == "rate_limit_exceeded"
        assert info.value.response.headers["retry-after"] == "7"


async def test_not_json_fault(fake_upstream: FakeUpstream, http: aiohttp.ClientSession) -> None:
    """The not-JSON fault answers 200 with a body that does not parse."""
    fake_upstream.inject(Fault(FaultKind.NOT_JSON))
    async with http.post(fake_upstream.url + "/chat/completions", json={"model": "gpt-4o"}) as r:
        assert r.status == 200
        with pytest.raises(json.JSONDecodeError):
            json.loads(await r.read())


@pytest.mark.parametrize(
    ("style", "needle"),
    [
        (
            "openai",
            "maximum context length is 4096 tokens. However, your messages resulted in 5000",
        ),
        ("llamacpp", "request (5000 tokens) exceeds the available context size (4096 tokens)"),
        ("vllm", "maximum context length is 4096 tokens. However, you requested 5000 tokens"),
        ("ollama", "the input length exceeds the context length"),
    ],
)
async def test_context_faults_speak_each_dialect(
    fake_upstream: FakeUpstream, http: aiohttp.ClientSession, style: Any, needle: str
) -> None:
    """A context fault answers 400 in the chosen server's words, whatever the size."""
    fake_upstream.inject(
        Fault(FaultKind.CONTEXT_LENGTH, style=style, n_ctx=4096, prompt_tokens=5000)
    )
    body = {"model": "gpt-4o", "messages": USER}
    async with http.post(fake_upstream.url + "/chat/completions", json=body) as response:
        assert response.status == 400
        assert needle in await response.text()


# ---------------------------------------------------------------- standalone


async def test_running_serves_on_a_free_port() -> None:
    """running() serves a fake on loopback and refuses connections after."""
    async with (
        running(FakeUpstream()) as fake,
        aiohttp.ClientSession() as http,
        http.get(fake.url + "/models") as response,
    ):
        assert (await response.json())["object"] == "list"
    assert fake.requests[0].path == "/v1/models"


def test_module_runs_as_a_subprocess() -> None:
    """python -m tests.fake_upstream prints its URL and serves it."""
    cmd = [sys.executable, "-m", "tests.fake_upstream", "--port", "0"]
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as process:
        try:
            url = process.stdout.readline().strip() if process.stdout else ""
            assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")

            async def fetch() -> Any:
                async with aiohttp.ClientSession() as http, http.get(url + "/models") as r:
                    return await r.json()

            assert asyncio.run(fetch())["data"][0]["object"] == "model"
        finally:
            process.terminate()


# ---------------------------------------------------------------- properties


@given(st.lists(st.integers(min_value=0, max_value=3), max_size=6), st.integers(min_value=0))
@example([1], 0)
@example([2, 0, 1], 1)
def test_pairing_holds_for_complete_exchanges_and_fails_without_a_result(
    sizes: list[int], pick: int
) -> None:
    """Complete tool exchanges pass; dropping any tool result is always rejected."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for turn, size in enumerate(sizes):
        ids = [f"call_{turn}_{k}" for k in range(size)]
        calls = [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
        ]
        messages.append(
            {"role": "assistant", "content": "ok", **({"tool_calls": calls} if calls else {})}
        )
        messages += [{"role": "tool", "tool_call_id": i, "content": "r"} for i in ids]
    check_tool_pairing(messages)
    tools = [i for i, m in enumerate(messages) if m["role"] == "tool"]
    if tools:
        drop = tools[pick % len(tools)]
        with pytest.raises(ApiError):
            check_tool_pairing(messages[:drop] + messages[drop + 1 :])


@settings(max_examples=50)
@given(st.text(max_size=300), st.integers(min_value=1, max_value=20), st.booleans())
@example("", 1, False)
def test_stream_events_reassemble_the_completion(text: str, chunks: int, tool: bool) -> None:
    """Joining the streamed deltas gives back the non-streamed content or arguments."""
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": text + " tool"}]}
    if tool:
        body["tools"] = [WEATHER]
    completion = build_completion(body, 10)
    events = stream_events(completion, chunks, include_usage=True)
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    message = completion["choices"][0]["message"]
    if tool:
        args = "".join(
            d["tool_calls"][0]["function"]["arguments"] for d in deltas if "tool_calls" in d
        )
        assert args == message["tool_calls"][0]["function"]["arguments"]
    else:
        assert "".join(d.get("content") or "" for d in deltas) == message["content"]
    assert events[-1]["usage"] == completion["usage"]
