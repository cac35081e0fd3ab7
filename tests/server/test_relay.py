"""The transparent proxy: bytes, headers, status and streams pass through unchanged."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from typing import Any

import aiohttp
import openai
import pytest

from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream, authorization_fingerprint

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hello there"},
]


def _comparable(completion: Any) -> dict[str, Any]:
    data = completion.model_dump()
    for key in ("id", "created"):
        data.pop(key, None)
    for choice in data.get("choices") or []:
        for call in (choice.get("message") or {}).get("tool_calls") or []:
            call.pop("id", None)
    return data


async def test_body_reaches_upstream_byte_identical(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """An unchanged request reaches the upstream with exactly the bytes the client sent."""
    proxy = await make_proxy(fake_upstream.url)
    raw = (
        b'{ "messages":[{"role":"user","content":"caf\\u00e9 \xe2\x98\x95"}],\n'
        b'  "model" : "gpt-4o-mini", "temperature": 0.50, "x_unknown": {"keep": [1,2.0]} }'
    )
    async with aiohttp.ClientSession() as s:
        async with s.post(
            proxy.url + "/chat/completions",
            data=raw,
            headers={"Content-Type": "application/json", "Authorization": "Bearer sk-test"},
        ) as r:
            assert r.status == 200
            await r.read()
    assert fake_upstream.chat_requests[-1].body == raw


@pytest.mark.parametrize("stream", [False, True])
async def test_async_sdk_same_result_as_direct(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, stream: bool
) -> None:
    """The async SDK with only base_url changed gets what it gets direct, tools included."""
    proxy = await make_proxy(fake_upstream.url)
    results = []
    for base in (fake_upstream.url, proxy.url):
        client = openai.AsyncOpenAI(base_url=base, api_key="sk-test", max_retries=0)
        msgs = [*MESSAGES, {"role": "user", "content": "use a tool please, city Paris"}]
        if stream:
            parts = []
            async for chunk in await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=msgs,  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
                stream=True,
                stream_options={"include_usage": True},
            ):
                d = chunk.model_dump()
                d.pop("id", None)
                d.pop("created", None)
                for c in d.get("choices") or []:
                    for tc in (c.get("delta") or {}).get("tool_calls") or []:
                        tc.pop("id", None)
                parts.append(d)
            results.append(parts)
        else:
            completion = await client.chat.completions.create(
                model="gpt-4o-mini",
                messages=msgs,  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
            )
            results.append(_comparable(completion))
        await client.close()
    direct, proxied = results
    assert proxied == direct
    text = json.dumps(proxied)
    assert "get_weather" in text  # the tool call really came through


async def test_sync_sdk_through_proxy(fake_upstream: FakeUpstream, make_proxy: MakeProxy) -> None:
    """The sync SDK works through the proxy, streaming and not."""
    proxy = await make_proxy(fake_upstream.url)

    def run() -> tuple[str, str]:
        client = openai.OpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0)
        plain = client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)  # type: ignore[arg-type]
        streamed = "".join(
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(
                model="gpt-4o-mini",
                messages=MESSAGES,  # type: ignore[arg-type]
                stream=True,
            )
            if c.choices
        )
        client.close()
        return plain.choices[0].message.content or "", streamed

    plain, streamed = await asyncio.to_thread(run)
    assert plain and plain == streamed
    assert "Hello there" in plain


async def test_headers_and_error_status_pass_through(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """Upstream headers come back, and an upstream 400 body is relayed as it came."""
    proxy = await make_proxy(fake_upstream.url)
    orphan = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "tool", "tool_call_id": "x", "content": "1"},
        ],
    }
    async with aiohttp.ClientSession() as s:
        async with s.post(fake_upstream.url + "/chat/completions", json=orphan) as r:
            direct_status, direct_body = r.status, await r.read()
        async with s.post(proxy.url + "/chat/completions", json=orphan) as r:
            status, body, headers = r.status, await r.read(), r.headers
    assert status == direct_status == 400
    assert body == direct_body
    assert headers["x-request-id"].startswith("req_fake")
    assert headers["openai-version"] == "2020-10-01"


async def test_other_v1_paths_forwarded(fake_upstream: FakeUpstream, make_proxy: MakeProxy) -> None:
    """GET /v1/models and arbitrary /v1 paths keep method, query and body."""
    proxy = await make_proxy(fake_upstream.url)
    async with aiohttp.ClientSession() as s:
        async with s.get(proxy.url + "/models") as r:
            models = await r.json()
        async with s.post(
            proxy.url + "/embeddings?x=1&y=two", data=b'{"model":"gpt-4o","input":"a"}'
        ) as r:
            echo = await r.json()
    assert {m["id"] for m in models["data"]} >= {"gpt-4o-mini", "big-1m"}
    assert echo == {
        "method": "POST",
        "path": "/v1/embeddings",
        "query": {"x": "1", "y": "two"},
        "body_length": 30,
    }
    assert fake_upstream.requests[-1].body == b'{"model":"gpt-4o","input":"a"}'


async def test_routes_by_model_and_replaces_key(
    fake_upstream_factory: Any, make_proxy: MakeProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Models go to the first upstream whose globs match; api_key_env replaces the key."""
    openai_like = await fake_upstream_factory()
    local = await fake_upstream_factory(models={"llama3.1:8b": 8192})
    monkeypatch.setenv("TEST_UPSTREAM_KEY", "sk-from-env")
    proxy = await make_proxy(
        upstreams=[
            {"name": "local", "base_url": local.url, "models": ["llama*"]},
            {
                "name": "cloud",
                "base_url": openai_like.url,
                "models": ["gpt-*"],
                "api_key_env": "TEST_UPSTREAM_KEY",
            },
        ]
    )
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-client", max_retries=0)
    await client.chat.completions.create(model="llama3.1:8b", messages=MESSAGES)  # type: ignore[arg-type]
    await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)  # type: ignore[arg-type]
    with pytest.raises(openai.NotFoundError) as info:
        await client.chat.completions.create(model="claude-x", messages=MESSAGES)  # type: ignore[arg-type]
    await client.close()
    assert len(local.chat_requests) == 1 and len(openai_like.chat_requests) == 1
    assert local.chat_requests[0].headers["Authorization"] == "Bearer sk-client"
    assert openai_like.chat_requests[0].headers["Authorization"] == "Bearer sk-from-env"
    assert "No upstream is configured for model 'claude-x'" in str(info.value)


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b"", "body is empty"),
        (b'{"model": "gpt-4o"}', "'messages' is a required property"),
        (b'{"messages": []}', "model parameter"),
        (b'{"model": "gpt-4o", "messages": [{"content": "x"}]}', "messages[0].role"),
        (
            b'{"model": "gpt-4o", "messages": [{"role": "user", "content": 5}]}',
            "messages[0].content",
        ),
        (
            b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
            "not valid JSON",
        ),
    ],
)
async def test_bad_bodies_get_openai_shaped_400(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, body: bytes, fragment: str
) -> None:
    """Bad bodies get a 400 in OpenAI's error shape and never reach the upstream."""
    proxy = await make_proxy(fake_upstream.url)
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/chat/completions", data=body) as r:
            status, err = r.status, await r.json()
    assert status == 400
    assert set(err["error"]) == {"message", "type", "param", "code"}
    assert err["error"]["type"] == "invalid_request_error"
    assert fragment in err["error"]["message"]
    assert fake_upstream.chat_requests == []


