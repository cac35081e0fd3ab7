"""``/v1/responses`` end to end: the openai SDK → handoff → the strict fake's Responses API,
which refuses orphaned call outputs, edited or stray reasoning items and over-long input."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import httpx2
import openai
import pytest

from proxy.decide.tokens import TokenCounter
from proxy.store.read import SqliteReader
from proxy.store.sqlite import SqliteStore
from tests.conftest import MakeProxy, ProxyHandle
from tests.fake_upstream import FakeUpstream
from tests.fake_upstream.responses import strings

MODELS = {
    "small-8k": {"context_window": 8192, "max_output_tokens": 1024, "tokenizer": "o200k_base"},
    "big-1m": {"context_window": 1_000_000, "max_output_tokens": 1024, "tokenizer": "o200k_base"},
}
TOOLS = [
    {
        "type": "function",
        "name": "read_file",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    }
]
INSTRUCTIONS = "You are a careful code reader. Answer briefly."


@pytest.fixture
async def upstream(fake_upstream_factory: Any) -> FakeUpstream:
    """A fake whose Responses input count is o200k over every string it was sent."""
    enc = TokenCounter(cache_size=10_000).for_model("gpt-4o")
    fake: FakeUpstream = await fake_upstream_factory(models={"small-8k": 8192, "big-1m": 1_000_000})

    def count(body: Any) -> int:
        return sum(enc.count_text(s) for s in strings(body.get("input"))) + sum(
            enc.count_text(s) for s in strings(body.get("instructions"))
        )

    fake.count_input = count
    return fake


async def until(cond: Callable[[], object], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not cond():
            await asyncio.sleep(0.05)


def _file(i: int, lines: int) -> str:
    return "\n".join(f"def f_{i}_{j}(x): return x * {j}  # line {j}" for j in range(lines))


async def _tool_loop(
    client: openai.AsyncOpenAI, model: str, steps: int, lines: int, stream: bool
) -> tuple[list[dict[str, Any]], list[str], list[Any]]:
    """Codex's way: store false, the whole input resent, reasoning carried encrypted."""
    items: list[dict[str, Any]] = []
    decisions: list[str] = []
    finals: list[Any] = []
    for i in range(steps):
        items.append({"role": "user", "content": f"Step {i}: use the tool to read module {i}."})
        for _ in range(2):  # the call, then the answer to its output
            raw = await client.responses.with_raw_response.create(
                model=model,
                instructions=INSTRUCTIONS,
                input=items,  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
                store=False,
                include=["reasoning.encrypted_content"],
                stream=stream,  # type: ignore[call-overload]
            )
            decisions.append(raw.headers["x-handoff-decision"])
            parsed = raw.parse()
            if stream:
                events = [e async for e in parsed]  # type: ignore[union-attr]
                assert events[-1].type == "response.completed"
                response = events[-1].response
            else:
                response = parsed
            finals.append(response)
            output = [o.model_dump(exclude_none=True) for o in response.output]
            items += output
            calls = [o for o in output if o["type"] == "function_call"]
            if not calls:
                break
            for call in calls:
                out = {"type": "function_call_output", "call_id": call["call_id"]}
                items.append({**out, "output": _file(i, lines)})
    return items, decisions, finals


