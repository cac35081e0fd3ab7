"""``summarize``: drop the oldest units behind a note an LLM wrote, instead of a digest.

The summary (goal; what was done, with files and code; decisions; current state; next
steps; the user's requests verbatim where short) comes from ``ctx.summarize``. It is
a block of the same note the digest uses (``policies.truncate``): each move of the
cut appends a summary of the newly dropped messages, written with the earlier
blocks as context, and kept in the cut's mark, so later turns replay it without a
call. A summarizer that fails or is missing never fails the request: the block is
the digest instead, and the step's note says why.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.base import Mark, Message, PolicyContext
from policies.fitting import Fitting
from policies.truncate import DigestWriter, Note, Truncate, drop_more

SUMMARY_PREFIX = "\n\n— summary of {count:,} message(s):\n"


class SummaryWriter:
    """Blocks written by the summarizer LLM; the digest when it cannot."""

    def __init__(self, reserve_tokens: int) -> None:
        self.reserve_tokens = reserve_tokens
        self.fallback = DigestWriter()
        self.why = ""

    def bound(self, ctx: PolicyContext) -> int:
        return self.reserve_tokens + 16

    async def write(
        self, newly: Sequence[Message], dropped: Sequence[Message], mark: Mark | None,
        ctx: PolicyContext,
    ) -> Note:  # fmt: skip
        blocks = mark.blocks if mark is not None else ()
        previous = "".join(blocks).strip() or None
        if ctx.summarize is None:
            self.why = "no summarizer configured"
        else:
            try:
                text = await ctx.summarize(newly, previous)
            except Exception as e:  # injected callable; a failure must never fail the request
                self.why = f"summarizer failed: {type(e).__name__}: {e}"[:300]
            else:
                if text.strip():
                    self.why = ""
                    block = SUMMARY_PREFIX.format(count=len(newly)) + text.strip()
                    seen = mark.seen if mark is not None else ()
                    return Note((*blocks, block), seen)
                self.why = "summarizer returned an empty summary"
        return await self.fallback.write(newly, dropped, mark, ctx)


class Summarize(Truncate):
    """Truncate whose note blocks the summarizer writes."""

    name = "summarize"

    def __init__(self, reserve_tokens: int = 1024) -> None:
        self.reserve_tokens = reserve_tokens
        """Room kept for a summary not yet written (the summarizer's max_tokens)."""

    async def extend(self, fit: Fitting, ctx: PolicyContext) -> str:
        writer = SummaryWriter(self.reserve_tokens)
        n = await drop_more(fit, ctx, writer, recent=False)
        if not n:
            return ""
        if writer.why:
            return f"dropped {n} old message(s) behind the digest (summary not used: {writer.why})"
        return f"summarized {n} old message(s)"
