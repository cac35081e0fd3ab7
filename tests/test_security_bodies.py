"""Bodies on their way through: a compressed request is forwarded with headers that
describe what is sent, and a body that does not decompress is a clean 400."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import aiohttp
import pytest

from tests.conftest import MakeProxy, ProxyHandle
from tests.recording_upstream import RecordingUpstream
from tests.test_faults import BOUND

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
