"""The summary note stays within its room across many moves of the cut."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from policies.base import CutState, Message, PolicyContext
from policies.chain import compress
from policies.elide_tool_results import ElideToolResults
from policies.fitting import DROP, NOTE_HEADER
from policies.summarize import Summarize
from policies.truncate import Truncate, note_chars
from tests.strategies import count


def _conv(turns: int) -> list[dict[str, str]]:
    conv = [{"role": "system", "content": "You help."}]
    for i in range(turns):
        conv += [
            {"role": "user", "content": f"request {i}: " + "words " * 40},
            {"role": "assistant", "content": f"answer {i}: " + "more " * 40},
        ]
    return conv


def test_the_note_never_exceeds_its_room() -> None:
    """Each move appends a summary block until the next would overflow; then all blocks
    are merged into one, so the note never holds more than ``note_chars``."""
    merges: list[int] = []

    async def summarize(messages: Sequence[Message], previous: str | None) -> str:
        return f"summary of {len(messages)} messages " + "x" * 300

    async def merge(texts: Sequence[str], limit: int) -> str:
        merges.append(len(texts))
        return ("merged " + " | ".join(t[:40] for t in texts))[:limit]

    chain = [ElideToolResults(), Summarize(64), Truncate()]
    cut: CutState | None = None
    budget = 3000
    for turns in range(10, 80, 3):
        ctx = PolicyContext(budget, count, target=2000, summarize=summarize, merge=merge,
                            previous=cut)  # fmt: skip
        out = asyncio.run(compress(_conv(turns), ctx, chain))
        cut = out.cut or cut
        notes = [m["content"] for m in out.messages if str(m["content"]).startswith(NOTE_HEADER)]
        assert all(len(n) <= note_chars(ctx) for n in notes)
        step = next((s for s in out.steps if s.policy == "summarize"), None)
        assert step is None or "summary not used" not in step.note, step
    assert merges, "the note never filled up: the test does not test the merge"
    assert cut is not None and len(cut.marks[DROP].blocks) >= 1


def test_a_failed_merge_falls_back_to_the_digest_and_says_why() -> None:
    """A full note whose merge fails is the digest, still within its room."""

    async def summarize(messages: Sequence[Message], previous: str | None) -> str:
        return "s" * 5000  # alone over the note's room

    async def merge(texts: Sequence[str], limit: int) -> str:
        raise TimeoutError("slow")

    ctx = PolicyContext(3000, count, target=2000, summarize=summarize, merge=merge)
    out = asyncio.run(compress(_conv(30), ctx, [Summarize(64), Truncate()]))
    step = next(s for s in out.steps if s.policy == "summarize")
    assert "summary not used: merging the full note failed: TimeoutError" in step.note
    notes = [m["content"] for m in out.messages if str(m["content"]).startswith(NOTE_HEADER)]
    assert notes and all(len(n) <= note_chars(ctx) for n in notes)