@pytest.mark.parametrize(("stream", "writer"), [(False, "thread"), (True, "process")])
async def test_roomy_window_forwards_bytes_unchanged(
    upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, stream: bool, writer: str
) -> None:
    """A tool loop that fits: every body reaches the upstream byte for byte, each turn is
    recorded (by either writer) as a Responses turn with its reply, usage and fields."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(upstream.url, store={"path": str(db), "writer": writer}, models=MODELS)
    proxy_bodies: list[bytes] = []

    async def keep(request: httpx2.Request) -> None:
        proxy_bodies.append(request.content)

    http = httpx2.AsyncClient(event_hooks={"request": [keep]})
    client = openai.AsyncOpenAI(
        base_url=proxy.url, api_key="sk-test", max_retries=0, http_client=http
    )
    _, decisions, finals = await _tool_loop(client, "big-1m", 3, 20, stream)
    await client.close()
    assert set(decisions) == {"passthrough"}
    assert all(f.status == "completed" for f in finals)
    sent = upstream.responses_requests
    assert len(sent) == 6
    assert all(r.body == b for r, b in zip(sent, proxy_bodies, strict=True))
    reader = SqliteReader(db)
    await until(lambda: reader.list_sessions() and reader.list_sessions()[0]["turns"] == 6)
    sid = reader.list_sessions()[0]["id"]
    turn = reader.turn(sid, 6)
    assert turn["wire"] == "responses"
    assert turn["usage"]["input_tokens"] > 0 and turn["usage"]["prompt_tokens"] > 0
    assert turn["reply"]["role"] == "assistant" and "Seen" in turn["reply"]["content"]
    assert turn["history"][0] == {"role": "system", "content": INSTRUCTIONS}
    assert turn["forwarded"] is None
    assert turn["request_params"]["include"] == ["reasoning.encrypted_content"]
    assert turn["request_params"]["store"] is False and "input" not in turn["request_params"]
    second = reader.turn(sid, 1)["reply"]
    assert second["tool_calls"][0]["function"]["name"] == "read_file"


@pytest.mark.parametrize("stream", [False, True])
async def test_small_window_compresses_keeping_pairs_and_reasoning(
    upstream: FakeUpstream, make_proxy: MakeProxy, stream: bool
) -> None:
    """Past 8k the history is compressed; the strict fake accepts every body (no orphaned
    output, no reasoning edited or left without its item), the instructions and the
    newest tool output arrive whole."""
    proxy = await make_proxy(upstream.url, models=MODELS)
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0)
    items, decisions, _ = await _tool_loop(client, "small-8k", 10, 60, stream)
    await client.close()
    assert decisions[0] == "passthrough" and decisions[-1] == "compressed"
    sent = [json.loads(r.body) for r in upstream.responses_requests]
    assert len(sent) == len(decisions)  # no upstream refusal, no retry
    last = sent[-1]
    assert last["instructions"] == INSTRUCTIONS
    assert len(last["input"]) < len(items)
    outputs = [i for i in last["input"] if i.get("type") == "function_call_output"]
    assert outputs[-1]["output"] == _file(9, 60)  # the newest tool result, whole
    originals = {i["id"]: i for i in items if i.get("type") == "reasoning"}
    for item in last["input"]:
        if item.get("type") == "reasoning":
            assert item == originals[item["id"]]


async def test_stateful_request_is_forwarded_and_says_so(
    upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """``previous_response_id``: the upstream holds the history; handoff forwards the body as
    it came and answers ``x-handoff-decision: stateful``."""
    proxy = await make_proxy(upstream.url, models=MODELS)
    body = b'{"model": "small-8k", "previous_response_id": "resp_1",  "input": "go on"}'
    status, headers, data = await _post(proxy, body)
    assert status == 200, data
    assert headers["x-handoff-decision"] == "stateful"
    assert upstream.responses_requests[-1].body == body


async def test_websocket_upgrade_is_refused_so_codex_falls_back(
    upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """Codex's WebSocket handshake on /v1/responses gets a 426 in OpenAI's shape (not 101),
    which makes it post over HTTP; the fake sees nothing."""
    proxy = await make_proxy(upstream.url, models=MODELS)
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.WSServerHandshakeError) as e:
            await s.ws_connect(proxy.url + "/responses")
        assert e.value.status == 426
        headers = {"Upgrade": "websocket", "Connection": "Upgrade"}
        async with s.get(proxy.url + "/responses", headers=headers) as r:
            err = (await r.json())["error"]
    assert err["code"] == "websocket_not_supported" and "POST /v1/responses" in err["message"]
    assert upstream.responses_requests == []


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b"{", None),
        (b"[]", None),
        (b'{"input": "hi"}', "model"),
        (b'{"model": "small-8k"}', "input"),
        (b'{"model": "small-8k", "input": 3}', "input"),
        (b'{"model": "small-8k", "input": [1]}', "input[0]"),
        (b'{"model": "small-8k", "input": [{"content": "x"}]}', "input[0].type"),
        (b'{"model": "small-8k", "input": [{"role": "bot", "content": "x"}]}', "input[0].role"),
        (
            b'{"model": "small-8k", "input": [{"type": "function_call", "name": "f"}]}',
            "input[0].call_id",
        ),
        (
            b'{"model": "small-8k", "input": [{"type": "reasoning", "summary": 1}]}',
            "input[0].summary",
        ),
    ],
)
async def test_bad_input_is_a_clear_400(
    upstream: FakeUpstream, make_proxy: MakeProxy, body: bytes, param: str | None
) -> None:
    """Every malformed body is refused by handoff itself, in OpenAI's error shape."""
    proxy = await make_proxy(upstream.url, models=MODELS)
    status, _, data = await _post(proxy, body)
    err = json.loads(data)["error"]
    assert status == 400
    assert err["type"] == "invalid_request_error" and err["message"]
    assert err["param"] == param
    assert upstream.responses_requests == []


