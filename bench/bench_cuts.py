"""Cache-stable cuts: replay a 300-turn agent conversation into a small window.

Each turn sends two requests as an agent client would: after the user's message,
and after the tool results (in-flight tool calls in the tail). The CutState of each
request is carried to the next, as the proxy does. Reported: the share of
compressed requests whose forwarded prefix (everything before the messages new
since the previous request) equals the previous forwarded request, and the number
of calls to a fake deterministic summarizer.

    python -m bench.bench_cuts [--turns 300] [--budget 8000] [--step 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import random
from collections.abc import Sequence
from typing import Any

import orjson

from policies.base import CutState, Message, Policy, PolicyContext
from policies.chain import compress
from policies.elide_tool_results import ElideToolResults
from policies.summarize import Summarize
from policies.truncate import Truncate


class Counter:
    """Fake counter (4 + bytes/4 per message, 3 per prompt), memoised per message object."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[Message, int]] = {}

    def __call__(self, messages: Sequence[Message]) -> int:
        total = 3
        for m in messages:
            hit = self._memo.get(id(m))
            if hit is None or hit[0] is not m:
                hit = (m, 4 + len(orjson.dumps(m)) // 4)
                self._memo[id(m)] = hit
            total += hit[1]
        return total


class FakeSummarizer:
    """Deterministic summarizer that counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: Sequence[Message], previous: str | None) -> str:
        self.calls += 1
        users = sum(1 for m in messages if m.get("role") == "user")
        return f"## Goal\nbench\n## Done\n{users} more user turns (call {self.calls})"


def _tool_tokens(rng: random.Random) -> int:
    """Tool output sizes: mostly small, some medium, a few huge."""
    r = rng.random()
    if r < 0.70:
        return rng.randint(20, 150)
    if r < 0.95:
        return rng.randint(200, 800)
    return rng.randint(2000, 6000)


def turn(t: int, rng: random.Random) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One agent turn: (user + assistant tool calls + results, final answer)."""
    user = {"role": "user", "content": f"Step {t}: " + "please look at this " * rng.randint(2, 8)}
    ids = [f"call_{t}_{j}" for j in range(rng.randint(1, 2))]
    calls = [
        {"id": i, "type": "function", "function": {"name": "shell", "arguments": '{"cmd":"ls"}'}}
        for i in ids
    ]
    first: list[dict[str, Any]] = [
        user,
        {"role": "assistant", "content": None, "tool_calls": calls},
    ]
    first += [
        {"role": "tool", "tool_call_id": i, "content": "out " * _tool_tokens(rng)} for i in ids
    ]
    answer = {"role": "assistant", "content": f"Done with step {t}. " + "ok " * rng.randint(5, 40)}
    return first, [answer]


async def replay(turns: int, budget: int, step: float, seed: int = 7) -> dict[str, Any]:
    rng = random.Random(seed)
    count, summarizer = Counter(), FakeSummarizer()
    chain: list[Policy] = [ElideToolResults(), Summarize(reserve_tokens=256), Truncate()]
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent. " * 20}]
    state: CutState | None = None
    prev_out: list[dict[str, Any]] | None = None
    compressed = kept = requests = 0
    answer: list[dict[str, Any]] = []
    for t in range(turns):
        first, next_answer = turn(t, rng)
        for new in ([*answer, *first[:1]], first[1:]):
            history += new
            requests += 1
            ctx = PolicyContext(budget, count, summarizer, state, int(step * budget))
            result = await compress(history, ctx, chain)
            state = result.cut
            if result.steps:
                compressed += 1
                prefix = result.messages[: len(result.messages) - len(new)]
                kept += prefix == prev_out
            prev_out = result.messages
        answer = next_answer
    return {
        "turns": turns,
        "requests": requests,
        "budget": budget,
        "step": step,
        "compressed_requests": compressed,
        "prefix_kept_share": round(kept / compressed, 4) if compressed else 1.0,
        "summarizer_calls": summarizer.calls,
        "summarizer_calls_per_10_turns": round(10 * summarizer.calls / turns, 3),
    }


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--turns", type=int, default=300)
    p.add_argument("--budget", type=int, default=8000)
    p.add_argument("--step", type=float, default=0.2)
    a = p.parse_args(argv)
    figures = asyncio.run(replay(a.turns, a.budget, a.step))
    ok = figures["prefix_kept_share"] >= 0.9 and figures["summarizer_calls_per_10_turns"] < 1
    print(orjson.dumps({**figures, "targets_met": ok}).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
