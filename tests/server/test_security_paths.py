"""Where a request's path and query take it: never outside the upstream's ``base_url``
path, whatever the encoding; every spelling of the chat endpoint through chat handling;
the query string forwarded byte for byte.

Requests go out through aiohttp with ``URL(..., encoded=True)``, so the proxy gets the
exact bytes of each spelling; the upstream is a catch-all recorder under ``/tenant-a/v1``
that shows where each request landed and with which key.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from yarl import URL

from proxy.config import ConfigError
from proxy.errors import InvalidRequest
from proxy.upstream.routing import Upstream
from tests.conftest import MakeProxy, ProxyHandle
from tests.recording_upstream import RecordingUpstream
from tests.server.test_faults import BOUND, stored_turns, until

SERVER_KEY = "sk-server-canary-41c9"
CHAT = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}'
JSON = {"Content-Type": "application/json", "Authorization": "Bearer sk-client"}


async def _proxy(
    make_proxy: MakeProxy, rec: RecordingUpstream, monkeypatch: pytest.MonkeyPatch, **config: Any
) -> ProxyHandle:
    """The proxy in front of ``rec`` with the server's own key (api_key_env)."""
    monkeypatch.setenv("TENANT_A_KEY", SERVER_KEY)
    upstream = {"name": "tenant-a", "base_url": rec.url, "api_key_env": "TENANT_A_KEY"}
    return await make_proxy(upstreams=[upstream], tokens={"discover": False}, **config)


