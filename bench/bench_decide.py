"""A 1M-token conversation sent to a 128k model: warm parse + count + decide + compress,
against a bare ``json.loads`` + ``json.dumps`` of the same body.

This is the engine's whole per-turn work on the request path when a long
conversation meets a small window: the client resends everything, one message
longer than last turn, and handoff must parse it (reusing the messages of the
body it resends, as the proxy does), count it and compress it (reusing last
turn's cut, counts, digests and stubs). The process gets the heap and GC settings
``handoff serve`` uses. Target: at most 2x the bare round trip.
Rounds are interleaved (handoff, bare, handoff, bare, ...) and medians reported.

    python -m bench.bench_decide [--tokens 1000000] [--rounds 5] [--model gpt-4o]

The last line of output is the figures as JSON, for the README table.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench.bench_count import conversation
from proxy.config import Settings
from proxy.decide.tokens import TokenCounter
from proxy.ingress.chat_completions import parse_chat
from proxy.process_tuning import raise_gc_threshold, tune_malloc
from proxy.server.build import build_engine
from proxy.server.services import history_cache
from proxy.upstream.routing import Router, Upstream


def _body(model: str, messages: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"model": model, "messages": messages})


async def _run(tokens: int, rounds: int, model: str) -> dict[str, Any]:
    settings = Settings(store={"enabled": False})
    up = Upstream(name="bench", base_url="http://bench.invalid/v1", patterns=("*",))
    counter = TokenCounter(settings.tokens.cache_size, cache_dir=Path(tempfile.mkdtemp()))
    engine = build_engine(settings, Router([up]), tokens=counter)
    history = conversation(tokens)
    bodies = []
    for i in range(rounds + 1):  # one message longer each turn, as a client resends
        history = [*history, {"role": "user", "content": f"and now step {i}?"}]
        bodies.append(_body(model, history))
    resent = history_cache(settings)  # as the proxy's
    first = await engine.plan(parse_chat(bodies[0], resent), up)  # cold: fills caches and the cut
    assert first.decision is not None and first.decision.action == "compressed"
    handoff_ms, bare_ms, actions = [], [], []
    for raw in bodies[1:]:
        t0 = time.perf_counter()
        plan = await engine.plan(parse_chat(raw, resent), up)
        handoff_ms.append((time.perf_counter() - t0) * 1000)
        actions.append(plan.decision.action if plan.decision else None)
        t0 = time.perf_counter()
        json.dumps(json.loads(raw))
        bare_ms.append((time.perf_counter() - t0) * 1000)
    h, b = statistics.median(handoff_ms), statistics.median(bare_ms)
    return {
        "model": model,
        "messages": len(history),
        "body_bytes": len(bodies[-1]),
        "prompt_tokens": first.decision.tokens,
        "forwarded_tokens": first.decision.forwarded_tokens,
        "rounds": rounds,
        "decisions": sorted(set(actions)),
        "handoff_ms": round(h, 2),
        "json_roundtrip_ms": round(b, 2),
        "ratio": round(h / b, 3),
        "target": 2.0,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--model", default="gpt-4o")
    args = parser.parse_args(argv)
    tune_malloc()
    raise_gc_threshold()
    r = asyncio.run(_run(args.tokens, args.rounds, args.model))
    print(
        f"{r['messages']} messages, {r['prompt_tokens']:,} tokens → {r['forwarded_tokens']:,} sent"
    )
    print(f"warm parse + count + decide + compress  {r['handoff_ms']:8.2f} ms")
    print(f"json.loads + json.dumps                 {r['json_roundtrip_ms']:8.2f} ms")
    verdict = "meets" if r["ratio"] <= r["target"] else "misses"
    print(f"ratio                                   {r['ratio']:8.3f} ({verdict} the <= 2x target)")
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
