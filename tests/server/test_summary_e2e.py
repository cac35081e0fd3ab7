"""The summarizer, end to end: a model that can read what it summarizes, pieces that fit
it, summaries kept across a restart, and a header that says why when none is used."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.decide.tokens import TokenCounter
from proxy.log import configure_logging
from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream
from tests.server.test_compress_e2e import MODELS_CONFIG, WINDOWS, _tool_turn
from tests.server.test_faults import post_chat

CHAIN = ["summarize", "truncate"]  # only dropping levels: summarize has to do the work


@pytest.fixture
async def exact_upstream(fake_upstream_factory: Any) -> FakeUpstream:
    """Counts prompts as OpenAI does, and refuses any over the model's window."""
    counter = TokenCounter(cache_size=100_000).for_model("gpt-4o")
    fake: FakeUpstream = await fake_upstream_factory(
        models=WINDOWS, count_tokens=counter.count_request
    )
    return fake


def _session(turns: int, size: int = 60) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a code reader."}]
    for i in range(turns):
        history += _tool_turn(i, size)
    history.append({"role": "user", "content": "What next?"})
    return history


def _summary_calls(fake: FakeUpstream) -> list[dict[str, Any]]:
    return [
        r.json()
        for r in fake.chat_requests
        if "compress the earlier part" in json.dumps(r.json()["messages"][0])
    ]


async def test_switching_down_the_summary_is_written_by_the_big_model(
    exact_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """A conversation on the 1M model, then on the 8k one with no summarizer model set:
    the summary is asked of big-1m (which read it all before), not of small-8k."""
    proxy = await make_proxy(
        exact_upstream.url,
        models=MODELS_CONFIG,
        compression={"chain": CHAIN, "summarize": {"enabled": True}},
    )
    history = _session(16)
    status, headers, raw = await post_chat(proxy, {"model": "big-1m", "messages": history})
    assert status == 200 and headers["x-handoff-decision"] == "passthrough", raw
    status, headers, raw = await post_chat(proxy, {"model": "small-8k", "messages": history})
    assert status == 200, raw
    assert headers["x-handoff-summary"].startswith("used: summarized")
    assert {c["model"] for c in _summary_calls(exact_upstream)} == {"big-1m"}


async def test_a_summary_larger_than_its_model_is_written_in_pieces(
    exact_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """The only model is small-8k and ~20k tokens are dropped: the summary is written in
    several calls, each of which the strict upstream (it refuses overflows) accepts."""
    proxy = await make_proxy(
        exact_upstream.url,
        models=MODELS_CONFIG,
        compression={"chain": CHAIN, "summarize": {"enabled": True, "max_tokens": 512}},
    )
    status, headers, raw = await post_chat(proxy, {"model": "small-8k", "messages": _session(16)})
    assert status == 200, raw
    assert headers["x-handoff-summary"].startswith("used"), headers.get("x-handoff-summary")
    calls = _summary_calls(exact_upstream)
    assert len(calls) >= 2 and {c["model"] for c in calls} == {"small-8k"}
    counter = TokenCounter(cache_size=0).for_model("gpt-4o")
    assert all(counter.count_request(c) + c["max_tokens"] <= 8192 for c in calls)
    users = [c["messages"][1]["content"] for c in calls]
    leaves = [u for u in users if u.startswith("Summarize this conversation:")]
    reduces = [u for u in users if "Merge these summaries" in u]
    assert len(leaves) >= 2 and reduces
    assert not any("Echo:" in u or "summary of what came before" in u for u in leaves)
    # the fake answers "Echo: " + the start of the prompt: the reduce call holds them
    answers = [("Echo: " + u[:200]).strip() for u in leaves]
    assert all(any(a in r for r in reduces) for a in answers)


async def test_a_restart_replaying_a_piecewise_summary_makes_no_call(
    exact_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """Leaves and reduce calls are all kept in the store: the same conversation after a
    restart asks the summarizer nothing."""
    config: dict[str, Any] = {
        "models": MODELS_CONFIG,
        "compression": {"chain": CHAIN, "summarize": {"enabled": True, "max_tokens": 512}},
        "store": {"path": str(tmp_path / "h.db"), "writer": "thread"},
        "tokens": {"discover": False},
        "memory": {"enabled": False},
    }
    body = {"model": "small-8k", "messages": _session(16)}
    proxy = await make_proxy(exact_upstream.url, **config)
    status, _, raw = await post_chat(proxy, body)
    assert status == 200, raw
    asked = len(_summary_calls(exact_upstream))
    assert asked >= 3
    await proxy.server.close()
    again = await make_proxy(exact_upstream.url, **config)
    status, headers, raw = await post_chat(again, body)
    assert status == 200, raw
    assert headers["x-handoff-summary"].startswith("used"), headers.get("x-handoff-summary")
    assert len(_summary_calls(exact_upstream)) == asked


async def test_summaries_are_kept_in_the_store_across_a_restart(
    exact_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """The same turn after a restart on the same store: the summary is read back, not
    asked for again."""
    config: dict[str, Any] = {
        "models": MODELS_CONFIG,
        "compression": {"chain": CHAIN, "summarize": {"enabled": True, "model": "big-1m"}},
        "store": {"path": str(tmp_path / "h.db"), "writer": "thread"},
        "tokens": {"discover": False},
        "memory": {"enabled": False},  # (its LLM refinement would ask the same model)
    }
    body = {"model": "small-8k", "messages": _session(16)}
    proxy = await make_proxy(exact_upstream.url, **config)
    status, _, raw = await post_chat(proxy, body)
    assert status == 200, raw
    asked = len(_summary_calls(exact_upstream))
    assert asked >= 1
    await proxy.server.close()
    again = await make_proxy(exact_upstream.url, **config)
    status, second, raw = await post_chat(again, body)
    assert status == 200, raw
    assert len(_summary_calls(exact_upstream)) == asked  # from the store
    assert second["x-handoff-summary"].startswith("used")
    sent = [r.body for r in exact_upstream.chat_requests if r.json()["model"] == "small-8k"]
    assert sent[-1] == sent[-2]  # the same summary, byte for byte


async def test_when_no_summary_is_used_the_header_says_why(
    exact_upstream: FakeUpstream, make_proxy: MakeProxy, capsys: pytest.CaptureFixture[str]
) -> None:
    """Summaries off (the default): a cut that drops messages says so, and why."""
    proxy = await make_proxy(exact_upstream.url, models=MODELS_CONFIG)
    status, headers, raw = await post_chat(proxy, {"model": "small-8k", "messages": _session(16)})
    assert status == 200, raw
    assert headers["x-handoff-summary"] == "not used: compression.summarize.enabled is false"
    failing = await make_proxy(
        exact_upstream.url,
        models=MODELS_CONFIG,
        compression={"chain": CHAIN, "summarize": {"enabled": True, "model": "no-such-model"}},
    )
    configure_logging("console")  # (an earlier test may have left info events off)
    capsys.readouterr()
    body = {"model": "small-8k", "messages": _session(16)}
    status, headers, raw = await post_chat(failing, body)
    assert status == 200, raw
    assert headers["x-handoff-summary"].startswith("not used: summarizer failed")
    assert "404" in headers["x-handoff-summary"]
    # the log says it too, in whichever format an earlier test left configured
    err = capsys.readouterr().err.splitlines()
    (line,) = [ln for ln in err if "compressed" in ln and "summary" in ln]
    assert "not used: summarizer failed" in line
