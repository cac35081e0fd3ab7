"""Faults, each against the real proxy on loopback: the client gets a clear answer, the
turn is recorded, and no connection hangs (every wait here is bounded).

Upstream faults come from the fake upstream's Fault API. Store faults use a tiny
tmpfs when this machine can mount one (a real ``ENOSPC`` and a real read-only
filesystem, which stops root too); elsewhere they fall back to injected failures,
named as such in each test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from multidict import CIMultiDictProxy

import proxy.store.sqlite as store_sqlite
from proxy.store.db import connect
from proxy.store.errors import StoreMissingError
from proxy.store.read import SqliteReader
from proxy.store.sqlite import SqliteStore
from tests.conftest import MakeProxy, ProxyHandle
from tests.fake_upstream import NOT_JSON_BODY, FakeUpstream, Fault, FaultKind, free_port

BOUND = aiohttp.ClientTimeout(total=10)
MESSAGES = [{"role": "user", "content": "hello fault"}]


# ---------------------------------------------------------------- helpers


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll ``check`` until true; fail the test (TimeoutError) after ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


def stored_turns(db: Path) -> list[dict[str, Any]]:
    """Every turn in the store, in full (empty while the store does not exist yet)."""
    try:
        reader = SqliteReader(db)
        out: list[dict[str, Any]] = []
        for s in reader.list_sessions(limit=10_000):
            out.extend(reader.turns(s["id"])[1])
        return out
    except (StoreMissingError, sqlite3.Error):  # not created yet, or mid-migration
        return []


async def one_turn(db: Path) -> dict[str, Any]:
    """The single turn the store will hold once the writer has flushed."""
    await until(lambda: len(stored_turns(db)) == 1)
    (turn,) = stored_turns(db)
    return turn


def sse_data(raw: bytes) -> list[str]:
    """The ``data:`` payloads of an SSE body, in order."""
    return [line[5:].strip().decode() for line in raw.split(b"\n") if line.startswith(b"data:")]


async def post_chat(
    proxy: ProxyHandle, body: dict[str, Any]
) -> tuple[int, CIMultiDictProxy[str], bytes]:
    """POST a chat request; (status, headers, whole body), bounded by ``BOUND``."""
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        async with s.post(proxy.url + "/chat/completions", json=body) as r:
            return r.status, r.headers, await r.read()


def chat(stream: bool = False) -> dict[str, Any]:
    return {"model": "gpt-4o", "messages": MESSAGES, "stream": stream}


async def store_proxy(
    make_proxy: MakeProxy, fake: FakeUpstream, db: Path, **config: Any
) -> ProxyHandle:
    # The writer thread, in this process: the faults are injected into its connection.
    return await make_proxy(fake.url, store={"path": str(db), "writer": "thread"}, **config)


# ---------------------------------------------------------------- upstream faults


async def test_refused_connection_is_502_and_recorded(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """An upstream that refuses connections gives an OpenAI-shaped 502, recorded as such."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(
        f"http://127.0.0.1:{free_port()}/v1", store={"path": str(db)}, tokens={"discover": False}
    )
    status, _, body = await post_chat(proxy, chat())
    assert status == 502
    err = json.loads(body)["error"]
    assert err["code"] == "upstream_unreachable" and err["type"] == "upstream_error"
    assert "Cannot connect" in err["message"]
    turn = await one_turn(db)
    assert turn["status"] == 502 and turn["error"]["error"]["code"] == "upstream_unreachable"


