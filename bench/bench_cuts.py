"""Cache-stable cuts: conversations replayed through the decision engine into a small window.

Each request resends the whole history, as a client does, and is planned by the same
engine the proxy runs (cut memory per conversation and window, the low-water mark).
Reported per shape (a chat, an agent loop) and per counting (exact: tiktoken for an
OpenAI model; approximate: a model with no public tokenizer, whose calibration factor
is fed the true prompt size of every request, so it drifts as it does live): the share
of consecutive compressed requests whose previous forwarded messages are an exact
prefix of the next ones, which is what a provider or llama.cpp prompt cache reuses;
the share of forwarded tokens that follow unchanged messages of the previous forward
(what a cache reuses when the prefix breaks later than the start); and the ceiling of
the first share: the most any cut could reach on this session, under the rule that
the newest request is sent whole (see :func:`ceiling`).

    python -m bench.bench_cuts [--requests 300] [--window 8192 --window 32768]

The last line of output is the figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from bench.sessions import Msg, agent, chat
from proxy.config import Settings
from proxy.decide.engine import Engine
from proxy.decide.tokens import TokenCounter
from proxy.ingress.chat_completions import parse_chat
from proxy.server.build import build_engine
from proxy.upstream.routing import Router, Upstream

TARGET = 0.9
TRUE_RATIO = 1.12
"""The approximate model's true prompt size against its estimate (another tokenizer)."""


def engine_for(window: int) -> tuple[Engine, Upstream]:
    models = {
        "exact-model": {
            "context_window": window,
            "max_output_tokens": 1024,
            "tokenizer": "o200k_base",
        },
        "approx-model": {
            "context_window": window,
            "max_output_tokens": 1024,
            "tokenizer": "estimate",
        },
    }
    settings = Settings(store={"enabled": False}, tokens={"discover": False}, models=models)
    up = Upstream(name="bench", base_url="http://bench.invalid/v1", patterns=("*",))
    counter = TokenCounter(settings.tokens.cache_size, cache_dir=Path(tempfile.mkdtemp()))
    return build_engine(settings, Router([up]), tokens=counter), up


def ceiling(added: list[int], budget: int, floor: int = 0) -> float:
    """The best prefix-kept share any cut can reach for requests adding ``added`` tokens
    each, in a budget, keeping ``floor`` (the system prompt): a request that does not
    fit after the previous forward changes it (a break), and the best a break can do is
    keep the floor and the newest request alone, so it appends until it must break
    (greedy is optimal: leaving the least behind never hurts a later request). An
    upper bound: real cuts keep the digest and the newest results as well."""
    if len(added) < 2:
        return 1.0
    level, breaks = min(floor + added[0], budget), 0  # the first may keep only that too
    for a in added[1:]:
        if level + a <= budget:
            level += a
        else:
            breaks += 1
            level = min(floor + a, budget)
    return round(1 - breaks / (len(added) - 1), 4)


def common_tokens(previous: list[Any], forwarded: list[Any], count: Any) -> int:
    """Tokens of the forward's longest run of messages equal to the previous forward's."""
    k = 0
    for a, b in zip(previous, forwarded, strict=False):
        if a != b:
            break
        k += 1
    return count(forwarded[:k]) if k else 0


async def true_budget(engine: Engine, up: Upstream, history: list[Msg]) -> int:
    """The room for the prompt when it is counted exactly (no margin for estimates)."""
    req = parse_chat(orjson.dumps({"model": "exact-model", "messages": history}))
    plan = await engine.plan(req, up)
    assert plan.decision is not None and plan.decision.budget is not None
    return plan.decision.budget


async def replay(
    shape: str, model: str, requests: int, window: int, seed: int = 7
) -> dict[str, Any]:
    engine, up = engine_for(window)
    exact = TokenCounter(100_000).for_model("gpt-4o")
    source: Iterator[list[Msg]] = (agent if shape == "agent" else chat)(seed, requests)
    history: list[Msg] = [{"role": "system", "content": "You are a careful coding agent. " * 30}]
    previous: list[Any] | None = None
    compressed = kept = reused = total = 0
    added: list[int] = []  # true tokens each compressed request adds
    room = await true_budget(engine, up, history)
    floor = round(exact.count_messages(history) * (TRUE_RATIO if model == "approx-model" else 1))
    for new in source:
        history = [*history, *new]
        req = parse_chat(orjson.dumps({"model": model, "messages": history}))
        plan = await engine.plan(req, up)
        assert plan.decision is not None
        if plan.decision.action == "compressed" and plan.forwarded is not None:
            compressed += 1
            true_size = exact.count_messages(new) * (TRUE_RATIO if model == "approx-model" else 1)
            added.append(round(true_size))
            if previous is not None:
                kept += plan.forwarded[: len(previous)] == previous
                reused += common_tokens(previous, plan.forwarded, exact.count_messages)
                total += exact.count_messages(plan.forwarded)
            previous = plan.forwarded
        else:
            previous = None
        if model == "approx-model":
            sent = orjson.loads(plan.body)
            true = round(exact.count_request(sent) * TRUE_RATIO)
            engine.observe(req, plan, {"prompt_tokens": true})
    pairs = max(1, compressed - 1)
    return {
        "shape": shape,
        "model": model,
        "requests": requests,
        "window": window,
        "compressed": compressed,
        "prefix_kept_share": round(kept / pairs, 4) if compressed > 1 else 1.0,
        "ceiling": ceiling(added, room, floor),
        "tokens_reused_share": round(reused / total, 4) if total else 1.0,
        "calibration_factor": round(engine.calibration.factor(model), 4),
    }


async def run(requests: int, windows: list[int]) -> list[dict[str, Any]]:
    return [
        await replay(shape, model, requests, window)
        for window in windows
        for shape in ("chat", "agent")
        for model in ("exact-model", "approx-model")
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--window", type=int, action="append", help="repeatable; 8192 and 32768")
    a = p.parse_args(argv)
    rows = asyncio.run(run(a.requests, a.window or [8192, 32768]))
    for r in rows:
        print(
            f"{r['window']:>6} {r['shape']:>5} {r['model']:<13} compressed {r['compressed']:>4}"
            f" of {r['requests']}  prefix kept {100 * r['prefix_kept_share']:5.1f}%"
            f" (ceiling {100 * r['ceiling']:5.1f}%)  tokens reused"
            f" {100 * r['tokens_reused_share']:5.1f}%  (factor {r['calibration_factor']})"
        )
    ok = all(r["prefix_kept_share"] >= TARGET for r in rows)
    print(orjson.dumps({"rows": rows, "target": TARGET, "targets_met": ok}).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
