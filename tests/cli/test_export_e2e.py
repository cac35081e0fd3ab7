"""Sessions recorded through the real proxy in the agents' wire formats, exported in their
own format (``--format responses|anthropic``, and ``native``), are bodies the strict fake
upstream accepts: tool pairs, images and the system prompt where each API wants them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from proxy.store.read import SqliteReader
from proxy.store.sqlite import SqliteStore
from tests.cli.test_sessions import cli
from tests.conftest import MakeProxy, ProxyHandle
from tests.fake_upstream import FakeUpstream
from tests.server.test_anthropic_e2e import ROOMY, _setup
from tests.server.test_responses_e2e import INSTRUCTIONS, MODELS, TOOLS, _tool_loop, until

PNG = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8"
    "z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


def _export(capsys: pytest.CaptureFixture[str], db: Path, sid: str, *argv: str) -> Any:
    capsys.readouterr()
    assert cli("sessions", "export", sid, *argv, "--store", str(db)) == 0
    return json.loads(capsys.readouterr().out)


async def _post(url: str, body: Any, headers: dict[str, str]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body, headers=headers) as r:
        return r.status, await r.json()


async def _session(db: Path, turns: int) -> str:
    reader = SqliteReader(db)
    await until(lambda: sum(s["turns"] for s in reader.list_sessions()) == turns)
    (row,) = reader.list_sessions()
    return str(row["id"])


async def _responses_proxy(
    fake_upstream_factory: Any, make_proxy: MakeProxy, db: Path
) -> tuple[FakeUpstream, ProxyHandle, openai.AsyncOpenAI]:
    up: FakeUpstream = await fake_upstream_factory(models={"small-8k": 8192, "big-1m": 1_000_000})
    proxy = await make_proxy(up.url, store={"path": str(db)}, models=MODELS)
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0)
    return up, proxy, client


async def test_responses_session_exports_as_a_body_the_api_accepts(
    fake_upstream_factory: Any,
    make_proxy: MakeProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Codex-like tool loop and then an image, recorded through handoff, exported as
    ``responses``: the instructions apart, every call before its output by call_id, the
    image an input_image, no reasoning item (handoff cannot recreate its encrypted
    content); the fake's /v1/responses answers it 200. ``native`` (CLI and inspect API)
    is the same body."""
    db = tmp_path / "h.db"
    up, proxy, client = await _responses_proxy(fake_upstream_factory, make_proxy, db)
    items, _, _ = await _tool_loop(client, "big-1m", 3, 20, stream=False)
    look = {"role": "user", "content": [
        {"type": "input_text", "text": "And what is in this picture?"},
        {"type": "input_image", "image_url": PNG, "detail": "low"},
    ]}  # fmt: skip
    await client.responses.create(
        model="big-1m", instructions=INSTRUCTIONS, input=[*items, look],  # type: ignore[list-item]
        tools=TOOLS, store=False,  # type: ignore[arg-type]
    )  # fmt: skip
    await client.close()
    sid = await _session(db, 7)

    body = _export(capsys, db, sid, "--format", "responses")
    assert body["model"] == "big-1m" and body["instructions"] == INSTRUCTIONS
    kinds = [i["type"] for i in body["input"]]
    assert "reasoning" not in kinds and kinds.count("function_call") == 3
    at = {(i["type"], i.get("call_id")): n for n, i in enumerate(body["input"])}
    calls = [i["call_id"] for i in body["input"] if i["type"] == "function_call"]
    assert calls == [i["call_id"] for i in items if i.get("type") == "function_call"]
    assert all(at["function_call", c] < at["function_call_output", c] for c in calls)
    picture = body["input"][-2]
    assert picture["content"][1] == {"type": "input_image", "image_url": PNG, "detail": "low"}
    assert body["input"][-1]["role"] == "assistant"  # the last reply
    assert body["input"][-1]["content"][0]["type"] == "output_text"

    status, answer = await _post(up.url + "/responses", body, {"Authorization": "Bearer k"})
    assert status == 200, answer
    assert answer["status"] == "completed"
    assert _export(capsys, db, sid, "--format", "native") == body
    async with aiohttp.ClientSession(headers={"Authorization": "Bearer sk-test"}) as s:
        url = f"{proxy.root}/handoff/v1/sessions/{sid}/export"  # (the key's own workspace)
        async with s.get(url, params={"format": "native"}) as r:
            assert r.status == 200 and await r.json() == body


