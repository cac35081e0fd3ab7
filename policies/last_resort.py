"""What is given up after the configured chain, only when it was not enough.

In order: the note's digest shrinks to a count; the recent tool results but the
newest are stubbed; recent units but the last are dropped; recent tool-call
arguments are slimmed; the newest tool results (or reply) keep their head and tail;
and the newest user message (a client's own compaction request can carry a whole
history as text) keeps its head and tail. Each aims at the budget itself, not the
low-water mark (the chain passes them a context without a target): this is the part
of the conversation the model needs most. What still does not fit after them is the
system prompt and the tool definitions alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from policies import digest
from policies.base import Mark, Message, PolicyContext
from policies.elide_arguments import ElideArguments
from policies.elide_tool_results import ElideToolResults
from policies.fitting import DROP, NOTE_HEADER, Fitting
from policies.rewriting import RewriteLevel
from policies.trim import head_tail, map_text, text_of
from policies.truncate import Note, drop_more, note_chars
from policies.units import TOOL_ROLES

MIN_KEEP = 200
"""The fewest characters a last-resort cut keeps of a message."""


class CountOnly:
    """A note block that only says how many more messages went (recent ones, which a
    digest of their own would not make smaller)."""

    def bound(self, ctx: PolicyContext) -> int:
        return 24

    async def write(
        self, newly: Sequence[Message], dropped: Sequence[Message], mark: Mark | None,
        ctx: PolicyContext,
    ) -> Note:  # fmt: skip
        if mark is None:
            return Note((f"\n\n— {len(newly):,} message(s).",))
        return Note((*mark.blocks, f"\n\n— {len(newly):,} more message(s)."), mark.seen, mark.keep)


class ShrinkNote:
    """Rewrite the note's digest in half the room, its most valuable items kept, until
    the prompt fits or the note is only the count of what it stands for."""

    name = "shrink-note"

    async def extend(self, fit: Fitting, ctx: PolicyContext) -> str:
        mark = fit.marks.get(DROP)
        if mark is None or fit.tokens() <= ctx.budget:
            return ""
        gone = [fit.msgs[i] for i in fit.dropped()]
        room = sum(len(b) for b in mark.blocks)
        while fit.tokens() > ctx.budget and room > MIN_KEEP:
            room //= 2
            text, seen = digest.block(gone, (), room)
            fit.mark(DROP, mark.upto, blocks=(text,), seen=seen, keep=max(1, room))
        if fit.tokens() > ctx.budget:
            fit.mark(DROP, mark.upto, blocks=(f"\n\n— {len(gone):,} message(s).",), keep=1)
            return "shrank the note to a count"
        return f"rewrote the note's digest in {room:,} characters"


def regrow_note(fit: Fitting, ctx: PolicyContext) -> str:
    """Write a note shrunk this turn back in the largest room that fits now, whole
    first: the shrink runs before the recent results are stubbed, and once they are,
    the room it freed may be more than the digest needed. Returns a note on what it
    did, "" when the note stays as it is."""
    mark = fit.marks.get(DROP)
    if mark is None or not mark.keep or fit.tokens() > ctx.budget:
        return ""
    gone = [fit.msgs[i] for i in fit.dropped()]
    full = note_chars(ctx) - len(NOTE_HEADER)
    room = full
    while room > max(mark.keep, MIN_KEEP):
        text, seen = digest.block(gone, (), room)
        fit.mark(DROP, mark.upto, blocks=(text,), seen=seen, keep=0 if room == full else room)
        if fit.tokens() <= ctx.budget:
            if room == full:
                return "wrote the note's digest whole again"
            return f"rewrote the note's digest in {room:,} characters"
        room //= 2
    fit.marks[DROP] = mark
    return ""


class ElideRecentResults(ElideToolResults):
    """Stub recent tool results, oldest first, all but the newest."""

    name = "elide-recent-results"

    def applies(self, fit: Fitting, i: int, mark: Mark) -> bool:
        return i < self.limit(fit) and super().applies(fit, i, mark)

    def limit(self, fit: Fitting) -> int:
        tools = [i for i, m in enumerate(fit.msgs) if m.get("role") in TOOL_ROLES]
        return tools[-1] if tools else 0


class DropRecent:
    """Drop recent units, oldest first, all but the last."""

    name = "drop-recent"

    async def extend(self, fit: Fitting, ctx: PolicyContext) -> str:
        n = await drop_more(fit, ctx, CountOnly(), recent=True)
        return f"dropped {n} recent message(s)" if n else ""


class _CutToFit(RewriteLevel):
    """Head and tail of one kind of newest message, cut once to what fits."""

    def rewrite(self, message: Message, mark: Mark, fit: Fitting) -> dict[str, Any] | None:
        return map_text(message, lambda t: head_tail(t, mark.keep))

    async def extend(self, fit: Fitting, ctx: PolicyContext) -> str:
        here = Mark(len(fit.msgs), "", spare=fit.shape.newest_user)
        targets = [i for i in range(len(fit.msgs)) if self.applies(fit, i, here)]
        excess = fit.tokens() - ctx.budget
        if excess <= 0 or not targets:
            return ""
        i = max(targets, key=lambda j: len(text_of(fit.msgs[j].get("content"))))
        text = text_of(fit.version(i).get("content"))
        per_token = len(text) / max(1, fit.size(fit.version(i)))
        keep = len(text)
        while keep > MIN_KEEP:
            keep = max(MIN_KEEP, int(keep - (excess + 32) * per_token))
            fit.mark(self.name, max(targets) + 1, keep=keep)
            excess = fit.tokens() - ctx.budget
            if excess <= 0:
                break
        return f"cut the middle of a newest message to {keep:,} characters"


class ElideRecentArguments(ElideArguments):
    """Slim the bulky arguments of recent tool calls, the last unit's included."""

    name = "elide-recent-arguments"

    def limit(self, fit: Fitting) -> int:
        return len(fit.msgs)


class CutNewestResults(_CutToFit):
    """The newest tool results (or assistant text), in the last unit, when they alone
    are too big."""

    name = "cut-newest-results"

    def applies(self, fit: Fitting, i: int, mark: Mark) -> bool:
        last = fit.shape.units[-1] if fit.shape.units else range(0)
        role = fit.msgs[i].get("role")
        return i in last and (role in TOOL_ROLES or role == "assistant")


class CutNewestUser(_CutToFit):
    """The newest user message, when it alone is too big."""

    name = "cut-newest-user"

    def applies(self, fit: Fitting, i: int, mark: Mark) -> bool:
        return i == mark.spare


LAST_RESORT = (
    ShrinkNote(),
    ElideRecentResults(),
    DropRecent(),
    ElideRecentArguments(),
    CutNewestResults(),
    CutNewestUser(),
)
