"""What a request is sized against: its model's window, token counter and budget.

A :class:`Target` is memoised per (model, upstream, requested output, window), all a
budget depends on besides static settings, and rebuilt when the registry resolves the
model afresh; a retry after the upstream refused is sized anew, and aims lower.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from proxy.config import TokenSettings
from proxy.decide.budget import Budget, capped, compute_budget, decision_headers, requested_output
from proxy.decide.decision import Decision
from proxy.decide.tokens import ModelCounter, TokenCounter
from proxy.decide.windows import ModelInfo, WindowRegistry
from proxy.ingress.chat_request import ChatRequest

RETRY_SHRINK = 0.85
"""A retry after an overflow the upstream did not quantify aims this much lower."""

MAX_TARGETS = 4096
"""Memoised (model, upstream, requested output, window) targets; cleared whole when full."""


@dataclass(frozen=True, slots=True)
class Target:
    info: ModelInfo
    counter: ModelCounter
    budget: Budget
    # A passthrough decided by the byte bound alone is the same for every request to
    # this target: its decision (frozen, so shared) and headers are built once.
    fast_decision: Decision
    fast_headers: Mapping[str, str]

    @classmethod
    def of(cls, info: ModelInfo, counter: ModelCounter, budget: Budget) -> Target:
        exact = counter.exact
        decision = Decision(
            action="passthrough", window=budget.window, budget=budget.budget, exact=exact
        )
        headers = decision_headers(budget, None, exact, "passthrough", ())
        return cls(info, counter, budget, decision, headers)

    def with_budget(self, budget: Budget) -> Target:
        return Target.of(self.info, self.counter, budget)


def retry_target(target: Target, tokens: int, hard_limit: int | None) -> Target:
    """On a retry whose count fit the limit the upstream enforces (so the count ran low),
    the target aims below what was just refused."""
    budget = target.budget
    if hard_limit is None or budget.budget <= tokens * RETRY_SHRINK:
        return target
    return target.with_budget(capped(budget, int(tokens * RETRY_SHRINK)))


class Targets:
    """The memoised targets, and the token counter per (model, tokenizer)."""

    def __init__(self, registry: WindowRegistry, tokens: TokenCounter, cfg: TokenSettings) -> None:
        self.registry = registry
        self.tokens = tokens
        self.cfg = cfg
        self._counters: dict[tuple[str, str | None], ModelCounter] = {}
        self._targets: dict[tuple[str, str, int | None, int], Target] = {}

    async def get(
        self, req: ChatRequest, upstream: str, info: ModelInfo, hard_limit: int | None
    ) -> Target:
        """The window, counter and budget for this request (``info`` is the registry's
        answer: a new object means the model was resolved afresh)."""
        if hard_limit is not None:
            return await self._build(req, info, hard_limit)
        key = (req.model, upstream, requested_output(req.body), info.context_window)
        target = self._targets.get(key)
        if target is None or target.info is not info:
            target = await self._build(req, info, None)
            if len(self._targets) >= MAX_TARGETS:
                self._targets.clear()
            self._targets[key] = target
        return target

    async def _build(self, req: ChatRequest, info: ModelInfo, hard_limit: int | None) -> Target:
        counter = await self.counter(req.model, info)
        override = self.registry.override_for(req.model)
        margin = override.margin if override is not None else None
        if hard_limit and hard_limit >= info.context_window:
            # The upstream rejected a request we sized for this very window: our count
            # ran low for it. Aim lower rather than resend the same body.
            hard_limit = 0
        if hard_limit:
            info = dataclasses.replace(info, context_window=hard_limit)
        budget = compute_budget(info, req.body, self.cfg, counter.exact, margin)
        if hard_limit == 0:
            budget = capped(budget, int(budget.budget * RETRY_SHRINK))
        return Target.of(info, counter, budget)

    async def counter(self, model: str, info: ModelInfo) -> ModelCounter:
        key = (model, info.tokenizer)  # the registry already merged any config override
        counter = self._counters.get(key)
        if counter is None:
            # The first use of an encoding reads and parses its BPE file: off the loop.
            counter = await asyncio.to_thread(self.tokens.for_model, model, key[1])
            self._counters[key] = counter
        return counter