async def test_body_over_limit_is_413(fake_upstream: FakeUpstream, make_proxy: MakeProxy) -> None:
    """A body over server.max_body_bytes is refused with 413, chunked or not."""
    proxy = await make_proxy(fake_upstream.url, server={"max_body_bytes": 1000})
    big = json.dumps(
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "x" * 2000}]}
    ).encode()

    async def chunked() -> Any:
        for i in range(0, len(big), 100):
            yield big[i : i + 100]

    async with aiohttp.ClientSession() as s:
        for data in (big, chunked()):
            async with s.post(proxy.url + "/chat/completions", data=data) as r:
                assert r.status == 413
                assert "max_body_bytes" in (await r.json())["error"]["message"]
    assert fake_upstream.chat_requests == []


async def test_unreachable_upstream_is_502(make_proxy: MakeProxy, unused_tcp_port: int) -> None:
    """Nothing listening upstream gives a 502 that says what to check."""
    proxy = await make_proxy(f"http://127.0.0.1:{unused_tcp_port}/v1")
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="k", max_retries=0)
    with pytest.raises(openai.APIStatusError) as info:
        await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)  # type: ignore[arg-type]
    await client.close()
    assert info.value.status_code == 502
    assert "Cannot connect to upstream" in str(info.value)


async def test_upstream_timeout_is_504(fake_upstream: FakeUpstream, make_proxy: MakeProxy) -> None:
    """An upstream that never answers gives a 504 after the idle-read timeout."""
    from tests.fake_upstream import Fault, FaultKind

    fake_upstream.inject(Fault(FaultKind.HANG_BEFORE_HEADERS))
    proxy = await make_proxy(fake_upstream.url, timeouts={"read_s": 0.3})
    async with aiohttp.ClientSession() as s:
        async with s.post(
            proxy.url + "/chat/completions", json={"model": "gpt-4o", "messages": MESSAGES}
        ) as r:
            status, err = r.status, await r.json()
    assert status == 504
    assert err["error"]["code"] == "upstream_timeout"
    await fake_upstream.wait_for_cancelled(1)


