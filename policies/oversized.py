"""``oversized``: cut a message too big for the budget in its middle, with a marker.

The last resort after the chain, for a huge tool output or pasted file that no
amount of dropping older turns can make fit. The start and end of the text are
kept (where the question and the conclusion usually are) and a marker says how
much was removed. System and developer messages are never cut; the largest other
message is cut first, then the next, until the prompt fits or nothing is left.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from policies.base import Message, PolicyContext, PolicyResult
from policies.cuts import size
from policies.units import HANDOFF_MARK, PINNED_ROLES, as_dicts

_MAX_ROUNDS = 48


def _text_slot(message: Message) -> tuple[int | None, str] | None:
    """Where the cuttable text is: (None, text) for string content, (part, text) for
    the largest text part, None when there is none."""
    content = message.get("content")
    if isinstance(content, str):
        return None, content
    if isinstance(content, list):
        texts = [
            (len(p["text"]), -i, i)
            for i, p in enumerate(content)
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
        if texts:
            i = max(texts)[2]
            return i, content[i]["text"]
    return None


def middle_cut(message: Message, remove: int) -> dict[str, Any]:
    """``message`` with ``remove`` characters taken from the middle of its text."""
    slot = _text_slot(message)
    if slot is None or remove <= 0:
        return dict(message)
    part, text = slot
    remove = min(remove, len(text))
    keep = len(text) - remove
    head, tail = text[: (keep + 1) // 2], text[len(text) - keep // 2 :]
    marker = f"\n\n{HANDOFF_MARK}{remove:,} characters cut from the middle of this message]\n\n"
    cut = head + marker + tail
    if part is None:
        return {**message, "content": cut}
    parts = list(message["content"])
    parts[part] = {**parts[part], "text": cut}
    return {**message, "content": parts}


class Oversized:
    """Middle-cut the largest non-system messages until the prompt fits."""

    name = "oversized"

    async def apply(self, messages: Sequence[Message], ctx: PolicyContext) -> PolicyResult:
        msgs = as_dicts(messages)
        before = ctx.count(msgs)
        removed: dict[int, int] = {}
        out = msgs
        for _ in range(_MAX_ROUNDS):
            excess = ctx.count(out) - ctx.budget
            if excess <= 0:
                break
            i = self._pick(msgs, out, removed, ctx)
            if i is None:
                break
            text = _text_slot(msgs[i])
            assert text is not None
            ratio = len(text[1]) / max(1, size(ctx, msgs[i]))
            removed[i] = min(len(text[1]), removed.get(i, 0) + math.ceil((excess + 32) * ratio))
            out = [middle_cut(m, removed[j]) if j in removed else m for j, m in enumerate(msgs)]
        if not removed:
            return PolicyResult(msgs, changed=False)
        return PolicyResult(
            out,
            changed=True,
            removed_tokens=before - ctx.count(out),
            note=f"cut the middle of {len(removed)} oversized message(s)",
        )

    @staticmethod
    def _pick(
        msgs: list[dict[str, Any]],
        out: list[dict[str, Any]],
        removed: dict[int, int],
        ctx: PolicyContext,
    ) -> int | None:
        """The largest message that still has text left to cut."""
        best: tuple[int, int] | None = None
        for i, m in enumerate(msgs):
            slot = _text_slot(m)
            if m.get("role") in PINNED_ROLES or slot is None or removed.get(i, 0) >= len(slot[1]):
                continue
            s = size(ctx, out[i])
            if best is None or s > best[0]:
                best = (s, i)
        return None if best is None else best[1]
