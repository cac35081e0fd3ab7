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
from proxy.decide.windows import ModelInfo
from proxy.errors import ContextTooLarge, Unfittable


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


def capped(budget: Budget, limit: int) -> Budget:
    """The same budget lowered to ``limit`` (the difference added to the margin)."""
    limit = max(0, min(budget.budget, limit))
    margin = budget.window - budget.reserved_output - limit
    return Budget(budget.window, budget.reserved_output, margin, limit)


def too_large(model: str, budget: Budget, pinned: int) -> ContextTooLarge | Unfittable:
    """The 400 for a request whose pinned messages (``pinned`` tokens) cannot fit.

    The words avoid what clients match as an overflow ("context", "prompt", "exceed",
    "maximum", "too long"): compacting and resending cannot help, so they must not."""
    if budget.reserved_output >= budget.window - budget.margin:
        return ContextTooLarge(
            f"max_tokens / max_completion_tokens ({budget.reserved_output:,}) leaves no room "
            f"for any prompt in {model}'s {budget.window:,}-token window. Lower it, or set "
            "compression.strict_max_tokens = false to let handoff lower it.",
            param="max_tokens",
        )
    return Unfittable(
        f"handoff cannot fit this conversation to {model}, and compacting it will not help: "
        f"the system message and the newest user message alone need {pinned:,} tokens, and "
        f"{model} has room for {budget.budget:,} (its {budget.window:,}-token window less "
        f"{budget.reserved_output:,} kept for the answer and a {budget.margin:,}-token safety "
        "share). Shorten the system message or the newest message, lower max_tokens, or "
        "choose a model with a larger window.",
        param="messages",
    )


def decision_headers(
    budget: Budget, tokens: int | None, exact: bool, action: str, applied: tuple[str, ...]
) -> dict[str, str]:
    """:func:`budget_headers` plus the decision and the policies that changed something
    (no ``x-handoff-tokens`` when nothing was counted)."""
    headers = budget_headers(budget, tokens or 0, exact)
    if tokens is None:
        del headers["x-handoff-tokens"]
    headers["x-handoff-decision"] = action
    if applied:
        headers["x-handoff-policy"] = ",".join(applied)
    return headers


def headroom_share(budget: int) -> float:
    """How much of the budget a moved cut leaves free for the turns after it: small
    windows fill in a few turns, so they need a larger share to move the cut rarely."""
    if budget <= 4096:
        return 0.5
    if budget <= 16384:
        return 0.4
    if budget <= 65536:
        return 0.3
    return 0.2


def low_water_target(budget: int, low_water: float | str) -> int:
    """Where a cut that must move aims: ``compression.low_water`` of the budget, or by
    the budget's size when it is "auto"."""
    share = 1.0 - headroom_share(budget) if low_water == "auto" else float(low_water)
    return max(0, int(budget * share))