async def test_upstream_overflow_is_refitted_once(
    upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A window configured too large: the upstream's ``context_length_exceeded`` makes
    handoff plan again smaller and retry once, the client gets the answer, and the turn
    is recorded with what was sent in the end."""
    models = {"small-8k": {**MODELS["small-8k"], "context_window": 32_768}}
    db = tmp_path / "h.db"
    store = SqliteStore(db, flush_interval_s=0.05)
    proxy = await make_proxy(upstream.url, store_obj=store, models=models)
    items: list[dict[str, Any]] = []
    for i in range(12):
        items += [
            {"role": "user", "content": f"read {i}"},
            {
                "type": "function_call",
                "call_id": f"c{i}",
                "name": "read_file",
                "arguments": "{}",
            },
            {"type": "function_call_output", "call_id": f"c{i}", "output": _file(i, 60)},
        ]
    items.append({"role": "user", "content": "And now?"})
    body = json.dumps({"model": "small-8k", "input": items, "tools": TOOLS}).encode()
    status, headers, data = await _post(proxy, body)
    assert status == 200, data
    assert headers["x-handoff-decision"] == "compressed"
    assert len(upstream.responses_requests) == 2
    assert json.loads(upstream.responses_requests[-1].body)["input"][-1] == items[-1]
    reader = SqliteReader(db)
    await until(lambda: reader.list_sessions())
    turn = reader.turn(reader.list_sessions()[0]["id"], 1)
    assert turn["action"] == "compressed" and turn["forwarded"] is not None


async def test_hangup_after_completed_is_a_whole_turn(
    upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A client that leaves as soon as it has ``response.completed`` (as Codex does) is
    recorded as a whole turn with its reply, not as cancelled."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(
        upstream.url, store_obj=SqliteStore(db, flush_interval_s=0.05), models=MODELS
    )
    upstream.linger = 1.0  # the stream stays open after response.completed
    body = {"model": "small-8k", "input": "hello", "stream": True, "store": False}
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/responses", json=body) as r:
            seen = b""
            async for chunk in r.content.iter_any():
                seen += chunk
                if b"response.completed" in seen:
                    break
    reader = SqliteReader(db)
    await until(lambda: reader.list_sessions())
    turn = reader.turn(reader.list_sessions()[0]["id"], 1)
    assert turn["cancelled"] is False and turn["status"] == 200
    assert "Seen 1 items" in turn["reply"]["content"]


async def test_stream_overflow_is_recorded_as_the_upstream_error(
    upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """An overflow told in-stream (``response.failed``) reaches the client verbatim and is
    recorded as the turn's error."""
    db = tmp_path / "h.db"
    models = {"small-8k": {**MODELS["small-8k"], "context_window": 100_000}}
    proxy = await make_proxy(
        upstream.url, store_obj=SqliteStore(db, flush_interval_s=0.05), models=models
    )
    upstream.overflow_in_stream = True
    body = {"model": "small-8k", "input": _file(0, 2000), "stream": True}
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/responses", json=body) as r:
            text = await r.text()
    assert "response.failed" in text and "context_length_exceeded" in text
    reader = SqliteReader(db)
    await until(lambda: reader.list_sessions())
    turn = reader.turn(reader.list_sessions()[0]["id"], 1)
    assert turn["error"]["error"]["code"] == "context_length_exceeded"


async def test_codex_session_header_threads_turns(
    upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """Two unrelated bodies sent with one Codex ``session-id`` header land in one session."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(
        upstream.url, store_obj=SqliteStore(db, flush_interval_s=0.05), models=MODELS
    )
    for text in ("first", "second"):
        body = json.dumps({"model": "small-8k", "input": text}).encode()
        status, _, _ = await _post(proxy, body, {"session-id": "codex-abc"})
        assert status == 200
    reader = SqliteReader(db)
    await until(lambda: sum(s["turns"] for s in reader.list_sessions()) == 2)
    sessions = reader.list_sessions()
    assert len(sessions) == 1 and sessions[0]["name"] == "codex-abc"


async def _post(
    proxy: ProxyHandle, body: bytes, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as s:
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        async with s.post(proxy.url + "/responses", data=body, headers=hdrs) as r:
            return r.status, dict(r.headers), await r.read()
