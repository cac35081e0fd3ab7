"""The compression chain: levels run cheapest loss first until the prompt fits.

:func:`compress` passes a prompt that already fits through unchanged. Otherwise it
replays the conversation's marks from the previous turn (``ctx.previous``: the same
stubs, trims and note, byte for byte) and stops there if that fits, which keeps the
forwarded prefix identical from turn to turn. If not, each level in turn moves its
mark until the prompt reaches the low-water target, and then, only if the budget is
still exceeded, the last resorts (``policies.last_resort``) do. If even they cannot,
what remains is the system prompt and the tools: :class:`ContextTooLarge`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from policies.base import CutState, Level, Message, PolicyContext, Step
from policies.elide_arguments import ElideArguments
from policies.elide_tool_results import ElideToolResults
from policies.errors import ContextTooLarge
from policies.fitting import DROP, Fitting, Rewriter
from policies.last_resort import LAST_RESORT, DropRecent, ShrinkNote, regrow_note
from policies.rewriting import RewriteLevel
from policies.summarize import Summarize
from policies.trim_pastes import TrimPastes
from policies.trim_prose import TrimProse
from policies.truncate import MiddleOut, Truncate, restore_note
from policies.units import PINNED_ROLES, as_dicts

POLICIES: Mapping[str, type] = MappingProxyType(
    {
        "elide-tool-results": ElideToolResults,
        "elide-arguments": ElideArguments,
        "trim-pastes": TrimPastes,
        "trim-prose": TrimProse,
        "summarize": Summarize,
        "truncate": Truncate,
        "middle-out": MiddleOut,
    }
)
DEFAULT_CHAIN = ("elide-tool-results", "elide-arguments", "trim-pastes", "trim-prose",
                 "summarize", "truncate")  # fmt: skip
DROPPING = (Truncate, DropRecent, ShrinkNote)
"""Levels that share the drop mark (summarize and middle-out are kinds of truncate)."""


@dataclass(frozen=True, slots=True)
class Compression:
    messages: list[dict[str, Any]]
    steps: list[Step]
    applied: tuple[str, ...]
    """Levels that changed something, in order."""
    cut: CutState | None
    """The marks to remember for the conversation's next turn (the previous ones when
    nothing needed compressing)."""
    tokens_before: int
    tokens_after: int
    origins: list[int | None]
    """For each forwarded message, the index of the client's message it shows (None
    for the note handoff wrote), so a wire format can write its own items back."""


async def compress(
    messages: Sequence[Message], ctx: PolicyContext, chain: Sequence[Level], keep: int = 3
) -> Compression:
    """Rewrite ``messages`` until ``ctx.count`` fits ``ctx.budget``; never mutates them.
    ``keep``: the newest tool results that are spared until the last resorts."""
    msgs = as_dicts(messages)
    before = ctx.count(msgs)
    if before <= ctx.budget:
        return Compression(msgs, [], (), ctx.previous, before, before, list(range(len(msgs))))
    levels = [*chain, *LAST_RESORT]
    rewriters: list[Rewriter] = [lv for lv in levels if isinstance(lv, RewriteLevel)]
    opening = any(isinstance(lv, Truncate) and lv.pins_opening for lv in chain)
    fit = Fitting(msgs, ctx, rewriters, keep=keep, pin_opening=opening)
    moved: dict[str, str] = {}
    if not fit.marks or fit.tokens() > ctx.budget:
        if restore_note(fit, ctx):  # the cut moves anyway: a note shrunk earlier is whole again
            moved[DROP] = "wrote the note shrunk earlier whole again"
        for level in chain:
            if fit.tokens() <= ctx.aim:
                break
            moved[level.name] = await level.extend(fit, ctx)
        last = replace(ctx, target=None)
        for level in LAST_RESORT:
            if fit.tokens() <= ctx.budget:
                break
            moved[level.name] = await level.extend(fit, last)
        if moved.get(ShrinkNote.name):  # later last resorts may have left room for it
            moved[ShrinkNote.name] = regrow_note(fit, last) or moved[ShrinkNote.name]
    out, origins = fit.render()
    after = ctx.count(out)
    if after > ctx.budget:
        system = [m for m in msgs if m.get("role") in PINNED_ROLES]
        raise ContextTooLarge(ctx.count(system), ctx.budget)
    steps = _steps(fit, levels, moved, before)
    return Compression(
        out, steps, tuple(s.policy for s in steps), fit.state(), before, after, origins
    )


def _steps(
    fit: Fitting, levels: Sequence[Level], moved: Mapping[str, str], before: int
) -> list[Step]:
    """What each level with a mark contributes, in chain order. The drop mark is
    reported once, by the dropping level that moved it this turn (else the first)."""
    dropping = [lv for lv in levels if isinstance(lv, DROPPING)]
    dropper = next((lv for lv in reversed(dropping) if moved.get(lv.name)), None)
    dropper = dropper or (dropping[0] if dropping else None)
    steps: list[Step] = []
    marks = dict(fit.marks)
    shown: dict[str, Any] = {}
    tokens = before
    for level in levels:
        name = DROP if isinstance(level, DROPPING) else level.name
        if name not in marks or (name == DROP and level is not dropper):
            continue
        shown[name] = marks[name]
        fit.marks = dict(shown)
        now = fit.tokens()
        note = (
            moved.get(level.name) or (name == DROP and moved.get(DROP)) or "as on the previous turn"
        )
        steps.append(Step(level.name, _affected(fit, level, name), tokens - now, note))
        tokens = now
    fit.marks = marks
    return steps


def _affected(fit: Fitting, level: Level, name: str) -> int:
    """How many of the client's messages this level shows shortened, or drops."""
    if name == DROP:
        return len(fit.dropped())
    if not isinstance(level, RewriteLevel):
        return 0
    mark = fit.marks[name]
    gone = set(fit.dropped())
    return sum(
        1
        for i in range(min(mark.upto, len(fit.msgs)))
        if i not in gone and level.applies(fit, i, mark) and fit.shown_by(level, i, mark)
    )
