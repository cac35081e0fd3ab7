"""Store benchmark: a 500-turn conversation with tool calls, history resent every turn.

Reports the store's size (db + wal after a checkpoint) as a ratio to the final
history's JSON size (target ≤ 1.5), the time per ``record()`` call (the only
cost on the request path), and the writer thread's CPU per turn at turns 100,
250 and 500. Turns are recorded one at a time and drained before the next, as a
real conversation paces them; the writer's CPU is what it takes from the event
loop (they share the GIL), so it should stay flat as the history grows. Prints a
JSON line of the figures last.

    python -m bench.bench_store [--turns 500] [--redact] [--sdk]
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

from proxy.decide.decision import Decision
from proxy.store.base import TurnRecord
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


def resent(reply: dict[str, Any]) -> dict[str, Any]:
    """``reply`` as a client using the openai SDK sends it back: parsed from the upstream's
    JSON (which carries ``refusal: null`` and ``annotations: []``) and dumped again."""
    from openai.types.chat import ChatCompletionMessage

    sent = {**reply, "refusal": None, "annotations": []}
    return ChatCompletionMessage.model_validate(sent).model_dump(exclude_unset=True)


def turns(n: int, seed: int = 7, sdk: bool = False) -> list[TurnRecord]:
    """``n`` turns of a coding-assistant session: prose, tool calls, tool results.

    Replies and tool results are 1-5 KB; every other turn calls a tool, so 500
    turns end with about 1,250 messages.
    """
    rng = random.Random(seed)
    history: list[dict[str, Any]] = [{"role": "system", "content": _prose(rng, 120)}]
    out = []
    for i in range(n):
        history.append({"role": "user", "content": _prose(rng, rng.randint(20, 150))})
        if i % 2 == 1:
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
            reply = {"role": "assistant", "content": _prose(rng, rng.randint(170, 850))}
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
        history.append(resent(reply) if sdk else reply)
        if reply.get("tool_calls"):
            history.append(
                {
                    "role": "tool",
                    "tool_call_id": f"call_{i:04d}",
                    "content": _prose(rng, rng.randint(170, 850)),
                }
            )
    return out


CHECKPOINTS = (100, 250, 500)
WINDOW = 10  # turns averaged at each checkpoint


def _drain(store: SqliteStore) -> None:
    while store.health().queue_depth:
        time.sleep(0.0002)


def writer_ms_at(per_turn_s: list[float], checkpoints: tuple[int, ...]) -> dict[str, float]:
    """Median writer CPU (ms) over the ``WINDOW`` turns ending at each checkpoint reached."""
    return {
        str(c): round(statistics.median(per_turn_s[max(0, c - WINDOW) : c]) * 1e3, 3)
        for c in checkpoints
        if c <= len(per_turn_s)
    }


def run(n_turns: int, redact: bool, sdk: bool = False) -> dict[str, Any]:
    records = turns(n_turns, sdk=sdk)
    final = [*records[-1].messages, records[-1].reply]
    history_bytes = len(orjson.dumps(final))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        store = SqliteStore(path, redact=redact)
        store.open()
        per_call, writer_cpu = [], []
        for r in records:
            before = store.writer_cpu_s() or 0.0
            t0 = time.perf_counter()
            store.record(r)
            per_call.append(time.perf_counter() - t0)
            _drain(store)
            writer_cpu.append((store.writer_cpu_s() or 0.0) - before)
        t_drain = time.perf_counter()
        store.shutdown()
        drain_s = time.perf_counter() - t_drain
        db = connect(path)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        tables = _table_bytes(db)
        db.close()
        store_bytes = sum(p.stat().st_size for p in Path(tmp).glob("bench.db*"))
        vacuumed = Path(tmp) / "vacuumed.db"
        db = connect(path)
        db.execute("VACUUM INTO ?", (str(vacuumed),))
        db.close()
        vacuumed_bytes = vacuumed.stat().st_size
    return {
        "turns": n_turns,
        "replies_resent_by_sdk": sdk,
        "final_messages": len(final),
        "final_history_bytes": history_bytes,
        "store_bytes": store_bytes,
        "size_ratio": round(store_bytes / history_bytes, 3),
        "size_ratio_target": 1.5,
        "size_ratio_after_vacuum": round(vacuumed_bytes / history_bytes, 3),
        "table_bytes": tables,
        "record_us_median": round(statistics.median(per_call) * 1e6, 2),
        "record_us_p99": round(sorted(per_call)[int(len(per_call) * 0.99)] * 1e6, 2),
        "writer_cpu_ms_per_turn": writer_ms_at(writer_cpu, CHECKPOINTS),
        "writer_cpu_s_total": round(sum(writer_cpu), 3),
        "drain_s": round(drain_s, 3),
        "write_failures": store.health().write_failures,
    }


def _table_bytes(db: Any) -> dict[str, list[int]]:
    """Per table and index: [bytes in pages, bytes of payload] (dbstat), when available."""
    try:
        rows = db.execute(
            "SELECT name, SUM(pgsize), SUM(payload) FROM dbstat GROUP BY name ORDER BY 2 DESC"
        ).fetchall()
    except Exception:  # SQLite built without dbstat
        return {}
    return {name: [int(size), int(payload)] for name, size, payload in rows[:8]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--redact", action="store_true")
    parser.add_argument(
        "--sdk", action="store_true", help="replies come back re-serialised by the openai SDK"
    )
    args = parser.parse_args(argv)
    figures = run(args.turns, args.redact, args.sdk)
    print(
        f"final history {figures['final_history_bytes']:,} B, store {figures['store_bytes']:,} B,"
        f" ratio {figures['size_ratio']} (target ≤ 1.5); record() median "
        f"{figures['record_us_median']} µs, p99 {figures['record_us_p99']} µs; writer CPU"
        f" per turn (ms, by turn) {figures['writer_cpu_ms_per_turn']},"
        f" total {figures['writer_cpu_s_total']} s",
        file=sys.stderr,
    )
    print(orjson.dumps(figures).decode())
    return 0 if figures["size_ratio"] <= 1.5 else 1


if __name__ == "__main__":
    raise SystemExit(main())