async def test_client_disconnect_cancels_upstream(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """A client that leaves mid-stream makes the proxy drop the upstream request at once."""
    fake_upstream.chunk_delay = 0.2
    fake_upstream.stream_chunks = 20
    proxy = await make_proxy(fake_upstream.url)
    body = {"model": "gpt-4o", "messages": MESSAGES, "stream": True}
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/chat/completions", json=body) as r:
            assert r.status == 200
            await r.content.readuntil(b"\n\n")  # the first event, then hang up
    gone = await fake_upstream.wait_for_cancelled(1, timeout=3.0)
    assert gone[0].path == "/v1/chat/completions"


async def test_stream_chunks_arrive_one_by_one(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """With a delay between upstream events, the client gets each as it is sent, not batched."""
    delay = 0.15
    fake_upstream.chunk_delay = delay
    fake_upstream.stream_chunks = 6
    proxy = await make_proxy(fake_upstream.url)
    body = {"model": "gpt-4o", "messages": MESSAGES, "stream": True}
    arrivals: list[float] = []
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/chat/completions", json=body) as r:
            assert r.headers["X-Accel-Buffering"] == "no"
            assert r.headers["Content-Type"].startswith("text/event-stream")
            async for _line in r.content:
                if _line.startswith(b"data:"):
                    arrivals.append(time.monotonic())
    # 6 content pieces + role + finish + [DONE]; each gap is at least one upstream delay.
    assert len(arrivals) >= 8
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    assert min(gaps) >= delay * 0.8, gaps
    assert arrivals[-1] - arrivals[0] >= delay * (len(arrivals) - 1) * 0.8


async def test_healthz(fake_upstream: FakeUpstream, make_proxy: MakeProxy) -> None:
    """/healthz answers with the upstreams it knows."""
    proxy = await make_proxy(fake_upstream.url)
    async with aiohttp.ClientSession() as s:
        async with s.get(proxy.root + "/healthz") as r:
            assert r.status == 200
            assert (await r.json())["upstreams"] == ["default"]


async def test_key_fingerprint_not_key(fake_upstream: FakeUpstream, make_proxy: MakeProxy) -> None:
    """Without api_key_env the client's Authorization arrives upstream unchanged."""
    proxy = await make_proxy(fake_upstream.url)
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-abc", max_retries=0)
    raw = await client.chat.completions.with_raw_response.create(model="gpt-4o", messages=MESSAGES)  # type: ignore[arg-type]
    await client.close()
    assert raw.headers["x-fake-saw-authorization"] == authorization_fingerprint("Bearer sk-abc")
