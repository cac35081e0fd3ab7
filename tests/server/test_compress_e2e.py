"""Migrate or compress, end to end: the proxy between the openai SDK and a strict upstream
that counts tokens exactly as OpenAI does and rejects orphaned tools and overflows."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import openai
import pytest

from proxy.decide.tokens import TokenCounter
from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream

WINDOWS = {"small-8k": 8192, "big-1m": 1_000_000}
MODELS_CONFIG = {
    "small-8k": {"context_window": 8192, "max_output_tokens": 1024, "tokenizer": "o200k_base"},
    "big-1m": {"context_window": 1_000_000, "max_output_tokens": 1024, "tokenizer": "o200k_base"},
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
]


@pytest.fixture
async def exact_upstream(fake_upstream_factory: Any) -> FakeUpstream:
    """A fake upstream whose prompt counts are the real o200k chat accounting."""
    counter = TokenCounter(cache_size=100_000).for_model("gpt-4o")
    return await fake_upstream_factory(models=WINDOWS, count_tokens=counter.count_request)  # type: ignore[no-any-return]


def _tool_turn(i: int, size: int) -> list[dict[str, Any]]:
    call_id = f"call_{i:04d}"
    return [
        {"role": "user", "content": f"Step {i}: read src/module_{i}.py and tell me what it does."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": "read_file",
                        "arguments": json.dumps({"path": f"src/module_{i}.py"}),
                    },
                }
            ],
        },
        {
            "role": "tool",
            "tool_call_id": call_id,
            "content": "\n".join(
                f"def f_{i}_{j}(x): return x * {j}  # line {j}" for j in range(size)
            ),
        },
        {"role": "assistant", "content": f"module_{i} defines {size} small multiplier functions."},
    ]


async def _post(proxy_url: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy_url + "/chat/completions", json=body) as r:
            return r.status, dict(r.headers), await r.read()


@pytest.mark.parametrize("stream", [False, True])
async def test_agent_conversation_grows_past_small_window(
    exact_upstream: FakeUpstream, make_proxy: MakeProxy, stream: bool
) -> None:
    """An agent session with tool calls keeps working past 8k: compressed, never rejected."""
    proxy = await make_proxy(exact_upstream.url, models=MODELS_CONFIG)
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0)
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a code reader."}]
    decisions = []
    for i in range(14):
        history += _tool_turn(i, 60)
        history.append({"role": "user", "content": f"Summarize progress after step {i}."})
        raw = await client.chat.completions.with_raw_response.create(
            model="small-8k",
            messages=history,
            tools=TOOLS,
            stream=stream,  # type: ignore[arg-type]
        )
        decisions.append(raw.headers["x-handoff-decision"])
        parsed = raw.parse()
        if stream:
            text = "".join([c.choices[0].delta.content or "" async for c in parsed if c.choices])  # type: ignore[union-attr]
        else:
            text = parsed.choices[0].message.content  # type: ignore[union-attr]
        assert f"after step {i}" in (text or "")  # the newest user turn reached the model
        history.pop()
    await client.close()
    assert decisions[0] == "passthrough"
    assert decisions[-1] == "compressed"
    statuses = [json.loads(r.body)["model"] for r in exact_upstream.chat_requests]
    assert len(statuses) == 14  # no retries were needed: every request was accepted


async def test_switch_big_small_big_is_transparent(
    exact_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """1M → 8k → 1M mid-conversation: the big model gets the original bytes, the small a fit."""
    proxy = await make_proxy(exact_upstream.url, models=MODELS_CONFIG)
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i in range(8):
        history += _tool_turn(i, 80)
    history.append({"role": "user", "content": "Where are we?"})
    sent = {}
    for model in ("big-1m", "small-8k", "big-1m"):
        body = json.dumps({"model": model, "messages": history, "tools": TOOLS}).encode()
        async with aiohttp.ClientSession() as s:
            async with s.post(proxy.url + "/chat/completions", data=body) as r:
                assert r.status == 200, await r.text()
                sent[model] = (r.headers["x-handoff-decision"], body)
        forwarded = exact_upstream.chat_requests[-1].body
        if model == "big-1m":
            assert forwarded == body  # byte-identical migrate
        else:
            assert len(forwarded) < len(body)
            assert int(r.headers["x-handoff-forwarded-tokens"]) <= int(
                r.headers["x-handoff-budget"]
            )
            assert int(r.headers["x-handoff-tokens"]) > int(r.headers["x-handoff-budget"])
            assert json.loads(forwarded)["messages"][-1] == history[-1]
    assert sent["small-8k"][0] == "compressed"
    assert sent["big-1m"][0] == "passthrough"


async def test_pinned_messages_too_large_is_400_without_upstream_call(
    exact_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """If the system prompt and newest user turn cannot fit, handoff answers 400 itself."""
    proxy = await make_proxy(exact_upstream.url, models=MODELS_CONFIG)
    huge = " ".join(f"word{i}" for i in range(20_000))
    body = {
        "model": "small-8k",
        "messages": [{"role": "system", "content": huge}, {"role": "user", "content": "hi"}],
    }
    status, _, data = await _post(proxy.url, body)
    err = json.loads(data)["error"]
    assert status == 400
    assert err["code"] == "handoff_unfittable" and err["type"] == "invalid_request_error"
    assert "small-8k" in err["message"] and "will not help" in err["message"]
    # Not the words agent CLIs take for an overflow to compact and retry.
    low = err["message"].lower()
    for phrase in ("context", "prompt", "exceed", "maximum", "too long", "too large"):
        assert phrase not in low, phrase
    assert exact_upstream.chat_requests == []


async def test_upstream_overflow_is_retried_once_with_its_limit(
    exact_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """A window configured too large: the upstream's own error names 8192, handoff re-fits."""
    wrong = {**MODELS_CONFIG, "small-8k": {**MODELS_CONFIG["small-8k"], "context_window": 32768}}
    proxy = await make_proxy(exact_upstream.url, models=wrong)
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i in range(8):  # about 11k tokens: fits the configured 32k, not the real 8k
        history += _tool_turn(i, 90)
    history.append({"role": "user", "content": "And now?"})
    status, headers, data = await _post(proxy.url, {"model": "small-8k", "messages": history})
    assert status == 200, data
    assert headers["x-handoff-decision"] == "compressed"
    assert [r.path for r in exact_upstream.chat_requests] == ["/v1/chat/completions"] * 2