async def test_stopped_upstream_is_502(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """After the upstream stops listening, requests get 502 instead of hanging."""
    db = tmp_path / "h.db"
    proxy = await store_proxy(make_proxy, fake_upstream, db)
    assert (await post_chat(proxy, chat()))[0] == 200
    await fake_upstream.stop()
    status, _, body = await post_chat(proxy, chat(stream=True))
    assert status == 502, body
    assert json.loads(body)["error"]["code"] == "upstream_unreachable"


async def test_reset_before_headers_is_502_and_recorded(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A connection reset before any header gives 502 upstream_unreachable, recorded.
    (On a fresh connection: no models listing went first on one to reuse, and only a
    reused connection is tried again.)"""
    db = tmp_path / "h.db"
    proxy = await store_proxy(make_proxy, fake_upstream, db, tokens={"discover": False})
    fake_upstream.inject(Fault(FaultKind.RESET_BEFORE_HEADERS))
    status, _, body = await post_chat(proxy, chat(stream=True))
    assert status == 502
    assert json.loads(body)["error"]["code"] == "upstream_unreachable"
    turn = await one_turn(db)
    assert turn["status"] == 502 and turn["error"] is not None


async def test_reset_mid_stream_ends_with_in_band_error(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A reset mid-stream: the events so far, then one in-band error event, then the end."""
    db = tmp_path / "h.db"
    proxy = await store_proxy(make_proxy, fake_upstream, db)
    fake_upstream.inject(Fault(FaultKind.RESET_MID_STREAM, after_events=2))
    status, _, raw = await post_chat(proxy, chat(stream=True))
    assert status == 200
    data = sse_data(raw)
    assert len(data) == 3 and "[DONE]" not in data
    assert [json.loads(d)["object"] for d in data[:2]] == ["chat.completion.chunk"] * 2
    err = json.loads(data[2])["error"]
    assert err["code"] == "upstream_unreachable" and err["message"]
    turn = await one_turn(db)
    assert turn["streamed"] is True and turn["status"] == 200
    assert turn["error"] is not None and turn["cancelled"] is False


async def test_reset_mid_json_body_is_502(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A non-streamed answer cut off halfway is a 502, never half a JSON body."""
    db = tmp_path / "h.db"
    proxy = await store_proxy(make_proxy, fake_upstream, db)
    fake_upstream.inject(Fault(FaultKind.RESET_MID_STREAM))
    status, _, body = await post_chat(proxy, chat())
    assert status == 502
    assert json.loads(body)["error"]["code"] == "upstream_unreachable"
    assert (await one_turn(db))["status"] == 502


async def test_hang_before_headers_is_504_and_recorded(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """An upstream silent before headers gives 504 after read_s and is let go upstream."""
    db = tmp_path / "h.db"
    proxy = await store_proxy(make_proxy, fake_upstream, db, timeouts={"read_s": 0.3})
    fake_upstream.inject(Fault(FaultKind.HANG_BEFORE_HEADERS))
    status, _, body = await post_chat(proxy, chat(stream=True))
    assert status == 504
    assert json.loads(body)["error"]["code"] == "upstream_timeout"
    await fake_upstream.wait_for_cancelled(1)
    turn = await one_turn(db)
    assert turn["status"] == 504 and turn["error"]["error"]["code"] == "upstream_timeout"


async def test_hang_mid_stream_ends_with_in_band_timeout(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A stream that goes silent ends after read_s with an in-band upstream_timeout event."""
    db = tmp_path / "h.db"
    proxy = await store_proxy(make_proxy, fake_upstream, db, timeouts={"read_s": 0.3})
    fake_upstream.inject(Fault(FaultKind.HANG_MID_STREAM, after_events=3))
    status, _, raw = await post_chat(proxy, chat(stream=True))
    assert status == 200
    data = sse_data(raw)
    assert len(data) == 4
    assert json.loads(data[-1])["error"]["code"] == "upstream_timeout"
    await fake_upstream.wait_for_cancelled(1)
    turn = await one_turn(db)
    assert turn["streamed"] is True and turn["error"] is not None


async def test_hang_mid_json_body_is_504(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A non-streamed answer that stalls halfway is a 504 after read_s."""
    db = tmp_path / "h.db"
    proxy = await store_proxy(make_proxy, fake_upstream, db, timeouts={"read_s": 0.3})
    fake_upstream.inject(Fault(FaultKind.HANG_MID_STREAM))
    status, _, body = await post_chat(proxy, chat())
    assert status == 504
    assert json.loads(body)["error"]["code"] == "upstream_timeout"
    assert (await one_turn(db))["status"] == 504


@pytest.mark.parametrize("stream", [False, True])
async def test_non_json_200_is_relayed_as_is(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, stream: bool
) -> None:
    """A 200 whose body is not JSON reaches the client byte for byte and is still recorded."""
    db = tmp_path / "h.db"
    proxy = await store_proxy(make_proxy, fake_upstream, db)
    fake_upstream.inject(Fault(FaultKind.NOT_JSON))
    status, _, body = await post_chat(proxy, chat(stream=stream))
    assert (status, body) == (200, NOT_JSON_BODY)
    turn = await one_turn(db)
    assert turn["status"] == 200 and turn["reply"] is None
    assert (await post_chat(proxy, chat()))[0] == 200  # and the proxy is fine afterwards


async def test_upstream_500_is_relayed_with_its_body(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """The upstream's own 500 comes back unchanged and is recorded with its error."""
    db = tmp_path / "h.db"
    proxy = await store_proxy(make_proxy, fake_upstream, db)
    fake_upstream.inject(Fault(FaultKind.SERVER_ERROR))
    status, headers, body = await post_chat(proxy, chat(stream=True))
    assert status == 500
    err = json.loads(body)["error"]
    assert err["type"] == "server_error" and "Sorry about that" in err["message"]
    assert headers["x-request-id"].startswith("req_fake")
    turn = await one_turn(db)
    assert turn["status"] == 500 and turn["error"]["error"]["type"] == "server_error"


async def test_upstream_429_keeps_retry_after(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A 429 comes back with its body and its retry-after header."""
    db = tmp_path / "h.db"
    proxy = await store_proxy(make_proxy, fake_upstream, db)
    fake_upstream.inject(Fault(FaultKind.RATE_LIMIT, retry_after=7))
    status, headers, body = await post_chat(proxy, chat())
    assert status == 429
    assert headers["retry-after"] == "7"
    assert json.loads(body)["error"]["code"] == "rate_limit_exceeded"
    assert (await one_turn(db))["status"] == 429


# ---------------------------------------------------------------- client faults


async def test_client_gone_before_headers_cancels_and_records(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A client that hangs up while the upstream thinks cancels it; the turn says cancelled."""
    db = tmp_path / "h.db"
    proxy = await store_proxy(make_proxy, fake_upstream, db)
    fake_upstream.inject(Fault(FaultKind.HANG_BEFORE_HEADERS))
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        task = asyncio.create_task(s.post(proxy.url + "/chat/completions", json=chat(True)))
        await until(lambda: bool(fake_upstream.chat_requests))
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await fake_upstream.wait_for_cancelled(1)
    turn = await one_turn(db)
    assert turn["cancelled"] is True


async def test_client_gone_mid_stream_cancels_and_records(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A client that hangs up mid-stream cancels the upstream; the turn says cancelled."""
    db = tmp_path / "h.db"
    fake_upstream.chunk_delay, fake_upstream.stream_chunks = 0.2, 20
    proxy = await store_proxy(make_proxy, fake_upstream, db)
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        async with s.post(proxy.url + "/chat/completions", json=chat(True)) as r:
            assert r.status == 200
            await r.content.readuntil(b"\n\n")
    await fake_upstream.wait_for_cancelled(1)
    turn = await one_turn(db)
    assert turn["cancelled"] is True and turn["streamed"] is True


# ---------------------------------------------------------------- store faults


@contextlib.contextmanager
def tmpfs(where: Path, size: str = "512k") -> Iterator[Path | None]:
    """A tiny tmpfs at ``where``, or None when this machine cannot mount one."""
    where.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
            capture_output=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        mounted = None
    if mounted is None or mounted.returncode != 0:
        yield None
        return
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=10)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path | None]:
    """A 512 KiB tmpfs, room for a fresh store and its WAL (unmounted after the proxy has
    closed), or None if not mountable."""
    with tmpfs(tmp_path / "fs") as fs:
        yield fs


def _create_store(db: Path) -> None:
    connect(db).close()


def _wal_free(db: Path) -> None:
    """Checkpoint and leave no -wal/-shm, so a later read-only open has nothing to write."""
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode = DELETE")
    con.close()


async def health(proxy: ProxyHandle) -> dict[str, Any]:
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        async with s.get(proxy.root + "/healthz") as r:
            assert r.status == 200
            result: dict[str, Any] = await r.json()
            return result


async def serve_three(proxy: ProxyHandle) -> None:
    for i in range(3):
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"q{i}"}]}
        status, _, reply = await post_chat(proxy, body)
        assert status == 200 and json.loads(reply)["choices"]


async def assert_degraded(proxy: ProxyHandle, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """Wait for /healthz to say degraded, and check the log said why."""
    state: dict[str, Any] = {}

    async def degraded() -> bool:
        state.update(await health(proxy))
        return bool(state["status"] == "degraded")

    async with asyncio.timeout(5):
        while not await degraded():
            await asyncio.sleep(0.05)
    assert state["store"]["ok"] is False and state["store"]["write_failures"] >= 1
    assert "store_write_failed" in capsys.readouterr().err
    store: dict[str, Any] = state["store"]
    return store


async def test_read_only_store_keeps_serving(
    monkeypatch: pytest.MonkeyPatch,
    small_fs: Path | None,
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A read-only store: requests are served, /healthz is degraded, the log says so."""
    if small_fs is not None:  # a real read-only filesystem: even root cannot write
        db = small_fs / "h.db"
        _create_store(db)
        _wal_free(db)
        remount = ["mount", "-o", "remount,ro", str(small_fs)]
        subprocess.run(remount, check=True, timeout=10)
    else:  # injected failure: the writer's connection is opened read-only by SQLite
        db = tmp_path / "h.db"
        _create_store(db)
        monkeypatch.setattr(
            store_sqlite,
            "connect",
            lambda path, **_: sqlite3.connect(
                f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
            ),
        )
    proxy = await store_proxy(make_proxy, fake_upstream, db)
    await serve_three(proxy)
    store = await assert_degraded(proxy, capsys)
    assert "readonly" in store["last_error"] or "read-only" in store["last_error"]


async def test_full_disk_keeps_serving(
    monkeypatch: pytest.MonkeyPatch,
    small_fs: Path | None,
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A full disk: requests are served, /healthz is degraded with the error, the log says so."""
    if small_fs is not None:  # a real ENOSPC: the tmpfs is filled to the last byte
        db = small_fs / "h.db"
        _create_store(db)
        with contextlib.suppress(OSError), (small_fs / "filler").open("wb") as f:
            while True:
                f.write(b"\0" * 4096)
                f.flush()
    else:  # injected failure: SQLite's own SQLITE_FULL, by capping the file at its size
        db = tmp_path / "h.db"
        _create_store(db)

        def capped(path: Path, **kw: Any) -> sqlite3.Connection:
            con = connect(path, **kw)
            pages = con.execute("PRAGMA page_count").fetchone()[0]
            con.execute(f"PRAGMA max_page_count = {pages}")
            return con

        monkeypatch.setattr(store_sqlite, "connect", capped)
    proxy = await store_proxy(make_proxy, fake_upstream, db)
    await serve_three(proxy)
    for i in range(20):  # big enough that no WAL page slack can absorb them
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"{i}" * 20_000}]}
        assert (await post_chat(proxy, body))[0] == 200
    store = await assert_degraded(proxy, capsys)
    assert "disk" in store["last_error"].lower()  # "disk is full", or "disk I/O error" in WAL


async def test_locked_store_degrades_then_recovers(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Another connection holding BEGIN EXCLUSIVE: requests are served, /healthz degrades,
    and once the lock goes every queued turn is written and health recovers."""
    db = tmp_path / "h.db"
    _create_store(db)
    store = SqliteStore(db, flush_interval_s=0.05, busy_timeout_ms=50)
    proxy = await make_proxy(fake_upstream.url, store_obj=store)
    locker = sqlite3.connect(db, isolation_level=None, timeout=5)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        await serve_three(proxy)
        state = await assert_degraded(proxy, capsys)
        assert "locked" in state["last_error"]
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    await until(lambda: len(stored_turns(db)) == 3)
    await until(lambda: store.health().ok)
    assert (await health(proxy))["status"] == "ok"
