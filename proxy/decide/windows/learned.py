"""Windows upstreams named in their overflow errors, remembered per (upstream, model).

An upstream that refuses a request as too long and names its limit (llama.cpp's
``n_ctx``, vLLM's ``max_model_len``, OpenAI's "maximum context length") knows its
window better than any table: the limit is kept, used for every later turn (so they do
not pay a refused round trip first), and persisted in the store next to calibration
so a restarted proxy knows it too. It gives way once a larger window is configured or
discovered than the one that was refused (``against``): then the server has changed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

_VERSION = 1


@dataclass(frozen=True, slots=True)
class LearnedLimit:
    """``limit``: the window the upstream named; ``against``: the window handoff assumed
    when it was refused (None: it knew none)."""

    limit: int
    against: int | None

    def applies(self, window: int | None) -> bool:
        """Whether this limit beats ``window`` (the configured, discovered or built-in
        one): always when there is none; else while it is smaller and no larger window
        than the refused one has appeared since."""
        if window is None:
            return True
        return self.against is not None and self.limit < window <= self.against


class LearnedLimits:
    """The learned limits (safe from any thread); ``on_change`` persists a snapshot."""

    def __init__(self) -> None:
        self._limits: dict[tuple[str, str], LearnedLimit] = {}
        self._lock = threading.Lock()
        self.on_change: Callable[[dict[str, Any]], None] | None = None

    def learn(self, upstream: str, model: str, limit: int, against: int | None) -> bool:
        """Remember ``limit`` for ``model`` on ``upstream``; True if it is news."""
        if limit <= 0 or (against is not None and limit >= against):
            return False
        key = (upstream, model.strip().lower())
        with self._lock:
            old = self._limits.get(key)
            if old is not None and old.limit <= limit:
                return False
            # A second, smaller limit keeps the window first refused as its ``against``.
            first = old.against if old is not None else against
            self._limits[key] = LearnedLimit(limit, first)
        if self.on_change is not None:
            self.on_change(self.snapshot())
        return True

    def get(self, upstream: str | None, model: str) -> tuple[LearnedLimit, str] | None:
        """The limit learned for ``model`` on ``upstream`` (on any upstream when None: the
        smallest), with the upstream it came from."""
        name = model.strip().lower()
        hits = [
            (lim.limit, up, lim)
            for (up, m), lim in self._limits.items()
            if m == name and (upstream is None or up == upstream)
        ]
        if not hits:
            return None
        _, up, lim = min(hits, key=lambda h: (h[0], h[1]))
        return lim, up

    def __bool__(self) -> bool:
        return bool(self._limits)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            limits = [
                {"upstream": up, "model": m, "limit": lim.limit, "against": lim.against}
                for (up, m), lim in sorted(self._limits.items())
            ]
        return {"version": _VERSION, "limits": limits}

    def load(self, data: Mapping[str, Any]) -> int:
        """Merge a snapshot in (malformed entries skipped); how many were taken."""
        taken = 0
        entries = data.get("limits")
        if not isinstance(entries, list):
            return 0
        with self._lock:
            for e in entries:
                try:
                    up, model, limit = str(e["upstream"]), str(e["model"]), int(e["limit"])
                    against = None if e.get("against") is None else int(e["against"])
                except (KeyError, TypeError, ValueError):
                    continue
                if limit > 0:
                    self._limits[(up, model.lower())] = LearnedLimit(limit, against)
                    taken += 1
        return taken