async def test_compress_off_route_only_records(
    exact_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """compress = false on a route: an over-long request goes as it is; the upstream judges."""
    proxy = await make_proxy(
        models=MODELS_CONFIG,
        upstreams=[{"name": "u", "base_url": exact_upstream.url, "compress": False}],
    )
    history: list[dict[str, Any]] = [{"role": "system", "content": "x"}]
    for i in range(6):
        history += _tool_turn(i, 90)
    history.append({"role": "user", "content": "?"})
    body = json.dumps({"model": "small-8k", "messages": history}).encode()
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/chat/completions", data=body) as r:
            status, err = r.status, await r.json()
    assert status == 400 and err["error"]["code"] == "context_length_exceeded"
    assert exact_upstream.chat_requests[0].body == body


async def test_summarize_through_the_upstream_and_reuse_it(
    exact_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """With a summarizer model configured, old turns become one summary, reused turn to turn."""
    proxy = await make_proxy(
        exact_upstream.url,
        models=MODELS_CONFIG,
        # Only dropping levels, so summarize has to do the work.
        compression={
            "chain": ["summarize", "truncate"],
            "summarize": {"enabled": True, "model": "big-1m"},
        },
    )
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0)
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a code reader."}]
    policies = []
    for i in range(16):
        history += _tool_turn(i, 60)
        history.append({"role": "user", "content": f"What next after step {i}?"})
        raw = await client.chat.completions.with_raw_response.create(
            model="small-8k",
            messages=history,  # type: ignore[arg-type]
        )
        policies.append(raw.headers.get("x-handoff-policy", ""))
        assert f"after step {i}" in (raw.parse().choices[0].message.content or "")
        history.pop()
    await client.close()
    summary_calls = [r for r in exact_upstream.chat_requests if r.json()["model"] == "big-1m"]
    compressed = [p for p in policies if p]
    assert any("summarize" in p for p in compressed)
    assert 1 <= len(summary_calls) < len(compressed)  # reused, not rewritten every turn
    sent = [r.json() for r in exact_upstream.chat_requests if r.json()["model"] == "small-8k"]
    assert any("Echo:" in json.dumps(b["messages"][1]) for b in sent[-3:])  # the summary itself


async def test_retry_aims_lower_when_our_count_ran_low(
    fake_upstream_factory: Any, make_proxy: MakeProxy
) -> None:
    """The upstream counts 1.3x ours and refuses at the very window we know: the one retry
    goes below what was refused instead of resending the same body."""
    ours = TokenCounter(cache_size=10_000).for_model("gpt-4o")
    fake = await fake_upstream_factory(
        models=WINDOWS, count_tokens=lambda body: round(ours.count_request(body) * 1.3)
    )
    proxy = await make_proxy(fake.url, models=MODELS_CONFIG)
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    i = 0
    while ours.count_messages([*history, *_tool_turn(i, 20)]) < 6900:  # just under our budget
        history += _tool_turn(i, 20)
        i += 1
    history.append({"role": "user", "content": "And now?"})
    status, headers, data = await _post(proxy.url, {"model": "small-8k", "messages": history})
    assert status == 200, data
    assert headers["x-handoff-decision"] == "compressed"
    first, second = fake.chat_requests
    assert first.body != second.body and len(second.body) < len(first.body)


async def test_unknown_model_fitted_to_the_limit_its_error_names(
    fake_upstream_factory: Any, make_proxy: MakeProxy
) -> None:
    """A model handoff has no window for: the upstream's error names 4096, and handoff fits it."""
    counter = TokenCounter(cache_size=10_000).for_model("gpt-4o")
    fake = await fake_upstream_factory(
        models={"mystery-model": 4096}, count_tokens=counter.count_request
    )
    proxy = await make_proxy(fake.url)
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i in range(5):
        history += _tool_turn(i, 60)
    history.append({"role": "user", "content": "Summary?"})
    status, headers, data = await _post(proxy.url, {"model": "mystery-model", "messages": history})
    assert status == 200, data
    assert headers["x-handoff-decision"] == "compressed"
    assert int(headers["x-handoff-window"]) == 4096
    assert len(fake.chat_requests) == 2


async def test_huge_max_tokens_is_blamed_not_the_messages(
    exact_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """max_tokens bigger than the window, with compression.strict_max_tokens (else it is
    lowered to fit): the 400 names max_tokens and the setting, not the conversation."""
    proxy = await make_proxy(
        exact_upstream.url, models=MODELS_CONFIG, compression={"strict_max_tokens": True}
    )
    history = [{"role": "user", "content": "word " * 200}]
    body = {"model": "small-8k", "messages": history, "max_tokens": 9000}
    status, _, data = await _post(proxy.url, body)
    err = json.loads(data)["error"]
    assert status == 400 and err["param"] == "max_tokens"
    assert "9,000" in err["message"] and "compression.strict_max_tokens" in err["message"]


@pytest.mark.parametrize(
    "calls",
    [[{"id": "", "function": [None]}], ["not a call"], {"id": "c"}],
    ids=["function-a-list", "call-a-string", "tool-calls-an-object"],
)
async def test_malformed_tool_calls_reach_a_clean_answer_when_compressing(
    exact_upstream: FakeUpstream, make_proxy: MakeProxy, calls: Any
) -> None:
    """Found by the fuzz test: tool calls of the wrong shape in a conversation that must
    be compressed crashed the policies (a 500). Now they get a 4xx: handoff's own when
    nothing can fit, else the upstream's judgement of the rewritten body."""
    proxy = await make_proxy(exact_upstream.url, models=MODELS_CONFIG)
    history = [
        {"role": "system", "content": None, "tool_calls": calls},
        *[{"role": "user" if i % 2 else "assistant", "content": "word " * 300} for i in range(60)],
        {"role": "user", "content": "and now?"},
    ]
    for max_tokens in (9_223_372_036_854_775_806, 100):
        body = {"model": "small-8k", "messages": history, "max_tokens": max_tokens}
        status, _, data = await _post(proxy.url, body)
        assert 400 <= status < 500, (status, data[:300])
        assert "error" in json.loads(data)
