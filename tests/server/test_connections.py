"""Slow and many connections against the real ``handoff serve`` (security probe, issue 27):
a request head or body that arrives too slowly is cut, connections past the cap are
refused at once, the open-file limit is raised at start, and failed accepts are logged
once a minute rather than each time.

Raw sockets, because these attacks happen below HTTP. Every loop is bounded in count and
every wait in time.
"""

from __future__ import annotations

import asyncio
import json
import resource
import time
from pathlib import Path

import aiohttp
import pytest
from structlog.testing import capture_logs

from proxy.config import ServerSettings
from proxy.server.serving import connection_cap
from tests.fake_upstream import FakeUpstream
from tests.server.test_shutdown import BOUND, ServerProc, handoff_serve, read_stream

TIMEOUTS = {"HANDOFF_SERVER__HEADER_TIMEOUT_S": "1", "HANDOFF_SERVER__BODY_TIMEOUT_S": "1"}
SLACK_S = 2.0
"""How much later than its timeout a connection may be cut (the sweep runs every 0.25 s)."""
CHAT = json.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "slowly"}]})


def _head(body: bytes, path: str = "/v1/chat/completions") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()


Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _open(port: int) -> Conn:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)


async def _cut_after(
    port: int, first: bytes, trickle: bytes, within_s: float, conn: Conn | None = None
) -> float:
    """Seconds from sending ``first`` (on ``conn``, else a new connection) until the server
    closes the connection, sending ``trickle`` every 0.2 s meanwhile; fails if it is
    still open after ``within_s``."""
    reader, writer = conn or await _open(port)
    t0 = time.monotonic()
    writer.write(first)
    try:
        async with asyncio.timeout(within_s):
            for _ in range(1000):
                try:
                    if not await asyncio.wait_for(reader.read(4096), 0.2):
                        break  # EOF: closed by the server
                except TimeoutError:
                    writer.write(trickle)
    except ConnectionResetError:
        pass
    finally:
        writer.close()
    return time.monotonic() - t0


async def _answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """Status and body of one response (``Connection: close``: read to EOF)."""
    raw = await asyncio.wait_for(reader.read(), 10)
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def _events(server: ServerProc, name: str) -> list[dict[str, object]]:
    lines = server.stderr.read_text().splitlines()
    events = [json.loads(line) for line in lines if line.startswith("{")]
    return [e for e in events if e.get("event") == name]


async def _healthy(server: ServerProc, within_s: float) -> None:
    """Poll /healthz until it answers 200 (fails after ``within_s``)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as s:
        async with asyncio.timeout(within_s):
            while True:
                try:
                    async with s.get(server.root + "/healthz") as r:
                        if r.status == 200:
                            return
                except (aiohttp.ClientError, TimeoutError):
                    pass
                await asyncio.sleep(0.1)


async def test_slow_request_heads_are_cut(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    """A client that sends its headers a byte at a time, or nothing at all, or trickles the
    next request on a kept-alive connection, is cut once server.header_timeout_s (1 s) has
    passed; other clients are served meanwhile."""
    async with handoff_serve(
        tmp_path, ["--upstream", fake_upstream.url, "--no-store"], TIMEOUTS
    ) as server:
        line = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: "
        trickled = asyncio.create_task(_cut_after(server.port, line, b"x", 1 + SLACK_S))
        silent = asyncio.create_task(_cut_after(server.port, b"", b"", 1 + SLACK_S))
        await _healthy(server, 5)
        reader, writer = await _open(server.port)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")  # kept alive
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert answer.startswith(b"HTTP/1.1 200")
        await asyncio.sleep(0.1)
        kept_alive = await _cut_after(server.port, line, b"x", 1 + SLACK_S, (reader, writer))
        for took in (await trickled, await silent, kept_alive):
            assert 0.9 < took < 1 + SLACK_S, took
    assert _events(server, "slow_client_closed")[0]["timeout"] == "server.header_timeout_s"


async def test_stalled_bodies_are_cut_but_slow_steady_ones_and_long_streams_are_not(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """A body that stops arriving is cut after server.body_timeout_s (1 s) of silence; one
    that arrives slowly but steadily (2.4 s in all) is answered; and a reply streamed for
    longer than either timeout is never cut: only the client's sending is timed."""
    fake_upstream.chunk_delay, fake_upstream.stream_chunks = 0.25, 10  # a ~3 s stream
    body = CHAT.encode()
    async with handoff_serve(
        tmp_path, ["--upstream", fake_upstream.url, "--no-store"], TIMEOUTS
    ) as server:
        stalled = await _cut_after(server.port, _head(body) + body[:10], b"", 1 + SLACK_S)
        assert 0.9 < stalled < 1 + SLACK_S

        reader, writer = await _open(server.port)
        writer.write(_head(body))
        t0 = time.monotonic()
        piece = len(body) // 8 + 1
        for i in range(0, len(body), piece):  # 8 pieces, 0.3 s apart
            await asyncio.sleep(0.3)
            writer.write(body[i : i + piece])
        status, answer = await _answer(reader)
        writer.close()
        assert time.monotonic() - t0 > 2.0
        assert (
            status == 200
            and json.loads(answer)["choices"][0]["message"]["content"] == "Echo: slowly"
        )

        async with aiohttp.ClientSession(timeout=BOUND) as s:
            t0 = time.monotonic()
            data = await read_stream(s, server.url, "a long stream")
        assert time.monotonic() - t0 > 2.0 and data[-1] == "[DONE]"
    assert _events(server, "slow_client_closed")[0]["timeout"] == "server.body_timeout_s"


