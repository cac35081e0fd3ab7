"""How many prompt tokens a request may use: ``window - reserved output - margin``.

Reserved output is what the request asks for (``max_completion_tokens``, else
``max_tokens``), else ``min(model max output, tokens.default_max_output_tokens)``.
The margin is a fraction of the window: the model override's ``margin`` if set,
else ``tokens.margin`` for exact counts and the wider ``tokens.approx_margin`` for
approximate ones.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.config import TokenSettings
from proxy.windows import ModelInfo


@dataclass(frozen=True)
class Budget:
    """The numbers behind a fits/does-not-fit decision, all in tokens."""

    window: int
    reserved_output: int
    margin: int
    budget: int

    def fits(self, tokens: int) -> bool:
        return tokens <= self.budget


def compute_budget(
    info: ModelInfo,
    body: Mapping[str, Any],
    tokens: TokenSettings,
    exact: bool,
    override_margin: float | None = None,
) -> Budget:
    """The prompt budget for ``body`` sent to the model described by ``info``."""
    reserved = requested_output(body)
    if reserved is None:
        reserved = min(info.max_output_tokens, tokens.default_max_output_tokens)
    if override_margin is not None:
        fraction = override_margin
    else:
        fraction = tokens.margin if exact else tokens.approx_margin
    margin = math.ceil(info.context_window * fraction)
    budget = max(0, info.context_window - reserved - margin)
    return Budget(info.context_window, reserved, margin, budget)


def requested_output(body: Mapping[str, Any]) -> int | None:
    """The output the request reserves (``max_completion_tokens``, else ``max_tokens``)."""
    for key in ("max_completion_tokens", "max_tokens"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def budget_headers(budget: Budget, tokens: int, exact: bool) -> dict[str, str]:
    """The ``x-handoff-*`` response headers that show the decision's inputs."""
    return {
        "x-handoff-window": str(budget.window),
        "x-handoff-budget": str(budget.budget),
        "x-handoff-tokens": str(tokens),
        "x-handoff-tokens-exact": "true" if exact else "false",
    }
