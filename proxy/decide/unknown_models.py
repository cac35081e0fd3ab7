"""Warnings about models whose context window handoff does not know: a few, then counts.

Model names come from clients, and one warning per distinct name let 20,000 names
write 20,000 lines. The first :attr:`UnknownModels.FIRST` names are warned about one by
one, each with the setting that teaches handoff its window; later new names are only
counted, and the count is logged (``unknown_model_windows``) when a new name comes at
least ``every_s`` after the last count was: the first time at once, then at most once
a period, with nothing running in between.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import structlog

log = structlog.get_logger("handoff")


class UnknownModels:
    """The unknown model names seen (up to ``REMEMBER``), and the warnings about them."""

    FIRST = 10
    EVERY_S = 60.0
    REMEMBER = 4096
    """Names kept, so that a name seen again is not new; past it, every request for a
    name not kept counts as a new name (memory stays bounded whatever clients send)."""

    def __init__(
        self,
        *,
        first: int = FIRST,
        every_s: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.first, self.every_s, self.clock = first, every_s, clock
        self._seen: set[str] = set()
        self._total = 0
        self._counted = 0  # new names since the last summary
        self._summarised_at: float | None = None

    def saw(self, model: str) -> None:
        """A request for ``model``, whose window is unknown (a set look-up when seen)."""
        if model in self._seen:
            return
        if len(self._seen) < self.REMEMBER:
            self._seen.add(model)
        self._total += 1
        if self._total <= self.first:
            log.warning(
                "unknown_model_window",
                model=model,
                hint=f'set [models."{model}"] context_window = N, or tokens.default_context_window',
            )
            return
        self._counted += 1
        now = self.clock()
        if self._summarised_at is None or now - self._summarised_at >= self.every_s:
            log.warning(
                "unknown_model_windows",
                new_names=self._counted,
                total_names=self._total,
                every_s=self.every_s,
                hint="windows unknown for more models (not named, counted); see handoff models",
            )
            self._counted, self._summarised_at = 0, now