async def test_compressed_responses_turn_sent_natively_is_accepted(
    fake_upstream_factory: Any,
    make_proxy: MakeProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The last turn of a loop compressed for an 8k window, exported ``--sent --format
    native``: the Responses body it sent (its own fields kept, reasoning aside), which
    the fake accepts as it is; without ``--sent`` the whole history is longer."""
    db = tmp_path / "h.db"
    up, _, client = await _responses_proxy(fake_upstream_factory, make_proxy, db)
    _, decisions, _ = await _tool_loop(client, "small-8k", 10, 60, stream=True)
    await client.close()
    assert decisions[-1] == "compressed"
    sid = await _session(db, len(decisions))
    sent = _export(capsys, db, sid, "--sent", "--format", "native")
    assert sent["instructions"] == INSTRUCTIONS and sent["store"] is False
    assert sent["include"] == ["reasoning.encrypted_content"] and sent["tools"] == TOOLS
    history = _export(capsys, db, sid, "--format", "responses")
    assert len(sent["input"]) < len(history["input"])
    sent["stream"] = False
    status, answer = await _post(up.url + "/responses", sent, {"Authorization": "Bearer k"})
    assert status == 200, answer


async def test_anthropic_session_exports_as_a_body_the_api_accepts(
    fake_upstream_factory: Any,
    make_proxy: MakeProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A Claude Code-like loop (a system prompt, thinking, a tool call and its result,
    an image) recorded through handoff, exported as ``anthropic`` and as ``native``:
    the same body, which the fake's /v1/messages (tool pairs, alternating roles,
    thinking signatures) answers 200."""
    db = tmp_path / "h.db"
    store = SqliteStore(db, flush_interval_s=0.05)
    up, client = await _setup(fake_upstream_factory, make_proxy, store)  # type: ignore[arg-type]
    system = "You are Claude Code."
    tool = {"name": "read_file", "description": "Read a file",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}  # fmt: skip
    messages: list[dict[str, Any]] = [{"role": "user", "content": "please use a tool"}]
    first = await client.messages.create(
        model=ROOMY, max_tokens=500, system=system, messages=messages,  # type: ignore[arg-type]
        tools=[tool], thinking={"type": "enabled", "budget_tokens": 100},  # type: ignore[list-item]
    )  # fmt: skip
    use = next(b for b in first.content if b.type == "tool_use")
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": use.id, "content": "x = 1\n" * 50},
            {"type": "text", "text": "and look at this"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": PNG.split(",", 1)[1]}},
        ]},
    ]  # fmt: skip
    await client.messages.create(
        model=ROOMY, max_tokens=500, system=system, messages=messages,  # type: ignore[arg-type]
        tools=[tool], thinking={"type": "enabled", "budget_tokens": 100},  # type: ignore[list-item]
    )  # fmt: skip
    sid = await _session(db, 2)

    body = _export(capsys, db, sid, "--format", "anthropic")
    assert body["system"] == system and body["max_tokens"] == 4096
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user", "assistant"]
    assert body["messages"][1]["content"][-1] == {
        "type": "tool_use", "id": use.id, "name": "read_file", "input": {"path": "big.txt"},
    }  # fmt: skip
    result, text, image = body["messages"][2]["content"]
    assert result["type"] == "tool_result" and result["tool_use_id"] == use.id
    assert text == {"type": "text", "text": "and look at this"}
    assert image["source"]["data"] == PNG.split(",", 1)[1]
    headers = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    status, answer = await _post(up.url + "/messages", body, headers)
    assert status == 200, answer
    assert _export(capsys, db, sid, "--format", "native") == body
    sent = _export(capsys, db, sid, "--sent", "--format", "native")
    assert sent["tools"] == [tool] and sent["system"] == system and "thinking" not in sent
    assert sent["max_tokens"] == 500 and sent["messages"] == body["messages"][:3]
    status, answer = await _post(up.url + "/messages", sent, headers)
    assert status == 200, answer
