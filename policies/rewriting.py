"""What the levels that shorten single old messages share: moving their mark.

Such a level (old tool output, bulky arguments, pasted blobs, old prose) shows every
message of its kind before its mark in a shorter form, and nothing after it. When the
prompt must shrink, the mark moves forward over the fewest messages that bring the
prompt to the context's aim, oldest first, so a newer message is never shortened
while an older one of the kind stays whole; it never passes the recent part.
"""

from __future__ import annotations

from typing import Any

from policies.base import Mark, Message, PolicyContext
from policies.fitting import Fitting


class RewriteLevel:
    """Base class: subclasses set ``name`` and define ``applies`` and ``rewrite``."""

    name = ""

    def applies(self, fit: Fitting, i: int, mark: Mark) -> bool:
        raise NotImplementedError

    def rewrite(self, message: Message, mark: Mark, fit: Fitting) -> dict[str, Any] | None:
        raise NotImplementedError

    def keep_for(self, ctx: PolicyContext) -> int:
        """The mark's ``keep`` when it is first set (what a trim keeps, by the budget)."""
        return 0

    def limit(self, fit: Fitting) -> int:
        """The furthest the mark may go: the start of the recent part."""
        return fit.shape.recent

    async def extend(self, fit: Fitting, ctx: PolicyContext) -> str:
        mark = fit.marks.get(self.name)
        start = mark.upto if mark is not None else 0
        keep = mark.keep if mark is not None else self.keep_for(ctx)
        if mark is None:
            fit.marks[self.name] = Mark(0, "", keep=keep)  # so ``force`` sees the keep
        try:
            total = fit.tokens()
            candidates = self._candidates(fit, start, total - ctx.aim)
        finally:
            if mark is None:
                del fit.marks[self.name]
        if total <= ctx.aim or not candidates:
            return ""
        chosen, saved = len(candidates) - 1, 0
        for k, (_, saving) in enumerate(candidates):
            saved += saving
            if total - saved <= ctx.aim:
                chosen = k
                break
        while True:
            fit.mark(self.name, candidates[chosen][0] + 1, keep=keep)
            if chosen == len(candidates) - 1 or fit.tokens() <= ctx.aim:
                break
            chosen += 1
        return f"{self.verb} {chosen + 1} more old message(s)"

    verb = "shortened"

    def _candidates(self, fit: Fitting, start: int, excess: int) -> list[tuple[int, int]]:
        """Messages from ``start`` this level would shorten, oldest first, each with the
        tokens it would save; stops collecting once they cover ``excess`` twice over."""
        gone = set(fit.dropped())
        here = Mark(self.limit(fit), "", spare=fit.shape.newest_user)
        out: list[tuple[int, int]] = []
        covered = 0
        for i in range(start, self.limit(fit)):
            if i in gone or not self.applies(fit, i, here):
                continue
            before = fit.version(i)
            after = fit.version(i, force=self.name)
            if after is before:
                continue
            saving = fit.size(before) - fit.size(after)
            if saving > 0:
                out.append((i, saving))
                covered += saving
                if covered > 2 * excess + 64:
                    break
        return out
