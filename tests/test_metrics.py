"""/metrics: Prometheus text with requests, decisions and tokens."""

from __future__ import annotations

import aiohttp
import openai

from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream


async def test_metrics_count_requests_and_tokens(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """After two requests, /metrics shows them by model and decision, with counted tokens."""
    proxy = await make_proxy(fake_upstream.url)
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="k", max_retries=0)
    for _ in range(2):
        await client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": "hi " * 3000}]
        )  # type: ignore[arg-type]
    await client.close()
    async with aiohttp.ClientSession() as s:
        async with s.get(proxy.root + "/metrics") as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/plain")
            text = await r.text()
    line = next(ln for ln in text.splitlines() if ln.startswith("handoff_requests_total{"))
    assert 'model="gpt-4o"' in line and 'decision="passthrough"' in line and line.endswith(" 2.0")
    assert "handoff_upstream_latency_seconds_bucket" in text
    assert "handoff_store_queue_depth" in text
