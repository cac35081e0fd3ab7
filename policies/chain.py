"""The compression chain: built from configuration, run in order until the prompt fits.

:func:`compress` first passes through a prompt that already fits (so compressing a
compressed request changes nothing). Then it *replays* the conversation's previous
cut (``ctx.previous``: the same elisions, the same cut, the same summary) and
stops there if that fits, which keeps the forwarded prefix byte-identical from
turn to turn. Otherwise the policies run in order until the prompt fits; then, if
still needed, a final truncate and the oversized middle cut. If even that fails
the pinned messages cannot fit and :class:`ContextTooLarge` is raised.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from policies.base import CutState, Message, Policy, PolicyContext, PolicyResult
from policies.elide_tool_results import ElideToolResults
from policies.errors import ContextTooLarge
from policies.middle_out import MiddleOut
from policies.oversized import Oversized
from policies.summarize import Summarize
from policies.truncate import Truncate
from policies.units import as_dicts, pinned

POLICIES: Mapping[str, type] = MappingProxyType(
    {
        "elide-tool-results": ElideToolResults,
        "summarize": Summarize,
        "truncate": Truncate,
        "middle-out": MiddleOut,
        "oversized": Oversized,
    }
)


@runtime_checkable
class Replayable(Protocol):
    """A policy that can re-apply exactly the previous turn's state, without I/O."""

    name: str

    def replay(self, messages: Sequence[Message], ctx: PolicyContext) -> PolicyResult: ...


@dataclass(frozen=True, slots=True)
class Step:
    policy: str
    removed_messages: int
    removed_tokens: int
    note: str


@dataclass(frozen=True, slots=True)
class Compression:
    messages: list[dict[str, Any]]
    steps: list[Step]
    applied: tuple[str, ...]
    """Policies that changed something, in order."""
    cut: CutState | None
    """State to remember for the conversation's next turn (the previous one when no
    compression was needed)."""
    tokens_before: int
    tokens_after: int


async def compress(
    messages: Sequence[Message], ctx: PolicyContext, chain: Sequence[Policy]
) -> Compression:
    """Rewrite ``messages`` until ``ctx.count`` fits ``ctx.budget``; never mutates them."""
    msgs = as_dicts(messages)
    before = ctx.count(msgs)
    if before <= ctx.budget:
        return Compression(msgs, [], (), ctx.previous, before, before)
    replayed = _replay(msgs, ctx, chain)
    if replayed is not None:
        return replayed
    run = _Run(msgs)
    for policy in chain:
        run.add(policy.name, await policy.apply(run.messages, ctx))
        if ctx.count(run.messages) <= ctx.budget:
            break
    else:
        has_cut = any(isinstance(p, Truncate) for p in chain)
        for last in (Oversized(),) if has_cut else (Truncate(), Oversized()):
            if ctx.count(run.messages) > ctx.budget:
                run.add(last.name, await last.apply(run.messages, ctx))
    after = ctx.count(run.messages)
    if after > ctx.budget:
        raise ContextTooLarge(ctx.count(pinned(msgs)), ctx.budget)
    return Compression(run.messages, run.steps, run.applied, run.state, before, after)


class _Run:
    """The running result of a chain: messages, steps and the merged cut state."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages = messages
        self.steps: list[Step] = []
        self.state: CutState | None = None

    @property
    def applied(self) -> tuple[str, ...]:
        return tuple(s.policy for s in self.steps)

    def add(self, name: str, result: PolicyResult) -> None:
        if not result.changed:
            return
        self.messages = result.messages
        self.steps.append(Step(name, result.removed_messages, result.removed_tokens, result.note))
        if result.cut is not None:
            self.state = _merge(self.state, result.cut)


def _merge(old: CutState | None, new: CutState) -> CutState:
    """Combine the elision part of one policy's state with the cut part of another's."""
    if old is None:
        return new
    if new.policy:
        return replace(new, elided_upto=old.elided_upto, elided_hash=old.elided_hash)
    return replace(old, elided_upto=new.elided_upto, elided_hash=new.elided_hash)


def _replay(
    msgs: list[dict[str, Any]], ctx: PolicyContext, chain: Sequence[Policy]
) -> Compression | None:
    """The previous turn's state re-applied, if it is valid and fits."""
    if ctx.previous is None:
        return None
    policies: list[Any] = [*chain, Truncate()]
    run = _Run(msgs)
    for policy in policies:
        if isinstance(policy, Replayable) and policy.name not in run.applied:
            run.add(policy.name, policy.replay(run.messages, ctx))
    after = ctx.count(run.messages)
    if not run.steps or after > ctx.budget:
        return None
    return Compression(run.messages, run.steps, run.applied, ctx.previous, ctx.count(msgs), after)
