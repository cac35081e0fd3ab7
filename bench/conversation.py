"""The snapshot benchmark's workload: one long coding-assistant conversation, replayed.

Turn ``i`` sends the whole history so far plus a new user message, as a chat client
does; every other turn the assistant called a tool and read its result. The system
prompt carries :data:`MARKER`, which the load generator rewrites per replay so that
each replay is a conversation of its own (a resend of an identical history would be
a regenerate, a different path through the store).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from bench.bench_store import WORDS

MARKER = "ROUND-0000"
MODEL = "gpt-4.1"  # a 1M-token window: the whole conversation passes through unchanged


def _prose(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi))).capitalize() + "."


def turns(n: int, seed: int = 11) -> list[list[dict[str, Any]]]:
    """The messages each of ``n`` turns adds: last turn's reply, then the user's."""
    rng = random.Random(seed)
    added: list[list[dict[str, Any]]] = []
    pending: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are a coding assistant ({MARKER}). " + _prose(rng, 60, 60)}
    ]  # fmt: skip
    for i in range(n):
        pending.append({"role": "user", "content": _prose(rng, 10, 60)})
        added.append(pending)
        pending = []
        if i % 2:
            call = {"id": f"call_{i:04d}", "type": "function",
                    "function": {"name": "read_file",
                                 "arguments": json.dumps({"path": f"src/mod_{i}.py"})}}  # fmt: skip
            pending += [
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": call["id"], "content": _prose(rng, 40, 120)},
            ]
        pending.append({"role": "assistant", "content": _prose(rng, 20, 100)})
    return added


def write(path: Path, n: int = 500) -> dict[str, Any]:
    """Write the conversation for ``bench.loadgen``'s ``replay``; returns its sizes."""
    added = turns(n)
    path.write_text(json.dumps({"model": MODEL, "turns": added}))
    history = [m for turn in added for m in turn]
    final = len(json.dumps({"model": MODEL, "messages": history}).encode())
    return {"turns": n, "messages": len(history), "final_history_bytes": final}
