"""``trim-prose``: a long old assistant reply keeps its head and tail (where the plan
and the conclusion are); reasoning, thinking parts and tool calls are left as they
are."""

from __future__ import annotations

from typing import Any

from policies.base import Mark, Message, PolicyContext
from policies.fitting import Fitting
from policies.rewriting import RewriteLevel
from policies.trim import head_tail, map_text


class TrimProse(RewriteLevel):
    """Cut the middle of long old assistant texts, oldest first."""

    name = "trim-prose"
    verb = "trimmed the text of"

    def keep_for(self, ctx: PolicyContext) -> int:
        return max(300, min(2000, ctx.budget // 8))

    def applies(self, fit: Fitting, i: int, mark: Mark) -> bool:
        return fit.msgs[i].get("role") == "assistant"

    def rewrite(self, message: Message, mark: Mark, fit: Fitting) -> dict[str, Any] | None:
        keep = mark.keep
        return map_text(message, lambda t: head_tail(t, keep) if len(t) > 2 * keep else t)
