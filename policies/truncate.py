"""``truncate``: drop the oldest whole units; one note stands where they were.

The note is a ``user`` message, not ``system``: several strict chat templates (Gemma,
Qwen and others behind llama.cpp or vLLM) reject a system message that is not first,
while a user message is accepted anywhere by every OpenAI-compatible upstream. It
carries a digest of what the dropped messages held (``policies.digest``), one block
per move of the cut, appended, within a size that scales with the budget; when a new
block would not fit, the digest is rewritten once as one block over everything
dropped. A note a last resort shrank (``Mark.keep``: the room it was shrunk to) is
rewritten whole, in its full room, at the next move. ``middle-out`` is the same
with the opening (everything up to the first user message) pinned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from policies import digest
from policies.base import Mark, Message, PolicyContext
from policies.fitting import DROP, NOTE_HEADER, Fitting

MIN_BLOCK_CHARS = 240
"""A new block gets at least this much room, else the digest is rewritten as one."""


WORTH = 8
"""A move of the drop mark that cannot reach the low-water target must free at least
1/8 of the room between the target and the budget, else the prompt stays as it is."""


def note_chars(ctx: PolicyContext) -> int:
    """The most the note may hold, in characters: about a sixth of the budget."""
    return 4 * max(120, min(1500, ctx.budget // 6))


@dataclass(frozen=True, slots=True)
class Note:
    """The drop mark's text once a writer has written it."""

    blocks: tuple[str, ...]
    seen: tuple[str, ...] = ()
    shrunk: int = 0
    """The room a last resort shrank the note to (0: it was not), so the next move
    writes it whole again."""


class BlockWriter(Protocol):
    """Writes the note's text for messages being dropped."""

    def bound(self, ctx: PolicyContext) -> int:
        """Tokens the note may grow by at most, for the search of the new cut."""
        ...

    async def write(
        self, newly: Sequence[Message], dropped: Sequence[Message], mark: Mark | None,
        ctx: PolicyContext,
    ) -> Note:  # fmt: skip
        """The note once ``newly`` joins what ``mark`` dropped (``dropped`` is all of
        it, ``newly`` included)."""
        ...


class DigestWriter:
    """Blocks from :mod:`policies.digest`: appended, or written as one when the room
    left is too small or a last resort shrank the note."""

    def bound(self, ctx: PolicyContext) -> int:
        return note_chars(ctx) // 3

    async def write(
        self, newly: Sequence[Message], dropped: Sequence[Message], mark: Mark | None,
        ctx: PolicyContext,
    ) -> Note:  # fmt: skip
        room = note_chars(ctx) - len(NOTE_HEADER)
        blocks, seen = (mark.blocks, mark.seen) if mark is not None else ((), ())
        left = room - sum(len(b) for b in blocks)
        if left >= MIN_BLOCK_CHARS and not (mark is not None and mark.keep):
            text, keys = digest.block(newly, seen, left)
            return Note((*blocks, text), (*seen, *keys))
        text, keys = digest.block(dropped, (), room)
        return Note((text,), keys)


async def drop_more(fit: Fitting, ctx: PolicyContext, writer: BlockWriter, *, recent: bool) -> int:
    """Move the drop mark over the fewest more units that bring the prompt to
    ``ctx.aim`` (past the recent part too, but never the last unit, when ``recent``);
    returns how many messages it newly dropped. A user message the old mark spared as
    the newest, and no longer is, is among the first to go (into the note)."""
    mark = fit.marks.get(DROP)
    done = mark.upto if mark is not None else 0
    gone = set(fit.dropped())
    stop = fit.shape.units[-1].start if recent and fit.shape.units else fit.shape.recent
    units = [
        u
        for u in fit.shape.droppable(reach_recent=True)
        if u.stop <= stop and not gone.issuperset(u)
    ]
    total = fit.tokens()
    if not units or total <= ctx.aim:
        return 0
    bound = writer.bound(ctx)
    chosen, saved = len(units) - 1, 0
    for k, u in enumerate(units):
        saved += sum(fit.size(fit.version(i)) for i in u)
        if total - saved + bound <= ctx.aim:
            chosen = k
            break
    if not recent and total <= ctx.budget and not worth_moving(total, saved, ctx):
        return 0
    while True:
        newly = [fit.msgs[i] for u in units[: chosen + 1] for i in u]
        everything = [fit.msgs[i] for i in sorted(gone)] + newly
        note = await writer.write(newly, everything, mark, ctx)
        stop = max(done, units[chosen].stop)
        fit.mark(DROP, stop, blocks=note.blocks, seen=note.seen, keep=note.shrunk)
        if chosen == len(units) - 1 or fit.tokens() <= ctx.aim:
            return len(newly)
        chosen = min(len(units) - 1, chosen + 1 + (len(units) - chosen) // 8)


def worth_moving(total: int, most: int, ctx: PolicyContext) -> bool:
    """Is a move of the drop mark that can save at most ``most`` tokens, from a prompt of
    ``total`` that already fits the budget, worth changing the prefix for? Yes when it
    reaches the low-water target, or frees a fair share (:data:`WORTH`) of the room
    between the target and the budget; a move that frees a few stubbed messages only
    (the recent part keeps the prompt above the target) would move again every turn,
    and each time rewrite the note near the prompt's start."""
    return total - most <= ctx.aim or WORTH * most >= ctx.budget - ctx.aim


def restore_note(fit: Fitting, ctx: PolicyContext) -> bool:
    """Write a note a last resort shrank whole again, in its full room (the cut is about
    to move, so the prefix changes anyway); the last resorts shrink it again if need be."""
    mark = fit.marks.get(DROP)
    if mark is None or not mark.keep:
        return False
    gone = [fit.msgs[i] for i in fit.dropped()]
    text, keys = digest.block(gone, (), note_chars(ctx) - len(NOTE_HEADER))
    fit.mark(DROP, mark.upto, blocks=(text,), seen=keys)
    return True


class Truncate:
    """Drop the oldest droppable units behind a note with their digest."""

    name = "truncate"
    pins_opening = False
    writer: BlockWriter = DigestWriter()

    async def extend(self, fit: Fitting, ctx: PolicyContext) -> str:
        n = await drop_more(fit, ctx, self.writer, recent=False)
        return f"dropped {n} more old message(s) behind the digest" if n else ""


class MiddleOut(Truncate):
    """Truncate that never drops the opening: the system prompt and the first user turn."""

    name = "middle-out"
    pins_opening = True
