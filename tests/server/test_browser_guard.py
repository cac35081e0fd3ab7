"""What a web page can make a browser do to handoff, through the real proxy: a rebound DNS
name is refused by its Host, a cross-site request by its Origin or Sec-Fetch-Site, a
preflight is answered by handoff itself, and the upstream's CORS grant is never relayed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.config import ConfigError, load_settings
from tests.conftest import MakeProxy, ProxyHandle
from tests.fake_upstream import FakeUpstream
from tests.server.test_faults import BOUND

CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hello"}]}
APP = "http://app.example:3000"
EVIL = "http://evil.example"
QUIET = {"discover": False}  # no model discovery: every upstream request is the test's
UPSTREAM_CORS = {"Access-Control-Allow-Origin": "*", "Access-Control-Allow-Credentials": "true"}


def _routes(proxy: ProxyHandle) -> list[tuple[str, str]]:
    return [
        ("POST", proxy.url + "/chat/completions"),
        ("GET", proxy.url + "/models"),
        ("GET", proxy.root + "/handoff/v1/sessions"),
        ("GET", proxy.root + "/healthz"),
        ("GET", proxy.root + "/metrics"),
    ]


async def _call(
    s: aiohttp.ClientSession, method: str, url: str, headers: dict[str, str]
) -> tuple[int, Any, Any]:
    """Status, headers and JSON body (None when not JSON); the chat body as text/plain,
    as a web page's form-free fetch sends it without a preflight."""
    data = json.dumps(CHAT) if method == "POST" else None
    headers = {"Content-Type": "text/plain", **headers} if data else headers
    async with s.request(method, url, data=data, headers=headers) as r:
        body = await r.json(content_type=None) if r.content_type.endswith("json") else None
        return r.status, r.headers, body


def _openai_error(body: Any, code: str) -> dict[str, Any]:
    assert isinstance(body, dict) and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == code
    error: dict[str, Any] = body["error"]
    return error


@pytest.fixture
async def proxy(fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path) -> ProxyHandle:
    fake_upstream.extra_headers = dict(UPSTREAM_CORS)
    return await make_proxy(
        fake_upstream.url,
        tokens=QUIET,
        server={"allowed_hosts": ["handoff.lan"], "allowed_origins": [APP]},
        store={"path": str(tmp_path / "h.db")},
    )


async def test_host_other_than_ours_is_refused(
    proxy: ProxyHandle, fake_upstream: FakeUpstream
) -> None:
    """A Host that is not a loopback name, the bound host or an allowed_hosts entry (as a
    rebound DNS name would send) gets 421 on every route, /healthz too; ours are served."""
    port = proxy.server.port
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        for host in ("evil.example", f"evil.example:{port}", f"localhost.evil.example:{port}"):
            for method, url in _routes(proxy):
                status, _, body = await _call(s, method, url, {"Host": host})
                assert status == 421, (host, url)
                assert "server.allowed_hosts" in _openai_error(body, "host_not_allowed")["message"]
        assert fake_upstream.requests == []
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "handoff.lan"):
            for method, url in _routes(proxy):
                status, _, _ = await _call(s, method, url, {"Host": host})
                assert status == 200, (host, url)


async def test_cross_site_requests_are_refused(
    proxy: ProxyHandle, fake_upstream: FakeUpstream
) -> None:
    """A page's text/plain POST (no preflight) and GETs, from an origin not allowed, an
    opaque one, or marked cross-site by the browser, get 403 and reach no upstream."""
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        for given in (
            {"Origin": EVIL},
            {"Origin": "null"},
            {"Origin": APP + ".evil.example"},
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site"},
        ):
            for method, url in _routes(proxy):
                status, headers, body = await _call(s, method, url, given)
                assert status == 403, (given, url)
                message = _openai_error(body, "origin_not_allowed")["message"]
                assert "server.allowed_origins" in message
                assert "Access-Control-Allow-Origin" not in headers
        assert fake_upstream.requests == []
        status, _, _ = await _call(s, "POST", proxy.url + "/chat/completions", {})
        assert status == 200  # a client that is not a browser page
        same = {"Sec-Fetch-Site": "same-origin"}
        status, _, _ = await _call(s, "GET", proxy.root + "/healthz", same)
        assert status == 200