async def _send(
    proxy: ProxyHandle, method: str, target: str, body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """``target`` (after host:port) sent as written: no client normalises it."""
    url = URL(proxy.root + target, encoded=True)
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        async with s.request(method, url, data=body, headers=JSON) as r:
            return r.status, dict(r.headers), await r.read()


def _is_openai_400(status: int, body: bytes) -> bool:
    """handoff's own refusal of a path, in OpenAI's error shape."""
    if status != 400:
        return False
    error = json.loads(body)["error"]
    return set(error) == {"message", "type", "param", "code"} and "base URL" in error["message"]


# ---------------------------------------------------------------- finding 1: path escapes

ESCAPES = [
    "/v1/%252e%252e/%252e%252e/admin/keys",  # double-encoded dots: the probe's finding
    "/v1/%2e%2e/%2e%2e/admin/keys",  # single-encoded
    "/v1/%2E%2E/%2E%2E/admin/keys",
    "/v1/.%2e/.%2e/admin/keys",  # mixed
    "/v1/%2e%252e/%252e./admin/keys",  # mixed depths
    "/v1/%25%32%65%25%32%65/admin/keys",  # the '%', '2', 'e' encoded one by one
    "/v1/%%32%65%%32%65/admin/keys",  # decodes to %2e%2e
    "/v1/%25252e%25252e/admin/keys",  # triple
    "/v1/..%2F..%2Fadmin/keys",  # encoded slashes
    "/v1/..%2f..%2fadmin/keys",
    "/v1/%2e%2e%252f%2e%2e%252fadmin/keys",  # double-encoded slashes
    "/v1/models/..%252f..%252f..%252fadmin/keys",
    "/v1/..\\..\\admin/keys",  # backslashes
    "/v1/..%5c..%5cadmin/keys",
    "/v1/..%255c..%255cadmin/keys",
    "/v1/..;/..;/admin/keys",  # path parameters hiding a dot segment
    "/v1/%2e%2e;x=1/%2e%2e;x=1/admin/keys",
    "/v1/models/.;/admin",
    "/v1/./models",
    "/v1/models/.",
    "/v1/models/..",
    "/v1/%c0%ae%c0%ae/admin/keys",  # overlong UTF-8 dots
    "/v1/%ef%bc%8e%ef%bc%8e/admin/keys",  # fullwidth dots
    "/v1/models%00/x",  # control characters
]


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_no_encoding_of_dots_or_slashes_leaves_base_path(
    recording_upstream: RecordingUpstream,
    make_proxy: MakeProxy,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
) -> None:
    """Every escape spelling is refused with an OpenAI-shaped 400 before anything is sent:
    the upstream sees no request at all, let alone one outside /tenant-a/v1 with the
    server's key. A plain path still reaches it, below the base, with that key."""
    rec = recording_upstream
    proxy = await _proxy(make_proxy, rec, monkeypatch)
    for target in ESCAPES:
        status, _, body = await _send(proxy, method, target, CHAT if method == "POST" else b"")
        assert _is_openai_400(status, body), (target, status, body[:200])
    assert rec.outside() == []
    assert rec.seen == []
    status, _, _ = await _send(proxy, "GET", "/v1/models/llama3.1:8b")
    assert status == 200
    (seen,) = rec.seen
    assert seen.raw_path == "/tenant-a/v1/models/llama3.1:8b"
    assert seen.headers["Authorization"] == f"Bearer {SERVER_KEY}"


async def test_percent_escapes_that_hide_nothing_pass_as_sent(
    recording_upstream: RecordingUpstream, make_proxy: MakeProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A path whose escapes decode to plain characters (no dot segment, slash or second
    escape) reaches the upstream byte for byte, below the base path."""
    rec = recording_upstream
    proxy = await _proxy(make_proxy, rec, monkeypatch)
    targets = ["/v1/files/file-%41bc/content", "/v1/models/ft%3Agpt-4o%3Aorg", "/v1//models"]
    for target in targets:
        status, _, _ = await _send(proxy, "GET", target)
        assert status == 200, target
    assert [s.raw_path for s in rec.seen] == ["/tenant-a" + t for t in targets]
    assert rec.outside() == []


@pytest.mark.parametrize(
    "base", ["http://h:1/tenant-a/v1", "http://h:1/tenant-a/v1/", "http://u:p@h:1/tenant-a/v1"]
)
def test_upstream_url_keeps_path_and_query_as_given(base: str) -> None:
    """Upstream.url puts the raw path below base_url's path and the raw query after it,
    neither decoded nor normalised, the chat URL included (built once)."""
    up = Upstream(name="t", base_url=base, patterns=("*",))
    for path, query in [("/chat/completions", ""), ("/chat/completions", "a=%23b&c=%26d"),
                        ("/files/f-%41/content", "x=%2F..%2F"), ("//models", "")]:  # fmt: skip
        url = up.url(path, query)
        assert url.raw_path_qs == "/tenant-a/v1" + path + (f"?{query}" if query else "")
        assert (url.host, url.port) == ("h", 1)
    assert up.url("/chat/completions") is up.url("/chat/completions")
    for bad in ("/x/../../admin", "-admin"):  # a dot segment; a path that is not below
        with pytest.raises(InvalidRequest):
            up.url(bad)


def test_base_url_with_a_query_is_refused_at_start() -> None:
    """A base_url with a query or fragment stops start-up, naming the upstream's key."""
    for base in ("https://x/v1?api-version=1", "https://x/v1#f"):
        with pytest.raises(ConfigError, match=r"upstreams\[t\]\.base_url"):
            Upstream(name="t", base_url=base, patterns=("*",))


# ---------------------------------------------------------------- finding 5: chat spellings

CHAT_SPELLINGS = [
    "/v1/chat/completions/",
    "/v1/chat/completions//",
    "/v1//chat/completions",
    "/v1/chat//completions",
    "/v1/Chat/Completions",
    "/v1/CHAT/COMPLETIONS/",
    "/v1/chat/completions;x=1",
    "/v1/chat;x/completions",
    "/v1/%63hat/completions",
    "/v1/chat/completions%20",
    "/v1/chat%2Fcompletions",
    "/v1/chat%2fcompletions",
]
REFUSED_SPELLINGS = [
    "/v1/chat%252Fcompletions",
    "/v1/./chat/completions",
    "/v1/chat/./completions",
    "/v1/chat/completions/.",
    "/v1/x/../chat/completions",
    "/v1/chat%5ccompletions",
    "/v1/chat\\completions",
]


async def test_every_chat_spelling_gets_chat_handling_or_a_400(
    recording_upstream: RecordingUpstream,
    make_proxy: MakeProxy,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Spellings that an upstream may take for its chat endpoint (an escaped slash
    included) are handled as chat (a decision header, the canonical path upstream, a
    turn in the store); those with dot segments, backslashes or double escapes are
    refused and reach nothing."""
    rec = recording_upstream
    db = tmp_path / "h.db"
    proxy = await _proxy(make_proxy, rec, monkeypatch, store={"path": str(db)})
    for target in REFUSED_SPELLINGS:
        status, _, body = await _send(proxy, "POST", target, CHAT)
        assert _is_openai_400(status, body), (target, status, body[:200])
    assert rec.seen == []
    for target in CHAT_SPELLINGS:
        status, headers, body = await _send(proxy, "POST", target, CHAT)
        assert status == 200, (target, body[:200])
        assert headers.get("x-handoff-decision") == "passthrough", target
    assert [s.raw_path for s in rec.seen] == ["/tenant-a/v1/chat/completions"] * len(CHAT_SPELLINGS)
    await until(lambda: len(stored_turns(db)) == len(CHAT_SPELLINGS))


async def test_chat_spellings_obey_store_required(
    recording_upstream: RecordingUpstream,
    make_proxy: MakeProxy,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """With store.required and a store that cannot write, the other spellings are refused
    with 503 as /v1/chat/completions is: none is served unrecorded."""
    rec = recording_upstream
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    store = {"path": str(blocker / "h.db"), "required": True}
    proxy = await _proxy(make_proxy, rec, monkeypatch, store=store)
    for _ in range(50):  # the writer notices the failure on its first attempt
        status, _, _ = await _send(proxy, "POST", "/v1/chat/completions", CHAT)
        if status == 503:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail("store.required never failed closed")
    served = len(rec.seen)
    for target in CHAT_SPELLINGS:
        status, _, _ = await _send(proxy, "POST", target, CHAT)
        assert status == 503, target
    assert len(rec.seen) == served


async def test_other_chat_methods_and_subpaths_pass_through(
    recording_upstream: RecordingUpstream, make_proxy: MakeProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stored-completion calls (GET /v1/chat/completions, POST /v1/chat/completions/{id})
    are not chat turns: they pass through as sent."""
    rec = recording_upstream
    proxy = await _proxy(make_proxy, rec, monkeypatch)
    for method, target in [
        ("GET", "/v1/chat/completions"),
        ("GET", "/v1/chat/completions/"),
        ("POST", "/v1/chat/completions/chatcmpl-abc"),
    ]:
        status, headers, _ = await _send(proxy, method, target, b'{"metadata": {}}')
        assert status == 200 and "x-handoff-decision" not in headers, target
        assert rec.seen[-1].raw_path == "/tenant-a" + target


# ---------------------------------------------------------------- finding 10a: the query

QUERIES = ["a=%23b&c=%26d", "x=%2F..%2F&y", "q=a+b%20c&&=&%3D=%3d", "k=%E2%98%95"]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/embeddings", "/chat/completions"])
async def test_query_string_forwarded_byte_for_byte(
    recording_upstream: RecordingUpstream,
    make_proxy: MakeProxy,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
) -> None:
    """The query reaches the upstream exactly as the client sent it, on chat and
    pass-through routes: no escape decoded, none added."""
    rec = recording_upstream
    proxy = await _proxy(make_proxy, rec, monkeypatch)
    for query in QUERIES:
        status, _, body = await _send(proxy, "POST", f"{path}?{query}", CHAT)
        assert status == 200, body[:200]
    assert [s.raw_query for s in rec.seen] == QUERIES


async def test_a_model_id_with_a_slash_reaches_the_upstream_as_sent(
    recording_upstream: RecordingUpstream, make_proxy: MakeProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The openai SDK's models.retrieve("org/model") escapes the slash; it is forwarded as
    sent, while an escaped slash that would make a dot segment is still refused."""
    import openai

    rec = recording_upstream
    proxy = await _proxy(make_proxy, rec, monkeypatch)
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0)
    try:
        await client.models.retrieve("meta-llama/Llama-3.1-8B-Instruct")
    except openai.APIError:
        pass  # the recording upstream's answer is not a model object: only the path matters
    finally:
        await client.close()
    assert [s.raw_path for s in rec.seen] == [
        "/tenant-a/v1/models/meta-llama%2FLlama-3.1-8B-Instruct"
    ]
    status, _, body = await _send(proxy, "GET", "/v1/models/a%2F..%2F..%2Fadmin")
    assert _is_openai_400(status, body) and len(rec.seen) == 1
