"""Bodies on their way through: a compressed request is forwarded with headers that
describe what is sent, a body that does not decompress is a clean 400, and an answer
over ``server.max_answer_bytes`` is relayed as it arrives and not kept whole."""

from __future__ import annotations

import asyncio
import gzip
import json
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from tests.conftest import MakeProxy, ProxyHandle
from tests.fake_upstream import build_completion
from tests.recording_upstream import RecordingUpstream
from tests.server.test_faults import BOUND, one_turn

CHAT = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "squeeze me"}]}'
EMBED = b'{"model": "text-embedding-3-small", "input": "squeeze me"}'
ROUTES = [("/chat/completions", CHAT), ("/embeddings", EMBED)]


async def _proxy(make_proxy: MakeProxy, rec: RecordingUpstream, **config: Any) -> ProxyHandle:
    config.setdefault("tokens", {"discover": False})
    return await make_proxy(upstreams=[{"name": "rec", "base_url": rec.url}], **config)


def _raw_deflate(data: bytes) -> bytes:
    c = zlib.compressobj(wbits=-15)
    return c.compress(data) + c.flush()


ENCODERS = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,  # RFC 1950 zlib stream, as the RFC means "deflate"
    "deflate-raw": _raw_deflate,  # what many clients send as "deflate"
}


# ---------------------------------------------------------------- finding 7: compressed bodies


@pytest.mark.parametrize("encoder", list(ENCODERS))
@pytest.mark.parametrize(("path", "plain"), ROUTES, ids=["chat", "passthrough"])
async def test_compressed_request_forwarded_with_headers_that_describe_it(
    recording_upstream: RecordingUpstream,
    make_proxy: MakeProxy,
    encoder: str,
    path: str,
    plain: bytes,
) -> None:
    """A gzip or deflate body reaches the upstream decompressed, with no Content-Encoding
    left claiming otherwise and a Content-Length that is its own."""
    rec = recording_upstream
    proxy = await _proxy(make_proxy, rec)
    body = ENCODERS[encoder](plain)
    encoding = encoder.split("-")[0]
    headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        async with s.post(proxy.url + path, data=body, headers=headers) as r:
            assert r.status == 200, await r.text()
    (seen,) = rec.seen
    assert "Content-Encoding" not in seen.headers
    assert seen.body == plain
    assert int(seen.headers["Content-Length"]) == len(plain)


