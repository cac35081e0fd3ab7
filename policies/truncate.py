"""``truncate``: keep the newest whole units that fit; drop older ones behind one note.

The note is a ``user`` message, not ``system``: several strict chat templates
(Gemma, Qwen and others behind llama.cpp or vLLM) reject a system message that is
not first, and Anthropic-style upstreams hoist system text out of order, while a
user message is accepted anywhere by every OpenAI-compatible upstream. It states
how many messages and tokens were omitted and previews the oldest omitted one.

The cut is reused from the previous turn while it still fits (see ``policies.cuts``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from policies.base import CutState, Message, PolicyContext, PolicyResult
from policies.cuts import prefix_hash, preview, previous_cut, search_cut, weight
from policies.units import HANDOFF_MARK, Region, as_dicts, assemble, region


def omission_note(omitted: Sequence[Message], tokens: int) -> dict[str, Any]:
    """The one message standing where ``omitted`` messages were."""
    first = omitted[0]
    text = (
        f"{HANDOFF_MARK}{len(omitted):,} earlier messages ({tokens:,} tokens) were omitted "
        f"to fit this model's context window. The oldest ({first.get('role', '?')}) "
        f'began: "{preview(first)}"]'
    )
    return {"role": "user", "content": text}


class Truncate:
    """Drop the oldest droppable units until the rest fits."""

    name = "truncate"

    def start(self, messages: Sequence[Message]) -> int:
        """Index where the droppable region begins."""
        return 0

    async def apply(self, messages: Sequence[Message], ctx: PolicyContext) -> PolicyResult:
        msgs = as_dicts(messages)
        if ctx.count(msgs) <= ctx.budget:
            return PolicyResult(msgs, changed=False)
        reg = region(msgs, self.start(msgs))
        if not reg.units:
            return PolicyResult(msgs, changed=False, note="nothing droppable")
        prev = previous_cut(msgs, reg, ctx.previous, self.name, ctx.memo)
        if prev is not None and ctx.count(self.build(msgs, reg, prev, ctx)) <= ctx.budget:
            k = prev
        else:
            points = [p for p in reg.points if p > (prev or 0)]
            if points:
                k = search_cut(ctx, points, lambda p: self.build(msgs, reg, p, ctx))
            elif prev is not None:
                k = prev  # a retry aiming lower: no older unit is left to drop
            else:
                return PolicyResult(msgs, changed=False, note="nothing droppable")
        return self.result(msgs, reg, k, ctx)

    def replay(self, messages: Sequence[Message], ctx: PolicyContext) -> PolicyResult:
        """Re-apply the previous turn's cut if it is still valid, whether or not it fits."""
        msgs = as_dicts(messages)
        reg = region(msgs, self.start(msgs))
        k = previous_cut(msgs, reg, ctx.previous, self.name, ctx.memo)
        if k is None:
            return PolicyResult(msgs, changed=False)
        return self.result(msgs, reg, k, ctx)

    def build(
        self, msgs: list[dict[str, Any]], reg: Region, k: int, ctx: PolicyContext
    ) -> list[dict[str, Any]]:
        dropped = reg.dropped(k)
        if not dropped:
            return msgs
        omitted = [msgs[i] for i in dropped]
        note = omission_note(omitted, weight(ctx, omitted))
        return assemble(msgs, dropped, note)

    def result(
        self, msgs: list[dict[str, Any]], reg: Region, k: int, ctx: PolicyContext
    ) -> PolicyResult:
        out = self.build(msgs, reg, k, ctx)
        state = CutState(
            cut=k, prefix_hash=prefix_hash(msgs[: reg.end(k)], ctx.memo), policy=self.name
        )
        return PolicyResult(
            out,
            changed=True,
            removed_messages=k,
            removed_tokens=ctx.count(msgs) - ctx.count(out),
            note=f"dropped {k} oldest message(s)",
            cut=state,
        )
