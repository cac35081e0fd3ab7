"""Per-model correction of counted prompt tokens by what upstreams report.

Each reply's ``usage.prompt_tokens`` over our count is one sample of the ratio;
the factor is its exponentially weighted mean (recent replies weigh more), with
implausible samples (ratio outside [0.25, 4], e.g. a cached or truncated prompt)
ignored and the result clamped to [0.5, 2]. Corrected estimate = count * factor.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MIN_FACTOR, MAX_FACTOR = 0.5, 2.0
_PLAUSIBLE = (0.25, 4.0)


@dataclass(frozen=True, slots=True)
class _State:
    factor: float
    samples: int


class Calibration:
    """Thread-safe store of per-model factors; ``snapshot``/``load`` for persistence."""

    def __init__(self, alpha: float = 0.2) -> None:
        self._alpha = alpha
        self._states: dict[str, _State] = {}
        self._lock = threading.Lock()

    def observe(self, model: str, counted: int, actual_prompt_tokens: int) -> None:
        """Record one reply; samples with no count or an implausible ratio are dropped."""
        if counted <= 0 or actual_prompt_tokens <= 0:
            return
        ratio = actual_prompt_tokens / counted
        if not _PLAUSIBLE[0] <= ratio <= _PLAUSIBLE[1]:
            return
        with self._lock:
            old = self._states.get(model)
            if old is None:
                new = _State(ratio, 1)
            else:
                # Plain mean for the first few samples, EWMA afterwards.
                weight = max(self._alpha, 1 / (old.samples + 1))
                new = _State(old.factor + weight * (ratio - old.factor), old.samples + 1)
            self._states[model] = new

    def factor(self, model: str) -> float:
        """The correction for ``model``; 1.0 before any sample."""
        state = self._states.get(model)
        if state is None:
            return 1.0
        return min(MAX_FACTOR, max(MIN_FACTOR, state.factor))

    def samples(self, model: str) -> int:
        state = self._states.get(model)
        return state.samples if state else 0

    def corrected(self, model: str, counted: int) -> int:
        """``counted`` times the factor, rounded up."""
        return math.ceil(counted * self.factor(model))

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            models = {
                m: {"factor": s.factor, "samples": s.samples} for m, s in self._states.items()
            }
        return {"version": 1, "models": models}

    def load(self, data: Mapping[str, Any]) -> None:
        """Merge a snapshot in; malformed entries are skipped."""
        models = data.get("models")
        if not isinstance(models, Mapping):
            return
        with self._lock:
            for model, entry in models.items():
                try:
                    factor = float(entry["factor"])
                    samples = int(entry["samples"])
                except (KeyError, TypeError, ValueError):
                    continue
                if math.isfinite(factor) and factor > 0 and samples > 0:
                    self._states[str(model)] = _State(factor, samples)
