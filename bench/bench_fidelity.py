"""What the model still knows: facts planted in a long agent session, squeezed into 8k.

A seeded 300-request agent session (``bench.sessions.agent``: tasks of one user message
and 10-30 tool rounds each) plants facts where a compaction summary must keep them:
the user's requests (a port for each task), the files the tools touched, the commands
they ran, and the decisions the assistant stated. The session is replayed through
the decision engine with the default chain and no LLM into an 8k window, and every
compressed request's forwarded messages are searched for the facts planted before
it. Reported: the share of facts present over all those requests, per kind, the
worst request's, and whether the system prompt and the newest user message were
always sent whole. Target: 95% of the facts.

    python -m bench.bench_fidelity [--requests 300] [--window 8192] [--seed 7]

The last line of output is the figures as JSON.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import orjson

from bench.bench_cuts import engine_for
from bench.sessions import Facts, Msg, agent
from proxy.ingress.chat_completions import parse_chat

TARGET = 0.95
SYSTEM = {"role": "system", "content": "You are a careful coding agent. " * 30}


def _present(facts: Facts, text: str) -> dict[str, tuple[int, int]]:
    """(present, planted) per kind, for the facts planted so far."""
    return {
        kind: (sum(orjson.dumps(f).decode()[1:-1] in text for f in found), len(found))
        for kind, found in facts.by_kind.items()
    }


async def squeeze(requests: int, window: int, seed: int) -> dict[str, Any]:
    """Replay the session; for every compressed request, which facts planted before it
    are in what was sent."""
    engine, up = engine_for(window)
    facts = Facts()
    history: list[Msg] = [SYSTEM]
    totals: dict[str, list[int]] = {}
    shares: list[float] = []
    whole = True
    plan = None
    for new in agent(seed, requests, facts):
        history = [*history, *new]
        req = parse_chat(orjson.dumps({"model": "exact-model", "messages": history}))
        plan = await engine.plan(req, up)
        assert plan.decision is not None
        if plan.decision.action != "compressed":
            continue
        sent = orjson.loads(plan.body)["messages"]
        newest = next(m for m in reversed(history) if m["role"] == "user")
        whole = whole and sent[0] == SYSTEM and newest in sent
        found = _present(facts, orjson.dumps(sent).decode())
        for kind, (present, planted) in found.items():
            row = totals.setdefault(kind, [0, 0])
            row[0] += present
            row[1] += planted
        present = sum(p for p, _ in found.values())
        shares.append(present / max(1, sum(n for _, n in found.values())))
    assert plan is not None and plan.decision is not None
    kept = sum(p for p, _ in totals.values()) / max(1, sum(n for _, n in totals.values()))
    return {
        "requests": requests,
        "window": window,
        "history_tokens": plan.decision.tokens,
        "forwarded_tokens": plan.decision.forwarded_tokens,
        "facts": sum(len(v) for v in facts.by_kind.values()),
        "compressed_requests": len(shares),
        "kept_share": round(kept, 4),
        "worst_request_share": round(min(shares), 4) if shares else 1.0,
        "last_request_share": round(shares[-1], 4) if shares else 1.0,
        "by_kind": {k: round(p / n, 4) for k, (p, n) in totals.items()},
        "system_prompt_and_newest_user_whole": whole,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--requests", type=int, default=300)
    p.add_argument("--window", type=int, default=8192)
    p.add_argument("--seed", type=int, default=7)
    a = p.parse_args(argv)
    r = asyncio.run(squeeze(a.requests, a.window, a.seed))
    print(
        f"{r['facts']} facts planted in {r['requests']} requests ({r['history_tokens']:,} "
        f"tokens at the end); over {r['compressed_requests']} compressed requests "
        f"{100 * r['kept_share']:.1f}% of the facts planted before each were sent "
        f"(worst request {100 * r['worst_request_share']:.1f}%, "
        f"last {100 * r['last_request_share']:.1f}%)"
    )
    for kind, share in r["by_kind"].items():
        print(f"  {kind:<20} {100 * share:5.1f}%")
    print(f"  system prompt and newest user message always whole: "
          f"{r['system_prompt_and_newest_user_whole']}")  # fmt: skip
    ok = r["kept_share"] >= TARGET and r["system_prompt_and_newest_user_whole"]
    print(orjson.dumps({**r, "target": TARGET, "targets_met": ok}).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