@pytest.mark.parametrize("encoding", ["deflate", "gzip"])
@pytest.mark.parametrize(("path", "plain"), ROUTES, ids=["chat", "passthrough"])
async def test_body_that_does_not_decompress_is_a_clean_400(
    recording_upstream: RecordingUpstream,
    make_proxy: MakeProxy,
    encoding: str,
    path: str,
    plain: bytes,
) -> None:
    """A body that its Content-Encoding cannot decode gets an OpenAI-shaped 400 that says
    so, from handoff; nothing reaches the upstream."""
    rec = recording_upstream
    proxy = await _proxy(make_proxy, rec)
    whole = ENCODERS[encoding](plain)
    bad = [
        plain,
        b"\x1f\x8b\x08\x00" + b"\xff" * 40,
        b"\x78\x9c" + b"\xff" * 40,
        whole[: len(whole) // 2],  # cut off
        whole + b"trailing bytes",
    ]
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        for body in bad:
            headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
            async with s.post(proxy.url + path, data=body, headers=headers) as r:
                status, error = r.status, (await r.json())["error"]
            assert status == 400, (body[:20], error)
            assert set(error) == {"message", "type", "param", "code"}
            assert error["type"] == "invalid_request_error"
            assert f"Content-Encoding: {encoding}" in error["message"]
    assert rec.seen == []


async def test_gzip_members_in_sequence_and_bombs(
    recording_upstream: RecordingUpstream, make_proxy: MakeProxy
) -> None:
    """Several gzip members are one body (RFC 1952); a body that decodes past
    server.max_body_bytes is a 413 however small it is compressed."""
    rec = recording_upstream
    proxy = await _proxy(make_proxy, rec, server={"max_body_bytes": 100_000})
    half = len(CHAT) // 2
    members = gzip.compress(CHAT[:half]) + gzip.compress(CHAT[half:])
    bomb = gzip.compress(b" " * 10_000_000)
    headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        async with s.post(proxy.url + "/chat/completions", data=members, headers=headers) as r:
            assert r.status == 200, await r.text()
        async with s.post(proxy.url + "/chat/completions", data=bomb, headers=headers) as r:
            assert r.status == 413 and len(bomb) < 100_000
            assert "max_body_bytes" in (await r.json())["error"]["message"]
    assert [s.body for s in rec.seen] == [CHAT]


@pytest.mark.parametrize("encoding", ["compress", "gzip, gzip", "x-custom"])
async def test_content_encoding_handoff_cannot_read_is_a_415(
    recording_upstream: RecordingUpstream, make_proxy: MakeProxy, encoding: str
) -> None:
    """A Content-Encoding handoff does not decode is refused with 415, naming it and what
    it accepts, instead of being parsed as JSON or forwarded mislabelled."""
    rec = recording_upstream
    proxy = await _proxy(make_proxy, rec)
    headers = {"Content-Type": "application/json", "Content-Encoding": encoding}
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        for path, plain in ROUTES:
            async with s.post(proxy.url + path, data=gzip.compress(plain), headers=headers) as r:
                status, error = r.status, (await r.json())["error"]
            assert status == 415, error
            assert error["code"] == "unsupported_content_encoding"
            assert encoding in error["message"] and "gzip" in error["message"]
    assert rec.seen == []


# ---------------------------------------------------------------- finding 10b: large answers

LIMIT = 64 * 1024
HEAD = 4 * LIMIT  # the upstream sends this much, then waits for the client to see some


def _big_answer() -> bytes:
    chat = json.loads(CHAT)
    answer = build_completion(chat, 10)
    answer["choices"][0]["message"]["content"] = "x" * (16 * LIMIT)
    return json.dumps(answer).encode()


class _SlowBigUpstream:
    """Answers ``body`` in two parts and, between them, waits (up to 3 s) for the test's
    client to have received part of the first: only a proxy that relays as it reads
    lets that happen."""

    def __init__(self, body: bytes, content_length: bool) -> None:
        self.body = body
        self.content_length = content_length
        self.client_has_head = asyncio.Event()
        self.early: bool | None = None

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        if self.content_length:
            resp.content_length = len(self.body)
        await resp.prepare(request)
        await resp.write(self.body[:HEAD])
        try:
            async with asyncio.timeout(3):
                await self.client_has_head.wait()
            self.early = True
        except TimeoutError:
            self.early = False
        await resp.write(self.body[HEAD:])
        await resp.write_eof()
        return resp


async def _answering(
    make_proxy: MakeProxy,
    rec: RecordingUpstream,
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    db: Path | None = None,
) -> ProxyHandle:
    """The proxy with max_answer_bytes at LIMIT (and a store at ``db``) in front of
    ``rec`` answering with ``handler``."""
    rec.handler = handler
    store = {"path": str(db)} if db is not None else {"enabled": False}
    return await _proxy(make_proxy, rec, server={"max_answer_bytes": LIMIT}, store=store)


async def _read_all(
    s: aiohttp.ClientSession, method: str, url: str, body: bytes, up: _SlowBigUpstream
) -> tuple[int, bytes]:
    async with s.request(method, url, data=body) as r:
        got = bytearray()
        while chunk := await r.content.readany():
            got += chunk
            if len(got) >= HEAD // 2:
                up.client_has_head.set()
        return r.status, bytes(got)


@pytest.mark.parametrize("content_length", [True, False], ids=["length", "chunked"])
async def test_answer_over_limit_is_relayed_as_it_arrives_and_not_kept(
    recording_upstream: RecordingUpstream,
    make_proxy: MakeProxy,
    tmp_path: Path,
    content_length: bool,
) -> None:
    """A non-streamed chat answer over server.max_answer_bytes reaches the client whole
    while the upstream is still sending it, and the store records that it was too large
    to keep, with its size, instead of the body."""
    big = _big_answer()
    up = _SlowBigUpstream(big, content_length)
    db = tmp_path / "h.db"
    proxy = await _answering(make_proxy, recording_upstream, up, db)
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        status, got = await _read_all(s, "POST", proxy.url + "/chat/completions", CHAT, up)
    assert status == 200 and got == big
    assert up.early is True, "the client saw nothing before the upstream had sent it all"
    turn = await one_turn(db)
    assert turn["reply"] is None
    assert turn["error"]["error"]["code"] == "answer_not_kept"
    assert turn["error"]["error"]["answer_bytes"] == len(big)
    assert "server.max_answer_bytes" in turn["error"]["error"]["message"]


async def test_passthrough_answer_over_limit_is_relayed_as_it_arrives(
    recording_upstream: RecordingUpstream, make_proxy: MakeProxy
) -> None:
    """The same bound holds on pass-through routes (a file download, say)."""
    big = _big_answer()
    up = _SlowBigUpstream(big, content_length=False)
    proxy = await _answering(make_proxy, recording_upstream, up)
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        status, got = await _read_all(s, "GET", proxy.url + "/files/file-1/content", b"", up)
    assert status == 200 and got == big
    assert up.early is True


@pytest.mark.parametrize("content_length", [True, False], ids=["length", "chunked"])
async def test_answer_over_limit_cut_off_upstream_is_cut_off_for_the_client(
    recording_upstream: RecordingUpstream,
    make_proxy: MakeProxy,
    tmp_path: Path,
    content_length: bool,
) -> None:
    """An upstream that breaks off a large answer after its headers are relayed: the
    client's connection ends unfinished (an error, never a body that looks whole), and
    the store records the upstream's failure."""
    big = _big_answer()

    async def cut_off(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        if content_length:
            resp.content_length = len(big)
        await resp.prepare(request)
        await resp.write(big[:HEAD])
        assert request.transport is not None
        request.transport.abort()
        return resp

    db = tmp_path / "h.db"
    proxy = await _answering(make_proxy, recording_upstream, cut_off, db)
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        async with s.post(proxy.url + "/chat/completions", data=CHAT) as r:
            assert r.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):
                await r.read()
    turn = await one_turn(db)
    assert turn["reply"] is None
    assert turn["error"]["error"]["type"] == "upstream_error"


async def test_answer_under_limit_is_kept_whole(
    recording_upstream: RecordingUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """Below the bound the answer is read whole: relayed with its Content-Length and
    recorded with its reply."""
    db = tmp_path / "h.db"
    proxy = await _proxy(
        make_proxy, recording_upstream, server={"max_answer_bytes": LIMIT}, store={"path": str(db)}
    )
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        async with s.post(proxy.url + "/chat/completions", data=CHAT) as r:
            assert r.status == 200
            body = await r.read()
            assert int(r.headers["Content-Length"]) == len(body)
    turn = await one_turn(db)
    assert turn["reply"]["content"] == "Echo: squeeze me"
    assert turn["error"] is None
