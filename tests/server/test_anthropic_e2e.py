"""Anthropic Messages end to end: the official ``anthropic`` SDK → handoff → the strict
fake's ``/v1/messages``, which refuses split tool pairs, broken thinking signatures,
non-alternating roles and over-long prompts as the real API does."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import orjson
import pytest

from proxy.store.base import TurnRecord
from proxy.store.sqlite import SqliteStore
from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream
from tests.fake_upstream.anthropic import signature

SMALL = "claude-small"  # handoff's window for it: 6,000 tokens
ROOMY = "claude-roomy"


class ListStore(SqliteStore):
    """The real SQLite store, also keeping each record it is handed (as the proxy built it)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, flush_interval_s=0.05)
        self.turns: list[TurnRecord] = []

    def record(self, turn: TurnRecord) -> None:
        self.turns.append(turn)
        super().record(turn)


async def _setup(
    fake_upstream_factory: Any, make_proxy: MakeProxy, store: ListStore | None = None, **fake: Any
) -> tuple[FakeUpstream, anthropic.AsyncAnthropic]:
    up = await fake_upstream_factory(models={SMALL: fake.pop("window", 6000), ROOMY: 200_000})
    for k, v in fake.items():
        setattr(up.anthropic, k, v)
    proxy = await make_proxy(
        None,
        store_obj=store,
        upstreams=[
            {"name": "claude", "base_url": up.url, "kind": "anthropic", "models": ["claude-*"]}
        ],
        models={
            SMALL: {"context_window": 6000, "max_output_tokens": 1000},
            ROOMY: {"context_window": 200_000, "max_output_tokens": 1000},
        },
    )
    client = anthropic.AsyncAnthropic(
        base_url=str(proxy.server.make_url("")), api_key="sk-ant-test", max_retries=0
    )
    return up, client


def _history(turns: int, size: int = 4000, thinking: bool = True) -> list[dict[str, Any]]:
    """A Claude Code-like tool loop: each turn reads a large file."""
    msgs: list[dict[str, Any]] = [{"role": "user", "content": "Read the files and summarise."}]
    for t in range(turns):
        blocks: list[dict[str, Any]] = []
        if thinking:
            text = f"I should read file {t}."
            blocks.append({"type": "thinking", "thinking": text, "signature": signature(text)})
        blocks.append({"type": "text", "text": f"Reading file {t}."})
        blocks.append({"type": "tool_use", "id": f"toolu_{t}", "name": "Read",
                       "input": {"path": f"/src/f{t}.py"}})  # fmt: skip
        msgs.append({"role": "assistant", "content": blocks})
        body = "\n".join(f"line {i} of file {t}: " + "x" * 40 for i in range(size // 50))
        msgs.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{t}", "content": body},
        ]})  # fmt: skip
    return msgs


