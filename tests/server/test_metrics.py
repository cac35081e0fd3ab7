"""/metrics: Prometheus text with requests, decisions and tokens."""

from __future__ import annotations

import gc

import aiohttp
import openai

from proxy.process_tuning import GC_YOUNG_THRESHOLD
from proxy.server.metrics import MAX_LABEL_SETS, OTHER_MODEL, Metrics
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


def test_request_series_are_capped_and_the_histogram_adds_up() -> None:
    """Client-chosen model names cannot grow /metrics without bound, and the latency
    histogram's buckets are cumulative with a count equal to the requests."""
    m = Metrics()
    for i in range(MAX_LABEL_SETS + 5):
        m.observe_chat("/v1/chat/completions", f"model-{i}", "up", 200, None, 0.02)
    text = m.render(None).decode()
    series = [ln for ln in text.splitlines() if ln.startswith("handoff_requests_total{")]
    assert len(series) == MAX_LABEL_SETS + 1
    other = next(ln for ln in series if f'model="{OTHER_MODEL}"' in ln)
    assert other.endswith(" 5.0")
    assert 'handoff_upstream_latency_seconds_bucket{le="0.01",upstream="up"} 0.0' in text
    assert 'handoff_upstream_latency_seconds_bucket{le="0.025",upstream="up"} 10005.0' in text
    assert 'handoff_upstream_latency_seconds_bucket{le="+Inf",upstream="up"} 10005.0' in text
    assert 'handoff_upstream_latency_seconds_count{upstream="up"} 10005.0' in text


async def test_a_serving_proxy_collects_young_garbage_less_often(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """While it serves, the young-generation threshold is raised (and put back after)."""
    before = gc.get_threshold()
    proxy = await make_proxy(fake_upstream.url)
    assert gc.get_threshold() == (GC_YOUNG_THRESHOLD, *before[1:])
    await proxy.server.close()
    assert gc.get_threshold() == before
