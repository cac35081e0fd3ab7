"""A stream is complete once its final event was relayed, whatever the client does next:
a client that closes right after ``data: [DONE]`` gets no 499, no cancelled record, and
handoff prints no traceback."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import openai
import orjson
import pytest

from proxy.store.read import SqliteReader
from tests.conftest import MakeProxy
from tests.server.request_lines import wait_lines
from tests.server.test_records_retry import sessions, until


async def _close_after_done(url: str, body: dict[str, Any]) -> bytes:
    """POST ``body`` by hand and close the socket the moment ``[DONE]`` arrives."""
    parts = urlsplit(url)
    reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
    data = orjson.dumps(body)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer sk-raw\r\nContent-Length: %d\r\n\r\n" % len(data) + data
    )
    got = b""
    while b"data: [DONE]" not in got:
        chunk = await asyncio.wait_for(reader.read(65536), 5)
        assert chunk, got
        got += chunk
    writer.transport.abort()  # gone at once, as a client that has what it wanted
    return got


async def test_client_closing_after_done_is_complete(
    fake_upstream_factory: Any,
    make_proxy: MakeProxy,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """Ten raw clients that hang up right after [DONE], while the upstream has not yet ended
    its body: each is logged 200 and recorded complete, with no error logged."""
    fake_upstream = await fake_upstream_factory(linger_after_done=0.2)
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db)})
    for i in range(10):
        body = {
            "model": "gpt-4o",
            "stream": True,
            "messages": [{"role": "user", "content": f"raw question {i}"}],
        }
        got = await _close_after_done(proxy.root, body)
        assert b"HTTP/1.1 200" in got
    await until(lambda: sum(s["turns"] for s in sessions(db)) == 10)
    lines, err = await wait_lines(capfd, 10)
    assert [e["status"] for e in lines] == ["200"] * 10
    assert {e["cancelled"] for e in lines} == {"False"}
    assert "Traceback" not in err and "[error" not in err
    reader = SqliteReader(db)
    for s in reader.list_sessions():
        turn = reader.turn(s["id"], 1)
        assert turn["cancelled"] is False
        assert turn["reply"]["content"]


async def test_openai_sdk_stream_is_complete(
    fake_upstream_factory: Any,
    make_proxy: MakeProxy,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The openai SDK reads to [DONE] and closes: the turn is complete, status 200."""
    fake_upstream = await fake_upstream_factory(linger_after_done=0.2)
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db)})
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-sdk", max_retries=0)
    for i in range(3):
        stream = await client.chat.completions.create(
            model="gpt-4o",
            stream=True,
            messages=[{"role": "user", "content": f"sdk question {i}"}],
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text
        await stream.close()
    await until(lambda: sum(s["turns"] for s in sessions(db)) == 3)
    await client.close()
    lines, err = await wait_lines(capfd, 3)
    assert [e["status"] for e in lines] == ["200"] * 3
    assert "Traceback" not in err
    reader = SqliteReader(db)
    assert all(not reader.turn(s["id"], 1)["cancelled"] for s in reader.list_sessions())
