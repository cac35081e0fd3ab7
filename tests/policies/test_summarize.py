"""summarize: one summary message, cached and extended, never raising."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from policies.base import Message, PolicyContext
from policies.summarize import Summarize
from tests.strategies import check_invariants, count


def _conv(n: int) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "s"}]
    for i in range(n):
        msgs += [
            {"role": "user", "content": f"u{i} " * 40},
            {"role": "assistant", "content": f"a{i} " * 40},
        ]
    return [*msgs, {"role": "user", "content": "now"}]


def test_summary_replaces_oldest_turns() -> None:
    """The oldest turns go into one user summary message; the summarizer sees only them."""
    seen: list[list[Message]] = []

    async def summarizer(messages: Sequence[Message], previous: str | None) -> str:
        seen.append(list(messages))
        return "## Goal\nship it"

    conv = _conv(10)
    ctx = PolicyContext(600, count, summarizer, step_tokens=100)
    r = asyncio.run(Summarize(50).apply(conv, ctx))
    assert r.changed and r.cut is not None and r.cut.summary == "## Goal\nship it"
    summary = r.messages[1]
    assert summary["role"] == "user" and summary["content"].startswith("[handoff: summary of ")
    assert summary["content"].endswith("## Goal\nship it")
    assert len(seen[0]) == r.removed_messages and seen[0] == conv[1 : 1 + r.removed_messages]
    check_invariants(conv, r.messages, 600)


def test_summarizer_failure_returns_unchanged_with_reason() -> None:
    """A failing summarizer leaves the messages unchanged and says why."""

    async def summarizer(messages: Sequence[Message], previous: str | None) -> str:
        raise TimeoutError("slow")

    conv = _conv(10)
    r = asyncio.run(Summarize().apply(conv, PolicyContext(600, count, summarizer)))
    assert not r.changed and r.messages == conv and "summarizer failed" in r.note


def test_without_summarizer_is_a_no_op() -> None:
    """No summarizer configured: unchanged, with a note."""
    r = asyncio.run(Summarize().apply(_conv(10), PolicyContext(600, count)))
    assert not r.changed and r.note == "no summarizer configured"
