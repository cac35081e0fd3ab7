"""What memories and recall add to a turn: the keeper's trigger check and the recaller's
early return, for a long conversation, beside a bare ``orjson.loads`` of its body.

``python -m bench.bench_memory``: a 1,500-message history resent with one more turn each
time (the keeper counts only the new messages), medians of 2,000 turns.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import orjson

from proxy.config import Settings
from proxy.decide.recall import Recaller
from proxy.ingress.chat_request import ChatRequest
from proxy.server.memory_keeper import MemoryKeeper
from proxy.store.base import TurnRecord


def _history(n: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent. " * 40}]
    for i in range(n // 2):
        out.append({"role": "user", "content": f"step {i}: " + "words " * 40})
        out.append({"role": "assistant", "content": f"done {i}: " + "more " * 40})
    return out


def _median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6


async def main() -> None:
    settings = Settings()
    keeper = MemoryKeeper(settings, store=None, reader=None)  # type: ignore[arg-type]
    recaller = Recaller(settings.recall, source=None)  # type: ignore[arg-type]
    history = _history(1500)
    note, recall, parse = [], [], []
    for i in range(2000):
        history.append({"role": "user", "content": f"more {i}"})
        body = orjson.dumps({"model": "gpt-4o", "messages": history})
        turn = TurnRecord("w", time.time(), "gpt-4o", "u", tuple(history), status=200)
        req = ChatRequest("gpt-4o", turn.messages, {}, body)  # type: ignore[arg-type]
        t0 = time.perf_counter()
        orjson.loads(body)
        t1 = time.perf_counter()
        keeper.note(turn, {})
        t2 = time.perf_counter()
        await recaller.apply(req, "w", {}, None)  # type: ignore[arg-type]
        t3 = time.perf_counter()
        parse.append(t1 - t0)
        note.append(t2 - t1)
        recall.append(t3 - t2)
        while not keeper.queue.empty():  # (due every 8 turns: what the task would take)
            keeper.queue.get_nowait()
    p, n, r = _median_us(parse), _median_us(note), _median_us(recall)
    print(f"orjson.loads of the body: {p:,.1f} µs")
    print(f"keeper.note: {n:,.1f} µs ({n / p:.3f}× the parse)")
    print(f"recaller.apply (nothing recalled): {r:,.1f} µs ({r / p:.3f}× the parse)")


if __name__ == "__main__":
    asyncio.run(main())
