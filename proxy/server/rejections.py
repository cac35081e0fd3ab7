"""Which of handoff's own refusals on a chat route get recorded, so a flood cannot bloat
the store: each workspace may record ``per_minute`` of them (a token bucket); those past
it are counted, and the next recorded one says how many were left out."""

from __future__ import annotations

import collections
import time


class RejectionBudget:
    """A token bucket per workspace (the most recent ``max_workspaces`` kept)."""

    def __init__(self, per_minute: int = 30, max_workspaces: int = 1024) -> None:
        self.per_minute = per_minute
        self.max_workspaces = max_workspaces
        self._buckets: collections.OrderedDict[str, list[float]] = collections.OrderedDict()

    def admit(self, workspace: str, now: float | None = None) -> int | None:
        """None: do not record this one. Else how many were left out since the last one."""
        now = time.monotonic() if now is None else now
        bucket = self._buckets.pop(workspace, None) or [float(self.per_minute), now, 0.0]
        self._buckets[workspace] = bucket
        if len(self._buckets) > self.max_workspaces:
            self._buckets.popitem(last=False)
        tokens, at, skipped = bucket
        tokens = min(float(self.per_minute), tokens + (now - at) * self.per_minute / 60)
        if tokens < 1:
            bucket[:] = [tokens, now, skipped + 1]
            return None
        bucket[:] = [tokens - 1, now, 0.0]
        return int(skipped)