async def test_connections_past_the_cap_are_refused_at_once(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """With server.max_connections = 20 and 20 idle connections open, more are answered
    503 in OpenAI's shape and closed at once; the cap is logged once; when the 20 close a
    normal client is served again."""
    env = {"HANDOFF_SERVER__MAX_CONNECTIONS": "20", "HANDOFF_SERVER__HEADER_TIMEOUT_S": "60"}
    async with handoff_serve(
        tmp_path, ["--upstream", fake_upstream.url, "--no-store"], env
    ) as server:
        await asyncio.sleep(0.3)  # the start-up health check's connection closes
        held = [await _open(server.port) for _ in range(20)]
        for reader, _ in held:  # each accepted and kept: nothing is written to it
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(reader.read(1), 0.05)
        for _ in range(10):
            reader, writer = await _open(server.port)
            t0 = time.monotonic()
            status, body = await _answer(reader)
            writer.close()
            assert time.monotonic() - t0 < 1.0
            assert status == 503
            error = json.loads(body)["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert error["code"] == "too_many_connections" and "max_connections" in error["message"]
        for _, writer in held:
            writer.close()
        await _healthy(server, 5)
    assert len(_events(server, "connection_cap_reached")) == 1


@pytest.mark.skipif(not hasattr(resource, "prlimit"), reason="needs Linux prlimit")
async def test_soft_open_file_limit_is_raised_to_the_hard_one(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Started with a soft RLIMIT_NOFILE of 256 under a higher hard limit, handoff raises
    its soft limit as far as the hard one allows (at most 65536) and says so."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip("the hard open-file limit leaves nothing to raise")
    want = 65536 if hard == resource.RLIM_INFINITY else min(hard, 65536)

    def low_soft_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    args = ["--upstream", fake_upstream.url, "--no-store"]
    async with handoff_serve(tmp_path, args, preexec_fn=low_soft_limit) as server:
        assert resource.prlimit(server.proc.pid, resource.RLIMIT_NOFILE) == (want, hard)
    [event] = _events(server, "open_file_limit_raised")
    assert (event["before"], event["after"]) == (256, want)


async def test_failed_accepts_are_logged_once_not_each_time(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Out of descriptors (a hard limit of 40, a cap set above it), the accept() calls that
    fail are logged in one line a minute, not a traceback each (stderr stays small); once
    the connections close, clients are served again."""

    def few_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (40, 40))

    env = {"HANDOFF_SERVER__MAX_CONNECTIONS": "500", "HANDOFF_SERVER__HEADER_TIMEOUT_S": "60"}
    args = ["--upstream", fake_upstream.url, "--no-store"]
    async with handoff_serve(tmp_path, args, env, preexec_fn=few_descriptors) as server:
        held = [
            await _open(server.port) for _ in range(60)
        ]  # the kernel queues what is not accepted
        await asyncio.sleep(3.0)  # asyncio retries accept() every second meanwhile
        failed = _events(server, "accept_failed")
        size = server.stderr.stat().st_size
        for _, writer in held:
            writer.close()
        await _healthy(server, 10)
    assert len(failed) == 1 and str(failed[0]["error"]).startswith("EMFILE")
    assert size < 20_000, server.stderr.read_text()[:2000]
    assert "Traceback" not in server.stderr.read_text()


def test_the_default_cap_fits_the_open_file_limit() -> None:
    """Unset, server.max_connections is 1024, or fewer when the open-file limit cannot
    hold two descriptors a connection, with a warning; a value set is kept, with a warning
    when it does not fit."""
    with capture_logs() as logs:
        assert connection_cap(ServerSettings(), 65536) == 1024
        assert connection_cap(ServerSettings(), resource.RLIM_INFINITY) == 1024
        assert logs == []
        assert connection_cap(ServerSettings(), 1024) == (1024 - 64) // 2
        assert connection_cap(ServerSettings(max_connections=5000), 1024) == 5000
    assert [e["event"] for e in logs] == [
        "max_connections_lowered",
        "max_connections_over_open_file_limit",
    ]
