"""The MCP tools at ``/mcp`` on the running proxy, driven by the SDK's streamable HTTP
client: what ``migrate_session`` fits is what the proxy sends, and a client sees only
its own workspace."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import openai
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from proxy.store.read import SqliteReader
from tests.conftest import MakeProxy, ProxyHandle
from tests.fake_upstream import FakeUpstream

LONG = [
    {"role": "system", "content": "Be brief."},
    *[
        m
        for i in range(30)
        for m in (
            {"role": "user", "content": f"question {i}: " + "words " * 60},
            {"role": "assistant", "content": f"answer {i}: " + "more " * 60},
        )
    ],
    {"role": "user", "content": "and now?"},
]


def _client(proxy: ProxyHandle, key: str | None, **headers: str) -> Client:
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    http = httpx2.AsyncClient(headers=headers)
    return Client(streamable_http_client(f"{proxy.root}/mcp", http_client=http))


async def _until(check: Callable[[], Any], timeout: float = 8.0) -> Any:
    async with asyncio.timeout(timeout):
        while not (found := check()):
            await asyncio.sleep(0.05)
    return found


async def test_migrate_session_is_what_the_proxy_sends(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """The fitted messages equal those the upstream receives for the same conversation."""
    proxy = await make_proxy(
        fake_upstream.url, models={"tiny-2k": {"context_window": 2048, "max_output_tokens": 256}}
    )
    fake_upstream.models["tiny-2k"] = 2048
    async with _client(proxy, "sk-one") as c:
        r = await c.call_tool("migrate_session", {"messages": LONG, "target_model": "tiny-2k"})
    assert not r.is_error, r.content
    fitted = r.structured_content
    assert fitted is not None and fitted["decision"] == "compressed"
    chat = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-one", max_retries=0)
    await chat.chat.completions.create(model="tiny-2k", messages=LONG)  # type: ignore[arg-type]
    await chat.close()
    assert fake_upstream.chat_requests[-1].json()["messages"] == fitted["messages"]


async def test_a_client_sees_only_its_own_workspace(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """Key one's session and memory are listed, shown and recalled for key one only; key
    two gets an empty list and errors for one's id."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "writer": "thread"})
    chat = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-one", max_retries=0)
    history: list[dict[str, Any]] = []
    for ask in ("Write the parser in parser.py.", "remember this"):
        history.append({"role": "user", "content": ask})
        reply = await chat.chat.completions.create(model="gpt-4o", messages=history)  # type: ignore[arg-type]
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    await chat.close()
    (session,) = await _until(lambda: SqliteReader(db).list_sessions())
    sid = session["id"]
    await _until(lambda: SqliteReader(db).memory(sid))

    async with _client(proxy, "sk-one") as one:
        listed = (await one.call_tool("list_sessions", {})).structured_content
        assert [s["id"] for s in listed["result"]] == [sid]  # type: ignore[index]
        shown = await one.call_tool("show_session", {"id": sid})
        assert not shown.is_error
        got = (await one.call_tool("recall", {"query": "parser"})).structured_content
        assert got is not None and got["sessions"] == [sid]
        again = await one.call_tool("remember", {"session_id": sid})
        assert not again.is_error

    async with _client(proxy, "sk-two") as two:
        assert (await two.call_tool("list_sessions", {})).structured_content == {"result": []}
        for tool, args in (
            ("show_session", {"id": sid}),
            ("export_session", {"id": sid}),
            ("remember", {"session_id": sid}),
        ):
            r = await two.call_tool(tool, args)
            assert r.is_error and "no session" in r.content[0].text  # type: ignore[union-attr]
        got = (await two.call_tool("recall", {})).structured_content
        assert got is not None and got["message"] is None


async def test_the_access_key_guards_mcp(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """With server.access_key set, /mcp answers 401 without x-handoff-key, and works with it."""
    proxy = await make_proxy(fake_upstream.url, server={"access_key": "hk-secret"})
    async with httpx2.AsyncClient() as http:
        r = await http.post(
            f"{proxy.root}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        )
    assert r.status_code == 401
    async with _client(proxy, "sk-one", **{"x-handoff-key": "hk-secret"}) as c:
        assert len((await c.list_tools()).tools) == 9
