"""``summarize``: replace the oldest turns with one structured summary message.

The summary (goal; what was done, incl. files and code; key decisions; current
state; open items and next steps; the user's requests verbatim where short) comes
from ``ctx.summarize``. It is cached in the conversation's ``CutState``: while the
history still starts with the summarized prefix the summary is reused without a
call, and when the cut must move the cached summary is *extended* with only the
newly dropped turns. A summarizer failure never fails the request: the policy
returns the messages unchanged, says why in ``note``, and the chain goes on.

Like truncate's note, the summary is a ``user`` message (see ``policies.truncate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from policies.base import CutState, Message, PolicyContext, PolicyResult
from policies.cuts import prefix_hash, previous_cut, search_cut, weight
from policies.units import HANDOFF_MARK, Region, as_dicts, assemble, region


def summary_message(count: int, tokens: int, summary: str) -> dict[str, Any]:
    """The message standing where ``count`` summarized messages were."""
    head = f"{HANDOFF_MARK}summary of {count:,} earlier messages ({tokens:,} tokens)]"
    return {"role": "user", "content": f"{head}\n\n{summary}"}


class Summarize:
    """Summarize the oldest droppable units, reusing and extending cached summaries."""

    name = "summarize"

    def __init__(self, reserve_tokens: int = 1024):
        self.reserve_tokens = reserve_tokens
        """Room kept for a summary not yet written (the summarizer's max_tokens)."""

    async def apply(self, messages: Sequence[Message], ctx: PolicyContext) -> PolicyResult:
        msgs = as_dicts(messages)
        if ctx.count(msgs) <= ctx.budget:
            return PolicyResult(msgs, changed=False)
        if ctx.summarize is None:
            return PolicyResult(msgs, changed=False, note="no summarizer configured")
        reg = region(msgs)
        if not reg.units:
            return PolicyResult(msgs, changed=False, note="nothing to summarize")
        prev = previous_cut(msgs, reg, ctx.previous, self.name, ctx.memo)
        old = ctx.previous.summary if prev is not None and ctx.previous else None
        if prev is not None and old is not None:
            reused = self._build(msgs, reg, prev, old, ctx)
            if ctx.count(reused) <= ctx.budget:
                return self._result(msgs, reused, reg, prev, old, ctx, "reused cached summary")
        start = prev if old is not None and prev is not None else 0
        placeholder = " ".join(["word"] * self.reserve_tokens)
        points = [p for p in reg.points if p > start]
        if not points:  # a retry aiming lower: nothing more is left to summarize
            return PolicyResult(msgs, changed=False, note="nothing more to summarize")
        k = search_cut(ctx, points, lambda p: self._build(msgs, reg, p, placeholder, ctx))
        todo = [msgs[i] for i in reg.dropped(k)[start:]]
        try:
            summary = await ctx.summarize(todo, old if start else None)
        except Exception as e:  # injected callable; a failure must never fail the request
            return PolicyResult(msgs, changed=False, note=f"summarizer failed: {e!r}"[:300])
        if not summary.strip():
            return PolicyResult(msgs, changed=False, note="summarizer returned an empty summary")
        out = self._build(msgs, reg, k, summary, ctx)
        how = "extended cached summary" if start else "new summary"
        return self._result(msgs, out, reg, k, summary, ctx, how)

    def replay(self, messages: Sequence[Message], ctx: PolicyContext) -> PolicyResult:
        """Re-apply the previous turn's summary if still valid, whether or not it fits."""
        msgs = as_dicts(messages)
        reg = region(msgs)
        k = previous_cut(msgs, reg, ctx.previous, self.name, ctx.memo)
        if k is None or ctx.previous is None or ctx.previous.summary is None:
            return PolicyResult(msgs, changed=False)
        summary = ctx.previous.summary
        out = self._build(msgs, reg, k, summary, ctx)
        return self._result(msgs, out, reg, k, summary, ctx, "reused cached summary")

    @staticmethod
    def _build(
        msgs: list[dict[str, Any]], reg: Region, k: int, summary: str, ctx: PolicyContext
    ) -> list[dict[str, Any]]:
        dropped = reg.dropped(k)
        tokens = weight(ctx, [msgs[i] for i in dropped])
        return assemble(msgs, dropped, summary_message(len(dropped), tokens, summary))

    def _result(
        self,
        msgs: list[dict[str, Any]],
        out: list[dict[str, Any]],
        reg: Region,
        k: int,
        summary: str,
        ctx: PolicyContext,
        how: str,
    ) -> PolicyResult:
        state = CutState(
            cut=k,
            summary=summary,
            prefix_hash=prefix_hash(msgs[: reg.end(k)], ctx.memo),
            policy=self.name,
        )
        return PolicyResult(
            out,
            changed=True,
            removed_messages=k,
            removed_tokens=ctx.count(msgs) - ctx.count(out),
            note=f"summarized {k} oldest message(s) ({how})",
            cut=state,
        )
