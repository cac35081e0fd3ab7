"""Store writer CPU per turn: what snapshots take from the proxy's one core.

Three workloads, each through a real :class:`SqliteStore`, reading the writer
thread's CPU clock (``SqliteStore.writer_cpu_s``):

* ``distinct``: every request a new two-message conversation (a ~1 KB user
  message), recorded at ``--rate`` turns/s as a loaded proxy would;
* ``identical``: the same two messages again and again (a client regenerating,
  or a load generator), at ``--rate``; the cost must stay flat;
* ``continuation``: ``bench_store``'s 500-turn conversation, one turn at a time,
  drained before the next (a commit per turn); the median of the last 10 turns.

For the paced workloads it prints the writer's CPU per turn over the whole run
(indexing and commits included, as the core pays them) and over the last third
(flatness). A JSON line of the figures comes last.

    python -m bench.bench_store_writer [--turns 3000] [--rate 1000] [--only distinct]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from bench.bench_store import turns as conversation_turns
from proxy.decide.decision import Decision
from proxy.store.base import TurnRecord
from proxy.store.db import connect
from proxy.store.sqlite import SqliteStore

SYSTEM = {"role": "system", "content": "You are a helpful assistant. Be brief."}
REPLY = {"role": "assistant", "content": "Hello from the bench upstream."}
WORDS = [
    "the",
    "model",
    "reads",
    "a",
    "file",
    "and",
    "returns",
    "the",
    "value",
    "of",
    "each",
    "token",
    "in",
    "its",
    "window",
]


def _record(messages: list[dict[str, Any]]) -> TurnRecord:
    return TurnRecord(
        workspace="bench",
        started_at=time.time(),
        model="gpt-4o-mini",
        upstream="up",
        messages=messages,
        status=200,
        latency_ms=1.0,
        decision=Decision(action="passthrough", window=128_000, budget=120_000, tokens=300),
        reply=REPLY,
        usage={"prompt_tokens": 300, "completion_tokens": 6, "total_tokens": 306},
        finish_reason="stop",
        request_params={"max_tokens": 16},
    )


def distinct(i: int) -> TurnRecord:
    """A new conversation: a ~1 KB user message no other turn has."""
    text = f"request {i}: " + " ".join(
        f"{WORDS[(i * 7 + k) % len(WORDS)]}{(i + k) % 97}" for k in range(150)
    )
    return _record([SYSTEM, {"role": "user", "content": text}])


def identical(i: int) -> TurnRecord:
    """The same request every time (a regenerate)."""
    return _record([SYSTEM, {"role": "user", "content": "hello " * 150}])


def _drain(store: SqliteStore) -> None:
    while store.health().queue_depth:
        time.sleep(0.001)


def paced(make: Callable[[int], TurnRecord], n: int, rate: float) -> dict[str, Any]:
    """Record ``n`` turns at ``rate``/s; the writer's CPU per turn, overall and late."""
    with tempfile.TemporaryDirectory() as tmp:
        store = SqliteStore(Path(tmp) / "w.db")
        store.open()
        records = [make(i) for i in range(n)]  # built up front: the proxy pays for these
        marks: list[float] = []
        t0 = time.perf_counter()
        third = n // 3
        for i, r in enumerate(records):
            if i in (0, 2 * third):
                _drain(store)
                marks.append(store.writer_cpu_s() or 0.0)
            store.record(r)
            delay = t0 + (i + 1) / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        _drain(store)
        marks.append(store.writer_cpu_s() or 0.0)
        store.shutdown()  # indexes what is left: counted below
        total = marks[-1] - marks[0]
        failures = store.health().write_failures
    return {
        "turns": n,
        "writer_us_per_turn": round(total / n * 1e6, 1),
        "writer_us_per_turn_last_third": round((marks[-1] - marks[-2]) / (n - 2 * third) * 1e6, 1),
        "write_failures": failures,
    }


def continuation(n: int) -> dict[str, Any]:
    """``bench_store``'s conversation, drained per turn: median writer CPU of the last 10."""
    records = conversation_turns(n)
    per_turn: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "c.db"
        store = SqliteStore(path)
        store.open()
        for r in records:
            before = store.writer_cpu_s() or 0.0
            store.record(r)
            _drain(store)
            per_turn.append((store.writer_cpu_s() or 0.0) - before)
        store.shutdown()
        db = connect(path)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.close()
        size = sum(p.stat().st_size for p in Path(tmp).glob("c.db*"))
    final = [*records[-1].messages, records[-1].reply]
    return {
        "turns": n,
        "writer_us_median_last_10": round(statistics.median(per_turn[-10:]) * 1e6, 1),
        "writer_us_median_all": round(statistics.median(per_turn) * 1e6, 1),
        "size_ratio": round(size / len(orjson.dumps(final)), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--conversation-turns", type=int, default=500)
    parser.add_argument("--only", choices=["distinct", "identical", "continuation"])
    args = parser.parse_args(argv)
    figures: dict[str, Any] = {}
    if args.only in (None, "distinct"):
        figures["distinct"] = paced(distinct, args.turns, args.rate)
    if args.only in (None, "identical"):
        figures["identical"] = paced(identical, args.turns, args.rate)
    if args.only in (None, "continuation"):
        figures["continuation"] = continuation(args.conversation_turns)
    for name, f in figures.items():
        print(f"{name}: {f}", file=sys.stderr)
    print(orjson.dumps(figures).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