async def test_fitting_request_goes_as_it_came(
    fake_upstream_factory: Any, make_proxy: MakeProxy
) -> None:
    """A request that fits reaches the upstream byte for byte, headers and ?beta=true too."""
    up, client = await _setup(fake_upstream_factory, make_proxy)
    msg = await client.beta.messages.create(
        model=ROOMY, max_tokens=100, messages=[{"role": "user", "content": "hi"}],
        extra_headers={"anthropic-beta": "context-management-2025-06-27"},
        extra_query={"beta": "true"},  # (as Claude Code sends it)
    )  # fmt: skip
    assert msg.content[0].type == "text"
    sent = up.requests[-1]
    assert sent.path == "/v1/messages" and sent.query_string == "beta=true"
    key = sent.headers.get("x-api-key") or sent.headers["Authorization"]  # (SDKs differ)
    assert key.removeprefix("Bearer ") == "sk-ant-test"
    assert sent.headers["anthropic-version"] and sent.headers["anthropic-beta"]
    assert orjson.loads(sent.body) == {"model": ROOMY, "max_tokens": 100,
                                       "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip


async def test_long_tool_loop_is_compressed_in_anthropic_shape(
    fake_upstream_factory: Any, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """Over the window, the fake (strict on pairs, roles and signatures) accepts what
    handoff sends: system pinned, newest tool result whole, thinking byte-identical."""
    store = ListStore(tmp_path / "h.db")
    up, client = await _setup(fake_upstream_factory, make_proxy, store)
    history = _history(8)
    system = [
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
    ]
    raw = await client.messages.with_raw_response.create(
        model=SMALL, max_tokens=1000, system=system, messages=history,  # type: ignore[arg-type]
        thinking={"type": "enabled", "budget_tokens": 500},
        extra_headers={"X-Claude-Code-Session-Id": "cc-session-1"},
    )  # fmt: skip
    assert raw.headers["x-handoff-decision"] == "compressed"
    sent = orjson.loads(up.requests[-1].body)
    assert sent["system"] == system
    newest = history[-1]
    assert sent["messages"][-1] == newest  # the newest tool result whole
    thinking = [
        b for m in history for b in m["content"] if isinstance(b, dict) and b["type"] == "thinking"
    ]
    for m in sent["messages"]:
        for b in m["content"] if isinstance(m["content"], list) else ():
            if b["type"] == "thinking":
                assert b in thinking
    assert len(up.requests[-1].body) < len(orjson.dumps(history)) // 2
    await asyncio.sleep(0.05)
    turn = store.turns[-1]
    assert turn.wire == "anthropic" and turn.session_hint == "cc-session-1"
    assert turn.decision is not None and turn.decision.action == "compressed"
    assert turn.forwarded is not None and turn.reply is not None
    assert turn.usage is not None and turn.usage["input_tokens"] > 0
    for _ in range(100):  # and on disk, as a Messages turn with what was sent
        sessions = store.reader().list_sessions()
        if sessions:
            break
        await asyncio.sleep(0.05)
    stored = store.reader().turn(sessions[0]["id"], 1)
    assert stored["wire"] == "anthropic" and stored["forwarded"] is not None
    assert stored["request_params"]["system"] == system
    assert stored["prompt_tokens"] == turn.usage["input_tokens"]  # (+ cache read, creation)


async def test_stream_relayed_and_assembled(
    fake_upstream_factory: Any, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A streamed tool-use answer reaches the SDK whole; the store gets the tool call."""
    store = ListStore(tmp_path / "h.db")
    _, client = await _setup(fake_upstream_factory, make_proxy, store)
    async with client.messages.stream(
        model=ROOMY, max_tokens=100, messages=[{"role": "user", "content": "please use a tool"}],
        thinking={"type": "enabled", "budget_tokens": 50},
    ) as stream:  # fmt: skip
        final = await stream.get_final_message()
    kinds = [b.type for b in final.content]
    assert kinds == ["thinking", "tool_use"]
    assert final.content[1].input == {"path": "big.txt"}  # type: ignore[union-attr]
    await asyncio.sleep(0.05)
    reply = store.turns[-1].reply
    assert (
        reply is not None
        and reply["tool_calls"][0]["function"]["arguments"] == '{"path":"big.txt"}'
    )
    assert reply["blocks"][0]["signature"] == final.content[0].signature  # type: ignore[union-attr]
    assert store.turns[-1].finish_reason == "tool_use" and not store.turns[-1].cancelled


async def test_overflow_from_upstream_retried(
    fake_upstream_factory: Any, make_proxy: MakeProxy
) -> None:
    """The upstream's "prompt is too long: N tokens > M maximum" makes handoff fit M."""
    up, client = await _setup(fake_upstream_factory, make_proxy, window=3000)
    msg = await client.messages.create(model=SMALL, max_tokens=500, messages=_history(4, 3000))  # type: ignore[arg-type]
    assert msg.content[0].type == "text"
    first, second = (orjson.loads(r.body) for r in up.requests[-2:])
    assert len(orjson.dumps(second)) < len(orjson.dumps(first))


async def test_errors_in_anthropic_shape(fake_upstream_factory: Any, make_proxy: MakeProxy) -> None:
    """handoff's own errors on this route are Anthropic's shape, which the SDK reads."""
    up, client = await _setup(fake_upstream_factory, make_proxy)
    with pytest.raises(anthropic.BadRequestError) as bad:
        await client.messages.create(model=ROOMY, max_tokens=10, messages="nope")  # type: ignore[arg-type]
    assert bad.value.body["type"] == "error"  # type: ignore[index]
    assert bad.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError) as missing:
        await client.messages.create(
            model="gpt-4o", max_tokens=10, messages=[{"role": "user", "content": "x"}]
        )
    assert 'kind = "anthropic"' in missing.value.body["error"]["message"]  # type: ignore[index]
    async with aiohttp.ClientSession() as http:
        url = str(client.base_url).rstrip("/") + "/v1/messages"
        async with http.post(url, data=b"{not json", headers={"x-api-key": "k"}) as resp:
            assert resp.status == 400
            body = await resp.json()
    assert body["type"] == "error" and "not valid JSON" in body["error"]["message"]
    async with aiohttp.ClientSession() as http:
        broken = {"Content-Encoding": "gzip", "Content-Type": "application/json"}
        async with http.post(url, data=b"not gzip at all", headers=broken) as resp:
            assert resp.status == 400
            unreadable = await resp.json()
    assert unreadable["type"] == "error" and unreadable["error"]["type"] == "invalid_request_error"
    assert not [r for r in up.requests if r.path.startswith("/v1/messages")]  # none went on


async def test_count_tokens(fake_upstream_factory: Any, make_proxy: MakeProxy) -> None:
    """count_tokens reports what handoff would send: the upstream's count of the
    compressed body, or handoff's estimate when the upstream has no count_tokens."""
    history = _history(8)
    up, client = await _setup(fake_upstream_factory, make_proxy)
    counted = await client.messages.count_tokens(model=SMALL, messages=history)  # type: ignore[arg-type]
    assert counted.input_tokens < 6000 < len(orjson.dumps(history)) // 4
    sent = orjson.loads(up.requests[-1].body)
    assert up.requests[-1].path == "/v1/messages/count_tokens" and sent["messages"] != history
    up.anthropic.count_tokens = False
    raw = await client.messages.with_raw_response.count_tokens(model=SMALL, messages=history)  # type: ignore[arg-type]
    assert raw.headers["x-handoff-count"] == "approximate"
    assert 0 < (await raw.parse()).input_tokens < 6000


async def test_long_context_beta_widens_the_window(
    fake_upstream_factory: Any, make_proxy: MakeProxy
) -> None:
    """Claude Sonnet 4.5 is budgeted at 1M tokens when the request asks for the beta."""
    _, client = await _setup(fake_upstream_factory, make_proxy)
    ask = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": "x"}],
    }
    plain = await client.messages.with_raw_response.create(**ask)  # type: ignore[arg-type]
    wide = await client.messages.with_raw_response.create(
        **ask,  # type: ignore[arg-type]
        extra_headers={"anthropic-beta": "context-1m-2025-08-07"},
    )
    assert plain.headers["x-handoff-window"] == "200000"
    assert wide.headers["x-handoff-window"] == "1000000"


async def test_hanging_up_after_message_stop_is_a_whole_turn(
    fake_upstream_factory: Any, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A client that leaves once ``message_stop`` arrived (the upstream still open) had
    its whole answer: recorded complete, not cancelled."""
    store = ListStore(tmp_path / "h.db")
    up, client = await _setup(fake_upstream_factory, make_proxy, store, linger=2.0)
    url = str(client.base_url).rstrip("/") + "/v1/messages"
    ask = {"model": ROOMY, "max_tokens": 10, "stream": True,
           "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
    async with aiohttp.ClientSession() as http, http.post(url, json=ask) as resp:
        seen = b""
        async for chunk in resp.content.iter_any():
            seen += chunk
            if b"message_stop" in seen:
                break
    for _ in range(100):
        if store.turns:
            break
        await asyncio.sleep(0.02)
    turn = store.turns[-1]
    assert not turn.cancelled and turn.reply is not None and turn.reply["content"] == "ok"
    assert turn.finish_reason == "end_turn" and up.requests[-1].path == "/v1/messages"
