"""Snapshots through the running proxy: every turn recorded, threaded, and inspectable."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from proxy.cli.main import main as cli_main
from proxy.store.read import SqliteReader
from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream

ROOT = Path(__file__).resolve().parents[2]
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        },
    }
]


@pytest.fixture(params=["thread", "process"])
def writer(request: pytest.FixtureRequest) -> str:
    """Both writers: in the proxy's process, and in a child process of its own."""
    return str(request.param)


async def _until(check: Callable[[], bool], timeout: float = 3.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


def _sessions(db: Path) -> list[dict[str, Any]]:
    try:
        return SqliteReader(db).list_sessions()
    except Exception:
        return []


async def test_conversation_threads_and_handoff_is_marked(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, writer: str
) -> None:
    """Three turns and a model switch become one session with a handoff A → B."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "writer": writer})
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-one", max_retries=0)
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i, model in enumerate(["gpt-4o", "gpt-4o", "gpt-4o-mini"]):
        history.append({"role": "user", "content": f"question {i}"})
        reply = await client.chat.completions.create(model=model, messages=history)  # type: ignore[arg-type]
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    await client.close()
    await _until(lambda: sum(s["turns"] for s in _sessions(db)) == 3)
    (session,) = _sessions(db)
    assert session["turns"] == 3
    assert session["handoffs"] == 1
    assert set(session["models"]) == {"gpt-4o", "gpt-4o-mini"}
    detail = SqliteReader(db).session(session["id"])
    assert [t["model"] for t in detail["timeline"]] == ["gpt-4o", "gpt-4o", "gpt-4o-mini"]
    turn = SqliteReader(db).turn(session["id"], 3)
    assert turn["history"] == history[:-1]
    assert turn["reply"]["content"] == history[-1]["content"]


async def test_chat_record_fields(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, writer: str
) -> None:
    """Each thing the chat path records lands in its own field (``chat._record`` builds
    the record by position, so a field out of order would land in its neighbour's)."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "writer": writer})
    headers = {"x-handoff-workspace": "team-a", "x-handoff-session": "fields-1"}
    client = openai.AsyncOpenAI(
        base_url=proxy.url, api_key="sk-fields", max_retries=0, default_headers=headers
    )
    history: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "call the tool please"},
    ]
    t0 = time.time()
    reply = await client.chat.completions.create(
        model="gpt-4o", messages=history, temperature=0.25, tools=TOOLS
    )
    streamed = [c async for c in await client.chat.completions.create(
        model="gpt-4o-mini", messages=[*history, {"role": "user", "content": "and now?"}],
        stream=True, stream_options={"include_usage": True},
    )]  # fmt: skip
    t1 = time.time()
    await client.close()
    await _until(lambda: sum(s["turns"] for s in _sessions(db)) == 2)
    (session,) = _sessions(db)
    assert session["name"] == "fields-1"  # team-a: a sub-workspace of the key's own
    assert session["workspace"].startswith("key-") and session["workspace"].endswith("/team-a")
    first, second = (SqliteReader(db).turn(session["id"], n) for n in (1, 2))
    assert t0 <= first["started_at"] <= second["started_at"] <= t1
    assert (first["model"], first["upstream"], first["status"]) == ("gpt-4o", "default", 200)
    assert 0 < first["latency_ms"] < (t1 - t0) * 1000
    assert (first["streamed"], first["cancelled"], first["error"]) == (False, False, None)
    assert first["history"] == history
    assert first["request_params"] == {"temperature": 0.25, "tools": TOOLS}
    assert first["decision"] == {  # (a body this far inside the window is not counted)
        "action": "passthrough", "window": 128_000, "budget": 121_344, "tokens": None,
        "forwarded_tokens": None, "exact": True, "policies": [], "steps": [],
    }  # fmt: skip
    assert first["forwarded"] is None
    call = reply.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert first["reply"]["tool_calls"][0]["id"] == call.id
    assert first["finish_reason"] == "tool_calls"
    assert first["usage"] == reply.usage.model_dump(exclude_none=True)  # type: ignore[union-attr]
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert (second["model"], second["streamed"]) == ("gpt-4o-mini", True)
    assert second["reply"]["content"] == text and text.startswith("Echo: and now?")
    assert second["finish_reason"] == "stop"
    assert second["usage"]["prompt_tokens"] == streamed[-1].usage.prompt_tokens  # type: ignore[union-attr]


async def test_long_histories_are_stored_exactly(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, writer: str
) -> None:
    """Two conversations sharing a long system prompt, with bodies past 64 KiB (the
    proxy reuses their parse, and ships the writer process only what each adds): every
    turn's stored history is the history sent, byte for value."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "writer": writer})
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-one", max_retries=0)
    system = {"role": "system", "content": "Answer from the logs. " * 1500}  # ~33 KB
    histories: list[list[dict[str, Any]]] = [[system], [system]]
    sent: list[list[dict[str, Any]]] = [[], []]
    for i in range(5):
        for c, history in enumerate(histories):
            history.append({"role": "user", "content": f"[{c}] log {i}: " + "é ok " * 2000})
            reply = await client.chat.completions.create(model="gpt-4o", messages=history)  # type: ignore[arg-type]
            sent[c].append(list(history))
            history.append({"role": "assistant", "content": reply.choices[0].message.content})
    await client.close()
    await _until(lambda: sum(s["turns"] for s in _sessions(db)) == 10)
    reader = SqliteReader(db)
    sessions = sorted(_sessions(db), key=lambda s: s["title"])
    assert len(json.dumps(sent[0][-1]).encode()) > 64 << 10
    for c, session in enumerate(sessions):
        for n, history in enumerate(sent[c], start=1):
            assert reader.turn(session["id"], n)["history"] == history


async def test_streamed_tool_call_reply_is_assembled(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, writer: str
) -> None:
    """A streamed reply with a tool call is stored as the assembled assistant message."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "writer": writer})
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-one", max_retries=0)
    stream = await client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "use the tool for cats"}],
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    )
    args = "".join(
        [
            c.choices[0].delta.tool_calls[0].function.arguments or ""  # type: ignore[union-attr]
            async for c in stream
            if c.choices and c.choices[0].delta.tool_calls
        ]
    )
    await client.close()
    await _until(lambda: len(_sessions(db)) == 1)
    turn = SqliteReader(db).turn(_sessions(db)[0]["id"], 1)
    call = turn["reply"]["tool_calls"][0]
    assert call["function"]["name"] == "lookup"
    assert call["function"]["arguments"] == args and json.loads(args)
    assert turn["usage"]["prompt_tokens"] > 0
    assert turn["streamed"] is True


