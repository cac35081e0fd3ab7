"""Store benchmark: a 500-turn conversation with tool calls, history resent every turn.

Reports the store's size (db + wal after a checkpoint) as a ratio to the final
history's JSON size (target ≤ 1.5) and the time per ``record()`` call (the only
cost on the request path). Prints a JSON line of the figures last.

    python -m bench.bench_store [--turns 500] [--redact]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from proxy.store.base import Decision, TurnRecord
from proxy.store.db import connect
from proxy.store.sqlite import SqliteStore

WORDS = [
    "the",
    "a",
    "function",
    "returns",
    "value",
    "list",
    "error",
    "file",
    "test",
    "module",
    "config",
    "request",
    "model",
    "token",
    "window",
    "history",
    "message",
    "stream",
    "reply",
    "tool",
    "call",
    "result",
    "data",
    "path",
    "build",
    "run",
    "check",
    "fix",
    "python",
    "async",
    "await",
    "context",
    "store",
    "session",
    "summary",
    "policy",
    "budget",
    "count",
    "cache",
    "user",
]


def _prose(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words)).capitalize() + "."


def turns(n: int, seed: int = 7) -> list[TurnRecord]:
    """``n`` turns of a coding-assistant session: prose, tool calls, tool results."""
    rng = random.Random(seed)
    history: list[dict[str, Any]] = [{"role": "system", "content": _prose(rng, 120)}]
    out = []
    for i in range(n):
        history.append({"role": "user", "content": _prose(rng, rng.randint(15, 80))})
        if i % 4 == 1:
            reply: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i:04d}",
                        "type": "function",
                        "function": {
                            "name": rng.choice(["read_file", "run_tests", "grep"]),
                            "arguments": orjson.dumps(
                                {"path": f"src/mod_{i}.py", "q": _prose(rng, 4)}
                            ).decode(),
                        },
                    }
                ],
            }
        else:
            reply = {"role": "assistant", "content": _prose(rng, rng.randint(40, 250))}
        model = "gpt-4o" if (i // 100) % 2 == 0 else "local-8k"
        decision = Decision(
            action="passthrough",
            window=128_000,
            budget=120_000,
            tokens=40 * len(history),
            exact=True,
        )
        out.append(
            TurnRecord(
                workspace="bench",
                started_at=1_700_000_000.0 + i,
                model=model,
                upstream="up",
                messages=list(history),
                status=200,
                latency_ms=800.0,
                streamed=True,
                decision=decision,
                reply=reply,
                usage={"prompt_tokens": 40 * len(history), "completion_tokens": 120},
                finish_reason="tool_calls" if reply.get("tool_calls") else "stop",
                request_params={
                    "temperature": 0.2,
                    "stream": True,
                    "tools": [
                        {
                            "type": "function",
                            "function": {"name": t, "parameters": {"type": "object"}},
                        }
                        for t in ("read_file", "run_tests", "grep")
                    ],
                },
            )
        )
        history.append(reply)
        if reply.get("tool_calls"):
            history.append(
                {
                    "role": "tool",
                    "tool_call_id": f"call_{i:04d}",
                    "content": _prose(rng, rng.randint(100, 600)),
                }
            )
    return out


def run(n_turns: int, redact: bool) -> dict[str, Any]:
    records = turns(n_turns)
    final = [*records[-1].messages, records[-1].reply]
    history_bytes = len(orjson.dumps(final))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        store = SqliteStore(path, redact=redact)
        store.open()
        per_call = []
        for r in records:
            t0 = time.perf_counter()
            store.record(r)
            per_call.append(time.perf_counter() - t0)
        t_drain = time.perf_counter()
        store.shutdown()
        drain_s = time.perf_counter() - t_drain
        db = connect(path)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
        store_bytes = sum(p.stat().st_size for p in Path(tmp).glob("bench.db*"))
    return {
        "turns": n_turns,
        "final_history_bytes": history_bytes,
        "store_bytes": store_bytes,
        "size_ratio": round(store_bytes / history_bytes, 3),
        "size_ratio_target": 1.5,
        "record_us_median": round(statistics.median(per_call) * 1e6, 2),
        "record_us_p99": round(sorted(per_call)[int(len(per_call) * 0.99)] * 1e6, 2),
        "drain_s": round(drain_s, 3),
        "write_failures": store.health().write_failures,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--redact", action="store_true")
    args = parser.parse_args(argv)
    figures = run(args.turns, args.redact)
    print(
        f"final history {figures['final_history_bytes']:,} B, store {figures['store_bytes']:,} B,"
        f" ratio {figures['size_ratio']} (target ≤ 1.5); record() median "
        f"{figures['record_us_median']} µs, p99 {figures['record_us_p99']} µs",
        file=sys.stderr,
    )
    print(orjson.dumps(figures).decode())
    return 0 if figures["size_ratio"] <= 1.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
