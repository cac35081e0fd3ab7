"""Requests wait while the store's writer is behind, so completed turns reach the disk in time.

The writer process is stopped with SIGSTOP, a real stand-in for a writer outpaced by
its clients: its turns stay unwritten and their age grows.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from proxy.server.services import SERVICES
from proxy.store.process import ProcessStore
from proxy.store.read import SqliteReader
from proxy.store.sqlite import SqliteStore
from tests.conftest import MakeProxy, ProxyHandle
from tests.fake_upstream import FakeUpstream

MESSAGES: Any = [{"role": "user", "content": "hi"}]


async def _until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


async def _health(proxy: ProxyHandle) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(proxy.root + "/healthz") as r:
        store: dict[str, Any] = (await r.json())["store"]
        return store


def _turns(db: Path) -> int:
    try:
        return sum(s["turns"] for s in SqliteReader(db).list_sessions())
    except Exception:
        return 0


@contextlib.asynccontextmanager
async def _stopped_writer(proxy: ProxyHandle, max_lag_s: float) -> AsyncIterator[None]:
    """The writer process stopped, one turn served since, and that turn older than
    ``max_lag_s``: the next request finds the writer behind."""
    store = proxy.server.app[SERVICES].store
    assert isinstance(store, ProcessStore) and store.writer_pid is not None
    pid = store.writer_pid
    os.kill(pid, signal.SIGSTOP)
    try:
        async with openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-x", max_retries=0) as c:
            await c.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        await _until(lambda: store.lag_s() > max_lag_s)  # (it only grows: the writer is stopped)
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


async def _gated_proxy(
    make_proxy: MakeProxy, upstream: FakeUpstream, db: Path, **store: Any
) -> ProxyHandle:
    proxy = await make_proxy(upstream.url, store={"path": str(db), "writer": "process", **store})
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-x", max_retries=0) as c:
        await c.chat.completions.create(model="gpt-4o", messages=MESSAGES)  # the writer runs
    await _until(lambda: _turns(db) == 1)
    return proxy


async def test_request_waits_until_the_writer_catches_up(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """While the oldest unwritten turn is older than max_lag_s, a new request does not go
    upstream; once the writer has written it, the request goes, and is counted as held."""
    db = tmp_path / "h.db"
    proxy = await _gated_proxy(make_proxy, fake_upstream, db, max_lag_s=0.2, max_hold_s=30)
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-x", max_retries=0)
    async with _stopped_writer(proxy, 0.2):
        sent = len(fake_upstream.chat_requests)
        held = asyncio.ensure_future(
            client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        )
        await asyncio.sleep(0.5)
        assert len(fake_upstream.chat_requests) == sent and not held.done()
        assert (await _health(proxy))["held_requests"] == 0  # (counted once it goes)
    reply = await asyncio.wait_for(held, 10)  # the writer goes on: so does the request
    assert reply.choices[0].message.content
    await client.close()
    health = await _health(proxy)
    assert health["held_requests"] == 1 and health["held_s"] >= 0.3
    err = capsys.readouterr().err
    assert "store_writer_behind" in err and "held_s=" in err  # (the request's own log event)
    assert health["writer_stalls"] == 0
    async with aiohttp.ClientSession() as s, s.get(proxy.root + "/metrics") as r:
        assert "handoff_store_held_requests 1.0" in await r.text()
    await _until(lambda: _turns(db) == 3)
    async with asyncio.timeout(5):  # (the writer reports what it wrote every 50 ms)
        while (await _health(proxy))["slowest_write_s"] < 0.4:  # turn 2 waited out the stop
            await asyncio.sleep(0.02)


async def test_a_stalled_writer_holds_requests_once_then_lets_them_go(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A writer that does not catch up within max_hold_s is taken for stalled: the waiting
    request goes on, later ones do not wait, and every turn is still written once it runs."""
    db = tmp_path / "h.db"
    proxy = await _gated_proxy(make_proxy, fake_upstream, db, max_lag_s=0.2, max_hold_s=0.3)
    async with (
        openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-x", max_retries=0) as client,
        _stopped_writer(proxy, 0.2),
    ):
        for _ in range(3):
            await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
        health = await _health(proxy)
        assert health["held_requests"] == 1 and health["writer_stalls"] == 1
        assert health["oldest_unwritten_s"] > 0.5  # still behind: said, not hidden
    assert "store_writer_stalled" in capsys.readouterr().err
    await _until(lambda: _turns(db) == 5)


async def test_a_failing_store_is_not_waited_for(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """Turns a broken store cannot write grow old, but requests never wait for it."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    store = {"path": str(blocker / "h.db"), "writer": "process", "max_lag_s": 0.01}
    proxy = await make_proxy(fake_upstream.url, store=store)
    async with openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-x", max_retries=0) as client:
        for _ in range(3):
            await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
            await asyncio.sleep(0.05)
    health = await _health(proxy)
    assert health["ok"] is False and health["oldest_unwritten_s"] > 0.01
    assert health["held_requests"] == 0


async def test_a_locked_database_holds_requests_only_until_the_store_says_so(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """While SQLite waits out another connection's lock (busy_timeout) the store looks
    healthy and falls behind, so requests wait; once it reports the failure they go on
    (not at max_hold_s), and none waits while it stays failed. After the lock, all is
    written."""
    db = tmp_path / "h.db"
    store = SqliteStore(db, flush_interval_s=0.05, busy_timeout_ms=1500)
    settings = {"max_lag_s": 0.2, "max_hold_s": 60}
    proxy = await make_proxy(fake_upstream.url, store_obj=store, store=settings)
    locker = sqlite3.connect(db, isolation_level=None, timeout=5)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        async with openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-x", max_retries=0) as c:
            for _ in range(4):
                await asyncio.wait_for(
                    c.chat.completions.create(model="gpt-4o", messages=MESSAGES), 10
                )
                await asyncio.sleep(0.3)
        health = await _health(proxy)
        assert health["ok"] is False and "locked" in health["last_error"]
        assert 1 <= health["held_requests"] < 4 and health["writer_stalls"] == 0
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    await _until(lambda: _turns(db) == 4)


async def test_max_lag_zero_never_holds(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """store.max_lag_s = 0 turns the gate off: a stopped writer holds nothing up."""
    db = tmp_path / "h.db"
    proxy = await _gated_proxy(make_proxy, fake_upstream, db, max_lag_s=0)
    async with (
        openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-x", max_retries=0) as client,
        _stopped_writer(proxy, 0.2),
    ):
        sent = len(fake_upstream.chat_requests)
        await asyncio.wait_for(client.chat.completions.create(model="gpt-4o", messages=MESSAGES), 5)
        assert len(fake_upstream.chat_requests) == sent + 1
    assert "held_requests" not in await _health(proxy)
