"""What every route shares (proxy.server.endpoint), through the real app on loopback:
unknown paths and methods get OpenAI-shaped 404/405s, logged like any request, and
the access key guards them too."""

from __future__ import annotations

from collections.abc import Iterator

import aiohttp
import pytest

from proxy.log import configure_logging
from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream
from tests.server.test_faults import BOUND

ACCESS = "hk-endpoint-canary-1a2b"


@pytest.fixture
def console_logs() -> Iterator[None]:
    configure_logging("console")  # (the demo's tests leave request events switched off)
    yield


async def test_unknown_path_404_and_wrong_method_405(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    capsys: pytest.CaptureFixture[str],
    console_logs: None,
) -> None:
    """404 for a path nothing serves, 405 with Allow for a known path's wrong method,
    both in OpenAI's error shape and each logged as one request event."""
    proxy = await make_proxy(fake_upstream.url)
    assert (
        not proxy.server.app.middlewares
    )  # every route is wrapped instead (proxy.server.endpoint)
    capsys.readouterr()
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        async with s.get(proxy.root + "/nowhere/at/all") as r:
            assert r.status == 404
            assert set((await r.json())["error"]) == {"message", "type", "param", "code"}
        async with s.post(proxy.root + "/healthz", json={}) as r:
            assert r.status == 405
            assert set(r.headers["Allow"].split(",")) == {"GET", "HEAD"}
            assert (await r.json())["error"]["message"] == "Method Not Allowed"
        async with s.delete(proxy.root + "/metrics") as r:
            assert r.status == 405
    logged = [ln for ln in capsys.readouterr().err.splitlines() if "] request " in ln]
    assert len(logged) == 3
    assert "status=404" in logged[0] and "path=/nowhere/at/all" in logged[0]
    assert "status=405" in logged[1] and "request_id=" in logged[1]
    assert fake_upstream.chat_requests == []


async def test_access_key_guards_unknown_paths(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """With server.access_key an unknown path is 401 without the key (nothing tells a
    stranger which paths exist) and 404 with it."""
    proxy = await make_proxy(fake_upstream.url, server={"access_key": ACCESS})
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        async with s.get(proxy.root + "/nowhere") as r:
            assert r.status == 401
            assert (await r.json())["error"]["code"] == "invalid_handoff_key"
        async with s.get(proxy.root + "/nowhere", headers={"x-handoff-key": ACCESS}) as r:
            assert r.status == 404
        async with s.get(proxy.root + "/healthz") as r:
            assert r.status == 200
