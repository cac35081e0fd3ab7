"""Carrying what was derived from a conversation's last turn changes the cost, never the
plan: turn after turn, the engine with resent-body reuse and turn memos forwards the
very bytes an engine without them forwards."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import orjson

from proxy.config import Settings
from proxy.decide.engine import Engine
from proxy.ingress.chat_completions import parse_chat
from proxy.ingress.incremental_parse import WORTH_REUSING, ResentBodies
from proxy.server.build import build_engine
from proxy.upstream.routing import Router, Upstream

MODELS = {
    "small-8k": {"context_window": 8192, "max_output_tokens": 1024, "tokenizer": "o200k_base"},
    "small-16k": {"context_window": 16384, "max_output_tokens": 1024, "tokenizer": "cl100k_base"},
}
UP = Upstream(name="fake", base_url="http://fake.invalid/v1", patterns=("*",))


def _engine(carry: bool) -> Engine:
    settings = Settings(models=MODELS, store={"enabled": False})
    engine = build_engine(settings, Router([UP]))
    if not carry:
        engine.memos.capacity = 0
    return engine


def _turns(rng: random.Random, n: int) -> list[list[dict[str, Any]]]:
    """Each turn's whole history: tool rounds with big outputs, a regenerate, an edit."""
    words = ["alpha", "beta", "gamma", "delta", "öl", "日本", "x" * 30]
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are terse. " * 40}]
    out = []
    for i in range(n):
        history = [*history, {"role": "user", "content": f"step {i} " + " ".join(rng.choices(words, k=40))}]  # fmt: skip
        out.append(history)
        if i == n // 2:
            out.append(list(history))  # a regenerate: the same body again
        if i == n // 3:
            edited = [*history[:-1], {"role": "user", "content": f"edited {i}"}]
            out.append(edited)  # an edit forks; the conversation goes on unedited
        call = {"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": orjson.dumps({"n": i}).decode()}}  # fmt: skip
        history = [
            *history,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {
                "role": "tool",
                "tool_call_id": f"c{i}",
                "content": " ".join(rng.choices(words, k=900)),
            },
            {"role": "assistant", "content": " ".join(rng.choices(words, k=60))},
        ]
    return out


async def _plans(carry: bool, bodies: list[bytes]) -> list[tuple[bytes, Any]]:
    engine = _engine(carry)
    resent = ResentBodies(min_bytes=WORTH_REUSING) if carry else None
    out = []
    for raw in bodies:
        plan = await engine.plan(parse_chat(raw, resent), UP)
        out.append((plan.body, plan.decision))
    if carry:
        assert resent is not None and resent.reused_messages > 0
        assert len(engine.memos) > 0
    return out


def test_carried_memos_forward_the_same_bytes() -> None:
    """Across 24 turns, a model switch and back, a regenerate and an edit."""
    rng = random.Random(5)
    bodies = []
    for j, history in enumerate(_turns(rng, 24)):
        model = "small-16k" if 10 <= j < 14 else "small-8k"
        bodies.append(orjson.dumps({"model": model, "messages": history, "stream": False}))
    assert max(map(len, bodies)) > WORTH_REUSING  # the later turns go through reuse
    carried = asyncio.run(_plans(True, bodies))
    fresh = asyncio.run(_plans(False, bodies))
    assert [d.action for _, d in fresh].count("compressed") > 10
    assert carried == fresh


def test_memos_are_bounded_and_start_afresh_when_counting_changes() -> None:
    """At most ``capacity`` conversations and ``max_bytes`` of bodies are kept; a new
    counter or calibration factor starts the turn with nothing carried."""
    from proxy.decide.tokens import TokenCounter
    from proxy.decide.turn_memo import TurnMemos

    tokens = TokenCounter(100)
    gpt4o, gpt4 = tokens.for_model("gpt-4o"), tokens.for_model("gpt-4")
    memos = TurnMemos(capacity=3, max_bytes=1000)
    msg = {"role": "user", "content": "hi"}
    first = memos.begin("a", gpt4o, 1.0, 100)
    first.counts.put(msg, 5)
    assert memos.begin("a", gpt4o, 1.0, 100).counts.get(msg) == 5
    assert memos.begin("a", gpt4o, 1.1, 100).counts.get(msg) is None  # factor changed
    memos.begin("a", gpt4o, 1.0, 100).counts.put(msg, 5)
    assert memos.begin("a", gpt4, 1.0, 100).counts.get(msg) is None  # counter changed
    for key in "bcd":
        memos.begin(key, gpt4o, 1.0, 100)
    assert len(memos) == 3  # "a", the oldest, went
    memos.begin("e", gpt4o, 1.0, 900)
    assert len(memos) == 2  # 3 x 100 + 900 > 1000: the oldest went until it fit
    memos.begin("f", gpt4o, 1.0, 5000)
    assert len(memos) == 0  # a body over the cap is not kept at all
