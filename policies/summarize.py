"""``summarize``: drop the oldest units behind a note an LLM wrote, instead of a digest.

The summary (goal; what was done, with files and code; decisions; current state; next
steps; the user's requests verbatim where short) comes from ``ctx.summarize``. It is
a block of the same note the digest uses (``policies.truncate``): each move of the
cut appends a summary of the newly dropped messages, written with the earlier
blocks as context, and kept in the cut's mark, so later turns replay it without a
call. The note stays within its room (:func:`policies.truncate.note_chars`): when a
new block would overflow it, the earlier blocks and the new one are merged into one
by ``ctx.merge`` (the prefix changes, but only at a move of the cut). A summarizer
that fails or is missing never fails the request: the block is the digest instead,
and the step's note says why.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.base import Mark, Message, PolicyContext
from policies.fitting import NOTE_HEADER, Fitting
from policies.truncate import DigestWriter, Note, Truncate, drop_more, note_chars

SUMMARY_PREFIX = "\n\n— summary of {count:,} message(s):\n"


class SummaryWriter:
    """Blocks written by the summarizer LLM, merged into one when the note is full; the
    digest when it cannot."""

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
        seen = mark.seen if mark is not None else ()
        previous = "".join(blocks).strip() or None
        if ctx.summarize is None:
            self.why = "no summarizer configured"
            return await self.fallback.write(newly, dropped, mark, ctx)
        try:
            text = (await ctx.summarize(newly, previous)).strip()
        except Exception as e:  # injected callable; a failure must never fail the request
            self.why = f"summarizer failed: {type(e).__name__}: {e}"[:300]
            return await self.fallback.write(newly, dropped, mark, ctx)
        if not text:
            self.why = "summarizer returned an empty summary"
            return await self.fallback.write(newly, dropped, mark, ctx)
        block = SUMMARY_PREFIX.format(count=len(newly)) + text
        room = note_chars(ctx) - len(NOTE_HEADER)
        if sum(len(b) for b in blocks) + len(block) <= room:
            self.why = ""
            return Note((*blocks, block), seen)
        return await self._merged([*blocks, block], newly, dropped, mark, ctx)

    async def _merged(
        self, blocks: Sequence[str], newly: Sequence[Message], dropped: Sequence[Message],
        mark: Mark | None, ctx: PolicyContext,
    ) -> Note:  # fmt: skip
        """The note as one summary block over everything dropped, when it fits its room."""
        prefix = SUMMARY_PREFIX.format(count=len(dropped))
        limit = note_chars(ctx) - len(NOTE_HEADER) - len(prefix)
        if ctx.merge is None:
            self.why = "the note is full and no summarizer can merge it"
            return await self.fallback.write(newly, dropped, mark, ctx)
        try:
            text = (await ctx.merge([b.strip() for b in blocks], limit)).strip()
        except Exception as e:  # injected callable; a failure must never fail the request
            self.why = f"merging the full note failed: {type(e).__name__}: {e}"[:300]
            return await self.fallback.write(newly, dropped, mark, ctx)
        if not text or len(text) > limit:
            self.why = (
                f"the merged summary ({len(text):,} characters) exceeds the note's room ({limit:,})"
            )
            return await self.fallback.write(newly, dropped, mark, ctx)
        self.why = ""
        return Note((prefix + text,), mark.seen if mark is not None else ())


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