async def test_upstream_cors_headers_are_never_relayed(
    proxy: ProxyHandle, fake_upstream: FakeUpstream
) -> None:
    """The upstream's ACAO '*' and ACAC never reach the client; an allowed origin gets
    handoff's own grant for exactly itself, streamed answers too."""
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        for method, url in _routes(proxy)[:2]:
            status, headers, _ = await _call(s, method, url, {})
            assert status == 200
            assert "Access-Control-Allow-Origin" not in headers
            assert "Access-Control-Allow-Credentials" not in headers
        for method, url in _routes(proxy):
            status, headers, _ = await _call(s, method, url, {"Origin": APP})
            assert status == 200, url
            assert headers["Access-Control-Allow-Origin"] == APP
            assert "Access-Control-Allow-Credentials" not in headers
            assert "Origin" in headers.get("Vary", "")
        stream = {**CHAT, "stream": True}
        async with s.post(
            proxy.url + "/chat/completions", json=stream, headers={"Origin": APP}
        ) as r:
            assert r.status == 200 and r.headers["Access-Control-Allow-Origin"] == APP
            assert "Access-Control-Allow-Credentials" not in r.headers
            assert (await r.read()).rstrip().endswith(b"[DONE]")
    assert len(fake_upstream.chat_requests) == 3


async def test_preflight_is_answered_by_handoff(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """OPTIONS never goes upstream: refused (403, no CORS grant) for an origin not allowed,
    answered 204 for an allowed one, with no access key needed (browsers send none on a
    preflight) while the request itself still needs it."""
    fake_upstream.extra_headers = dict(UPSTREAM_CORS)
    proxy = await make_proxy(
        fake_upstream.url,
        tokens=QUIET,
        server={"allowed_origins": [APP], "access_key": "hk-pre-flight"},
        store={"path": str(tmp_path / "h.db")},
    )
    ask = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type, x-handoff-key",
    }
    paths = [proxy.url + "/chat/completions", proxy.url + "/models"]
    paths += [proxy.root + "/handoff/v1/sessions", proxy.root + "/nowhere"]
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        for url in paths:
            async with s.options(url, headers={**ask, "Origin": EVIL}) as r:
                assert r.status == 403, url
                assert "Access-Control-Allow-Origin" not in r.headers
                _openai_error(await r.json(), "origin_not_allowed")
            async with s.options(url, headers={**ask, "Origin": APP}) as r:
                assert r.status == 204, url
                assert r.headers["Access-Control-Allow-Origin"] == APP
                assert "POST" in r.headers["Access-Control-Allow-Methods"]
                allowed = r.headers["Access-Control-Allow-Headers"].lower()
                assert {"authorization", "content-type", "x-handoff-key"} <= {
                    h.strip() for h in allowed.split(",")
                }
                assert "Access-Control-Allow-Credentials" not in r.headers
            async with s.options(url) as r:
                assert r.status == 204 and "Access-Control-Allow-Origin" not in r.headers
        assert fake_upstream.requests == []
        status, _, _ = await _call(s, "POST", paths[0], {"Origin": APP})
        assert status == 401
        status, _, _ = await _call(
            s, "POST", paths[0], {"Origin": APP, "x-handoff-key": "hk-pre-flight"}
        )
        assert status == 200


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("allowed_origins", "*"),
        ("allowed_origins", "http://app.example/path"),
        ("allowed_origins", "app.example:3000"),
        ("allowed_hosts", "http://box.lan"),
        ("allowed_hosts", ""),
    ],
)
def test_bad_allowed_entries_fail_at_load_naming_the_key(key: str, value: str) -> None:
    """A wildcard origin, an origin with a path or no scheme, or a URL for a host name
    stops start-up with the key named."""
    with pytest.raises(ConfigError, match=rf"server\.{key}"):
        load_settings(None, {"server": {key: [value]}}, env={})
