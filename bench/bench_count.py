"""Counting a ~1M-token conversation: cold, warm after one appended message, vs parsing it.

Every turn a chat client resends the whole history, so what matters is the warm
figure: the count after one new message, with earlier messages cached by hash.
The target is warm counting cheaper than a bare ``json.loads`` of the same body.
Rounds are interleaved (cold, warm, parse, ...) so drift hits all figures alike.

    python -m bench.bench_count [--tokens 1000000] [--rounds 5] [--model gpt-4o]

The last line of output is the figures as JSON, for the README table.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import orjson

from proxy.decide.tokens import TokenCounter

T = TypeVar("T")

_TEXT = (
    "the proxy counts tokens for every request and keeps the conversation within the "
    "model window while the client resends history each turn so caching matters a lot "
    "def main(): return compute(x, y) + 42  # résumé naïve café 東京 データ ✓"
)


def conversation(target_tokens: int, seed: int = 7) -> list[dict[str, Any]]:
    """A realistic mix: user asks, assistant calls tools, tool results, answers."""
    rng = random.Random(seed)
    words = _TEXT.split(" ")

    def text(n: int) -> str:
        return " ".join(rng.choice(words) for _ in range(n))

    messages: list[dict[str, Any]] = [{"role": "system", "content": text(300)}]
    approx, turn = 400, 0
    while approx < target_tokens:
        turn += 1
        call_id = f"call_{turn}"
        args = json.dumps({"path": f"src/module_{turn}.py", "query": text(12)})
        result = json.dumps({"lines": [text(20) for _ in range(rng.randint(5, 25))]})
        messages += [
            {"role": "user", "content": text(rng.randint(20, 120))},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "read_file", "arguments": args},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call_id, "content": result},
            {"role": "assistant", "content": text(rng.randint(50, 300))},
        ]
        approx += sum(len(str(m.get("content") or "")) for m in messages[-4:]) // 4 + 60
    return messages


def _timed(fn: Callable[[], T]) -> tuple[float, T]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--model", default="gpt-4o")
    args = p.parse_args(argv)

    history = conversation(args.tokens)
    new = {"role": "user", "content": "And one more question about the last file, please."}
    raw = orjson.dumps({"model": args.model, "messages": history})
    raw_next = orjson.dumps({"model": args.model, "messages": [*history, new]})
    body_next = json.loads(raw_next)
    times: dict[str, list[float]] = {k: [] for k in ("cold", "warm", "bound", "json", "orjson")}

    with tempfile.TemporaryDirectory() as cache_dir:
        warmup = TokenCounter(0, Path(cache_dir)).for_model(args.model)
        warmup.count_text("load the encoding before timing")
        tokens = 0
        for _ in range(args.rounds):
            counter = TokenCounter(len(history) * 2, Path(cache_dir)).for_model(args.model)
            body = json.loads(raw)
            t, cold = _timed(partial(counter.count_request, body))
            times["cold"].append(t)
            t, tokens = _timed(partial(counter.count_request, body_next))
            times["warm"].append(t)
            assert cold < tokens
            times["bound"].append(_timed(partial(counter.upper_bound, body_next))[0])
            times["json"].append(_timed(partial(json.loads, raw_next))[0])
            times["orjson"].append(_timed(partial(orjson.loads, raw_next))[0])

    med = {k: statistics.median(v) for k, v in times.items()}
    figures = {
        "model": args.model,
        "messages": len(history) + 1,
        "body_bytes": len(raw_next),
        "prompt_tokens": tokens,
        "rounds": args.rounds,
        "cold_ms": round(med["cold"] * 1000, 1),
        "warm_ms": round(med["warm"] * 1000, 2),
        "bound_ms": round(med["bound"] * 1000, 2),
        "json_loads_ms": round(med["json"] * 1000, 2),
        "orjson_loads_ms": round(med["orjson"] * 1000, 2),
        "warm_over_json_loads": round(med["warm"] / med["json"], 3),
    }
    print(f"{figures['messages']} messages, {tokens:,} prompt tokens, {len(raw_next):,} bytes")
    print(f"cold count        {figures['cold_ms']:>9} ms")
    print(f"warm count (+1)   {figures['warm_ms']:>9} ms")
    print(f"byte upper bound  {figures['bound_ms']:>9} ms")
    print(f"json.loads        {figures['json_loads_ms']:>9} ms")
    print(f"orjson.loads      {figures['orjson_loads_ms']:>9} ms")
    verdict = "meets" if figures["warm_over_json_loads"] < 1 else "misses"
    print(f"warm / json.loads {figures['warm_over_json_loads']:>9} ({verdict} the < 1 target)")
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
