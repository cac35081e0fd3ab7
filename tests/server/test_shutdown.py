"""The real ``handoff serve`` in a subprocess: SIGTERM drains, ``kill -9`` loses nothing.

The fake upstream runs in the test's own event loop; the proxy is a separate process,
so signals hit exactly what a user would run. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest

from proxy.store.read import SqliteReader
from tests.fake_upstream import FakeUpstream, free_port
from tests.server.test_faults import stored_turns, until

ROOT = Path(__file__).resolve().parents[2]
HANDOFF = Path(sys.executable).with_name("handoff")  # the script pip installed
BOUND = aiohttp.ClientTimeout(total=15)


@dataclass
class ServerProc:
    """A running ``handoff serve``: its process, port and captured stderr file."""

    proc: subprocess.Popen[bytes]
    port: int
    banner: str
    stderr: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def wait(self, timeout: float = 15.0) -> int:
        return await asyncio.wait_for(asyncio.to_thread(self.proc.wait), timeout)


@contextlib.asynccontextmanager
async def handoff_serve(
    tmp_path: Path,
    args: Sequence[str],
    env: dict[str, str] | None = None,
    preexec_fn: Callable[[], None] | None = None,
    cwd: Path | None = None,
) -> AsyncIterator[ServerProc]:
    """Start ``handoff serve ARGS --port P --log-format json`` and wait until it answers;
    killed at exit if still running. Logs (stderr) go to a file under ``tmp_path``;
    ``preexec_fn`` runs in the child before it starts (to set its resource limits). With
    ``cwd`` it runs there as a user runs it (the installed ``handoff`` script), else as
    ``python -m proxy.cli`` from the repository."""
    port = free_port()
    stderr = tmp_path / f"serve-{port}.log"
    with stderr.open("wb") as err:
        launcher = [sys.executable, "-m", "proxy.cli"] if cwd is None else [str(HANDOFF)]
        cmd = [*launcher, "serve", "--port", str(port)]
        proc = subprocess.Popen(
            [*cmd, "--log-format", "json", *args],
            cwd=ROOT if cwd is None else cwd,
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, "HANDOFF_CONFIG": "", **(env or {})},
            preexec_fn=preexec_fn,
        )
    try:
        assert proc.stdout is not None
        banner = (await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 20)).decode()
        assert "listening" in banner, stderr.read_text()
        server = ServerProc(proc, port, banner, stderr)
        async with aiohttp.ClientSession(timeout=BOUND) as s:
            async with asyncio.timeout(15):
                while True:
                    with contextlib.suppress(aiohttp.ClientConnectionError):
                        async with s.get(server.root + "/healthz") as r:
                            if r.status == 200:
                                break
                    await asyncio.sleep(0.05)
        yield server
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


async def read_stream(s: aiohttp.ClientSession, url: str, content: str) -> list[str]:
    """One streamed chat request; returns the SSE data payloads once the stream ends."""
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": content}], "stream": True}
    async with s.post(url + "/chat/completions", json=body) as r:
        assert r.status == 200
        return [line[5:].strip().decode() async for line in r.content if line.startswith(b"data:")]


@pytest.mark.slow
async def test_sigterm_finishes_streams_and_drains_store(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """SIGTERM mid-stream: in-flight streams finish, every turn is stored, exit status 0."""
    fake_upstream.chunk_delay, fake_upstream.stream_chunks = 0.1, 10
    db = tmp_path / "h.db"
    args = ["--upstream", fake_upstream.url, "--store", str(db)]
    env = {"HANDOFF_SERVER__SHUTDOWN_GRACE_S": "10"}
    async with handoff_serve(tmp_path, args, env) as server:
        async with aiohttp.ClientSession(timeout=BOUND) as s:
            streams = [
                asyncio.create_task(read_stream(s, server.url, f"stream {i}")) for i in range(3)
            ]
            before = fake_upstream.frames_sent
            await until(lambda: fake_upstream.frames_sent >= before + 6)  # all three are going
            server.proc.send_signal(signal.SIGTERM)
            results = await asyncio.gather(*streams)
        assert await server.wait() == 0
    assert fake_upstream.cancelled == []
    for i, data in enumerate(results):
        assert data[-1] == "[DONE]"
        text = "".join(json.loads(d)["choices"][0]["delta"].get("content") or "" for d in data[:-1])
        assert text == f"Echo: stream {i}"
    turns = stored_turns(db)
    assert sorted(t["reply"]["content"] for t in turns) == [f"Echo: stream {i}" for i in range(3)]
    assert not any(t["cancelled"] for t in turns)


async def test_sigterm_when_idle_exits_zero(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    """An idle server stops at once on SIGTERM, with status 0."""
    args = ["--upstream", fake_upstream.url, "--store", str(tmp_path / "h.db")]
    async with handoff_serve(tmp_path, args) as server:
        server.proc.send_signal(signal.SIGTERM)
        assert await server.wait() == 0


async def _client(
    s: aiohttp.ClientSession, url: str, k: int, stop: asyncio.Event, done: dict[str, float]
) -> None:
    """Send distinct conversations until ``stop`` (500 at most); note when each reply was
    fully read."""
    for i in range(500):
        if stop.is_set():
            return
        content = f"load c{k} n{i}"
        if k % 2:
            data = await read_stream(s, url, content)
            assert data[-1] == "[DONE]"
        else:
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": content}]}
            async with s.post(url + "/chat/completions", json=body) as r:
                assert r.status == 200
                await r.read()
        done[content] = time.monotonic()


@pytest.mark.slow
async def test_kill_9_under_load_keeps_store_whole(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """kill -9 under concurrent load: integrity_check is ok and every reply completed more
    than a second before the kill is stored; a restarted server serves from the same store."""
    db = tmp_path / "h.db"
    args = ["--upstream", fake_upstream.url, "--store", str(db)]
    done: dict[str, float] = {}
    async with handoff_serve(tmp_path, args) as server:
        async with aiohttp.ClientSession(timeout=BOUND) as s:
            await read_stream(s, server.url, "warm-up")  # the first request loads a tokenizer
            stop = asyncio.Event()
            clients = [_client(s, server.url, k, stop, done) for k in range(4)]
            load = asyncio.gather(*clients)
            # killed while the clients still send, once enough has been done a second ago:
            await until(lambda: sum(t < time.monotonic() - 1.0 for t in done.values()) >= 8, 30)
            server.proc.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            stop.set()
            with contextlib.suppress(aiohttp.ClientError, AssertionError):
                await load
        assert await server.wait() == -signal.SIGKILL
    must_have = {c for c, t in done.items() if t < killed_at - 1.0}
    assert len(must_have) >= 8, "the load was too light to mean anything"
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    con.close()
    titles = {s["title"] for s in SqliteReader(db).list_sessions(limit=100_000)}
    assert must_have <= titles, sorted(must_have - titles)[:5]
    async with handoff_serve(tmp_path, args) as again:
        async with aiohttp.ClientSession(timeout=BOUND) as s:
            await read_stream(s, again.url, "after restart")
            async with s.get(again.root + "/healthz") as r:
                assert (await r.json())["store"]["ok"] is True
        again.proc.send_signal(signal.SIGTERM)
        assert await again.wait() == 0
    assert "after restart" in {s["title"] for s in SqliteReader(db).list_sessions(limit=100_000)}
