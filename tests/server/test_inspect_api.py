"""The read-only /handoff/v1 API, served by a real aiohttp test server."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from proxy.server.endpoint import Endpoints
from proxy.server.inspect_api import add_inspect_routes
from proxy.store.read import SqliteReader
from tests.store.test_fixtures import conversation, write

Client = Callable[..., Awaitable[TestClient[Any, Any]]]


def _app(path: Path, key: str = "") -> web.Application:
    root = web.Application()
    add_inspect_routes(root, SqliteReader(path), key, Endpoints().wrap)
    return root


@pytest.fixture
def seeded(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    turns = conversation(4, model_for=lambda i: "a" if i < 2 else "b")
    write(path, [dataclasses.replace(t, workspace="default") for t in turns])  # no key's
    return path


async def test_list_show_turn_export(seeded: Path, aiohttp_client: Client) -> None:
    """A loopback client can list, show, read a turn and export."""
    client = await aiohttp_client(_app(seeded))
    listing = await (await client.get("/handoff/v1/sessions", params={"model": "b"})).json()
    (row,) = listing["data"]
    assert row["turns"] == 4 and row["handoffs"] == 1
    sid = row["id"]
    info = await (await client.get(f"/handoff/v1/sessions/{sid[:5]}")).json()
    assert [t["model"] for t in info["timeline"]] == ["a", "a", "b", "b"]
    t2 = await (await client.get(f"/handoff/v1/sessions/{sid}/turns/2")).json()
    assert len(t2["history"]) == 4 and t2["reply"]["content"] == "answer 1"
    resp = await client.get(f"/handoff/v1/sessions/{sid}/export", params={"format": "openai"})
    messages = (await resp.json())["messages"]
    calls = [m["tool_calls"][0]["function"]["name"] for m in messages if m.get("tool_calls")]
    assert calls == ["lookup"] and messages[-1]["content"] == "answer 3"
    md = await client.get(f"/handoff/v1/sessions/{sid}/export", params={"format": "markdown"})
    assert md.content_type == "text/markdown" and "handoff a → b" in await md.text()


async def test_errors_are_openai_shaped(seeded: Path, aiohttp_client: Client) -> None:
    """Unknown sessions, turns and formats get OpenAI-shaped 404/400 bodies."""
    client = await aiohttp_client(_app(seeded))
    resp = await client.get("/handoff/v1/sessions/zzzz")
    body = await resp.json()
    assert resp.status == 404 and set(body["error"]) == {"message", "type", "param", "code"}
    sid = SqliteReader(seeded).list_sessions()[0]["id"]
    assert (await client.get(f"/handoff/v1/sessions/{sid}/turns/99")).status == 404
    resp = await client.get(f"/handoff/v1/sessions/{sid}/export", params={"format": "pdf"})
    assert resp.status == 400 and (await resp.json())["error"]["param"] == "format"
    resp = await client.get(f"/handoff/v1/sessions/{sid}/export", params={"sent": "1"})
    assert resp.status == 400 and (await resp.json())["error"]["param"] == "sent"
    resp = await client.get(
        f"/handoff/v1/sessions/{sid}/export",
        params={"format": "anthropic", "sent": "1", "turn": "1"},
    )
    assert resp.status == 200 and (await resp.json())["max_tokens"] == 4096
    resp = await client.get(
        f"/handoff/v1/sessions/{sid}/export",
        params={"format": "responses", "sent": "1", "turn": "2"},
    )
    assert resp.status == 200 and (await resp.json())["input"][-1]["type"] == "message"
    resp = await client.get(f"/handoff/v1/sessions/{sid}/export", params={"format": "native"})
    assert resp.status == 200 and "messages" in await resp.json()
    resp = await client.get("/handoff/v1/sessions", params={"since": "yesterday"})
    assert resp.status == 400
    resp = await client.get(f"/handoff/v1/sessions/{sid}/turns/two")
    error = (await resp.json())["error"]
    assert resp.status == 400 and error["param"] == "n" and "integer" in error["message"]


async def test_non_loopback_needs_the_key(
    seeded: Path, aiohttp_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-loopback client is refused without the key and answered with it."""
    monkeypatch.setattr("proxy.server.inspect_api._is_loopback", lambda remote: False)
    client = await aiohttp_client(_app(seeded, key="s3cret"))
    resp = await client.get("/handoff/v1/sessions")
    assert resp.status == 403 and (await resp.json())["error"]["type"] == "permission_error"
    wrong = await client.get("/handoff/v1/sessions", headers={"x-handoff-key": "nope"})
    assert wrong.status == 403
    ok = await client.get("/handoff/v1/sessions", headers={"x-handoff-key": "s3cret"})
    assert ok.status == 200


async def test_non_loopback_refused_without_configured_key(
    seeded: Path, aiohttp_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no access key configured, non-loopback clients are refused even with a header."""
    monkeypatch.setattr("proxy.server.inspect_api._is_loopback", lambda remote: False)
    client = await aiohttp_client(_app(seeded))
    resp = await client.get("/handoff/v1/sessions", headers={"x-handoff-key": ""})
    assert resp.status == 403


@pytest.mark.parametrize("value", [str(2**63), str(2**64 + 5), str(-(2**63) - 1), "9" * 400])
async def test_integers_sqlite_cannot_hold_are_a_4xx(
    seeded: Path, aiohttp_client: Client, value: str
) -> None:
    """A limit, turn or diff number past SQLite's 64-bit integers is a clear 4xx, not a 500."""
    client = await aiohttp_client(_app(seeded))
    sid = SqliteReader(seeded).list_sessions()[0]["id"]
    for path, params in (
        ("/handoff/v1/sessions", {"limit": value}),
        (f"/handoff/v1/sessions/{sid}/turns/{value}", {}),
        (f"/handoff/v1/sessions/{sid}/diff/{value}", {}),
        (f"/handoff/v1/sessions/{sid}/export", {"turn": value}),
    ):
        resp = await client.get(path, params=params)
        body = await resp.json()
        assert 400 <= resp.status < 500, (path, resp.status, body)
        assert set(body["error"]) == {"message", "type", "param", "code"}


async def test_a_limit_below_one_is_refused(seeded: Path, aiohttp_client: Client) -> None:
    """limit=0 or a negative limit is a 400 naming the parameter, not a silent default."""
    client = await aiohttp_client(_app(seeded))
    for value in ("0", "-1"):
        resp = await client.get("/handoff/v1/sessions", params={"limit": value})
        assert resp.status == 400 and (await resp.json())["error"]["param"] == "limit"
