"""Helpers shared by the store tests: build turns and seed a store (no tests here)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proxy.decide.decision import Decision
from proxy.store.base import TurnRecord
from proxy.store.sqlite import SqliteStore

Msg = dict[str, Any]


def turn(messages: Sequence[Msg], reply: Msg | None = None, **kw: Any) -> TurnRecord:
    """A TurnRecord with sensible defaults."""
    base: dict[str, Any] = {
        "workspace": "ws",
        "started_at": 1_700_000_000.0,
        "model": "gpt-4o",
        "upstream": "openai",
        "status": 200,
    }
    base.update(kw)
    return TurnRecord(messages=list(messages), reply=reply, **base)


def write(path: Path, turns: Sequence[TurnRecord], **kw: Any) -> SqliteStore:
    """Record ``turns`` through a real store and drain it."""
    store = SqliteStore(path, **kw)
    store.open()
    for t in turns:
        store.record(t)
    store.shutdown()
    return store


def conversation(n: int, *, model_for: Any = None, t0: float = 1_700_000_000.0) -> list[TurnRecord]:
    """``n`` turns of one growing conversation, with a tool call every third turn."""
    history: list[Msg] = [{"role": "system", "content": "You are terse."}]
    out = []
    for i in range(n):
        history.append({"role": "user", "content": f"question {i}: what about kiwis number {i}?"})
        if i % 3 == 2:
            reply: Msg = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call_{i}",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": f'{{"q": {i}}}'},
                    }
                ],
            }
        else:
            reply = {"role": "assistant", "content": f"answer {i}"}
        model = model_for(i) if model_for else "gpt-4o"
        decision = Decision(action="passthrough", window=128000, tokens=20 * (i + 1))
        out.append(turn(history, reply, model=model, started_at=t0 + i, decision=decision))
        history = [*history, reply]
        if i % 3 == 2:
            history.append({"role": "tool", "tool_call_id": f"call_{i}", "content": f"kiwi {i}"})
    return out


def compressed(history: Sequence[Msg], reply: Msg, **kw: Any) -> TurnRecord:
    """A turn whose middle was replaced by a summary."""
    fwd = [
        history[0],
        {"role": "system", "content": "Summary: kiwis were discussed."},
        *history[-2:],
    ]
    decision = Decision(
        action="compressed",
        window=4096,
        budget=3000,
        tokens=5000,
        forwarded_tokens=900,
        policies=("summarize",),
        steps=({"policy": "summarize", "removed_messages": len(history) - 3},),
    )
    return turn(history, reply, forwarded=fwd, decision=decision, **kw)