async def test_workspaces_are_isolated_and_keys_never_stored(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, writer: str
) -> None:
    """Two API keys get two workspaces; neither key appears anywhere in the store file."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "writer": writer})
    for key in ("sk-alice-SECRET-111", "sk-bob-SECRET-222"):
        client = openai.AsyncOpenAI(base_url=proxy.url, api_key=key, max_retries=0)
        msgs = [{"role": "user", "content": "same question"}]
        await client.chat.completions.create(model="gpt-4o", messages=msgs)  # type: ignore[arg-type]
        await client.close()
    await _until(lambda: len(_sessions(db)) == 2)
    workspaces = {s["workspace"] for s in _sessions(db)}
    assert len(workspaces) == 2
    assert len(SqliteReader(db).list_sessions(workspace=sorted(workspaces)[0])) == 1
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("h.db"))
    assert b"SECRET" not in raw


async def test_cli_lists_what_the_proxy_recorded(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    writer: str,
) -> None:
    """`handoff sessions list --json` shows the session the proxy just recorded."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "writer": writer})
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-x", max_retries=0)
    msgs = [{"role": "user", "content": "a very particular zebra"}]
    reply = await client.chat.completions.create(model="gpt-4o", messages=msgs)  # type: ignore[arg-type]
    await client.close()
    await _until(lambda: len(_sessions(db)) == 1)
    assert cli_main(["sessions", "list", "--store", str(db), "--json", "--search", "zebra"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert len(listed) == 1 and listed[0]["models"] == ["gpt-4o"]
    # A short request is settled by the byte bound, uncounted: the upstream's figure shows.
    assert reply.usage is not None
    assert listed[0]["tokens"] == reply.usage.prompt_tokens
    assert cli_main(["sessions", "show", listed[0]["id"], "--store", str(db)]) == 0
    assert f"{reply.usage.prompt_tokens} (upstream)" in capsys.readouterr().out


async def test_broken_store_keeps_serving_and_says_so(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, writer: str
) -> None:
    """A store that cannot write never fails a request; /healthz reports it degraded."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    proxy = await make_proxy(
        fake_upstream.url, store={"path": str(blocker / "h.db"), "writer": writer}
    )
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-x", max_retries=0)
    for _ in range(3):
        msgs = [{"role": "user", "content": "hi"}]
        reply = await client.chat.completions.create(model="gpt-4o", messages=msgs)  # type: ignore[arg-type]
        assert reply.choices[0].message.content
    await client.close()
    async with aiohttp.ClientSession() as s:
        async with s.get(proxy.root + "/healthz") as r:
            health = await r.json()
    assert health["status"] == "degraded"
    assert health["store"]["ok"] is False and health["store"]["last_error"]
    assert health["store"]["writer"].split()[0] == writer
    assert health["store"]["oldest_unwritten_s"] > 0  # the three turns, never written


async def test_required_store_fails_closed_with_503(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, writer: str
) -> None:
    """With store.required, an unwritable store answers 503 rather than serving unrecorded."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    proxy = await make_proxy(
        fake_upstream.url, store={"path": str(blocker / "h.db"), "required": True, "writer": writer}
    )
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as s:
        for _ in range(50):  # the writer notices the failure on its first attempt
            async with s.post(proxy.url + "/chat/completions", json=body) as r:
                if r.status == 503:
                    err = await r.json()
                    break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("store.required never failed closed")
    assert err["error"]["code"] == "store_unavailable"


@pytest.mark.slow
async def test_kill_9_loses_no_completed_turn(
    fake_upstream: FakeUpstream, tmp_path: Path, unused_tcp_port: int
) -> None:
    """The real server in a subprocess, SIGKILLed a second after its last reply, lost nothing."""
    db = tmp_path / "h.db"
    port = unused_tcp_port
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "proxy.cli",
            "serve",
            "--port",
            str(port),
            "--upstream",
            fake_upstream.url,
            "--store",
            str(db),
            "--log-format",
            "json",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "HANDOFF_CONFIG": ""},
    )
    try:
        assert proc.stdout is not None
        line = await asyncio.to_thread(proc.stdout.readline)
        assert b"listening" in line
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        async with aiohttp.ClientSession() as s:
            for _ in range(100):  # wait for the socket
                try:
                    async with s.get(f"http://127.0.0.1:{port}/healthz") as r:
                        if r.status == 200:
                            break
                except aiohttp.ClientConnectionError:
                    await asyncio.sleep(0.05)
            for i in range(40):
                body = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"q{i}"}]}
                async with s.post(url, json=body) as r:
                    assert r.status == 200
                    await r.read()
        await asyncio.sleep(1.0)
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    con.close()
    assert sum(s["turns"] for s in SqliteReader(db).list_sessions(limit=1000)) == 40
