"""The decision engine: migrate (original bytes) or compress (rewritten messages).

For each chat request: look up the model's window, compute the budget, and
1. if a byte-length bound already fits, migrate without tokenizing at all;
2. else count exactly (cached per message); if it fits, migrate;
3. else run the policy chain, reusing the conversation's previous cut so the
   forwarded prefix stays byte-identical turn to turn (provider prompt caches).
Only the real count matters: a switch to a smaller model migrates when it fits.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import structlog

from policies.base import CountTokens, Merge, PolicyContext, Summarize
from policies.chain import compress
from policies.errors import ContextTooLarge as PinnedTooLarge
from proxy.config import Settings
from proxy.decide.budget import Budget, low_water_target, requested_output, too_large
from proxy.decide.byte_bound import prompt_bound
from proxy.decide.count_lanes import CountLanes
from proxy.decide.cut_memory import CutMemory, conversation_key
from proxy.decide.decision import Decision
from proxy.decide.outcomes import compressed, passthrough
from proxy.decide.output_fit import fitted_output, lowered
from proxy.decide.plan import Plan
from proxy.decide.policy_chain import build_chain
from proxy.decide.recall import Recall, Recaller, RecallSource, recalled_plan, token_cap
from proxy.decide.summarizer_choice import (
    RouteModels,
    SummarizerChoice,
    choose,
    least_window,
    summary_said,
)
from proxy.decide.targets import Target, Targets, retry_target
from proxy.decide.tokens import Calibration, ModelCounter, TokenCounter
from proxy.decide.turn_memo import TurnMemo, TurnMemos
from proxy.decide.unknown_models import UnknownModels
from proxy.decide.windows import ModelInfo, WindowRegistry
from proxy.decide.windows.long_context import LongContext
from proxy.ingress.chat_request import ChatRequest
from proxy.upstream.anthropic_stream import prompt_tokens
from proxy.upstream.routing import Upstream

log = structlog.get_logger("handoff.engine")


@dataclass(frozen=True, slots=True)
class SummaryCalls:
    """The summarizer's two calls for one request: summarize dropped messages, and merge
    summaries when the note has no room for another block."""

    summarize: Summarize
    merge: Merge


SummarizerFactory = Callable[
    [ChatRequest, Upstream, Mapping[str, str], SummarizerChoice], "SummaryCalls | None"
]
"""Builds the summarize callable for one request (its upstream, the client's key, and the
model chosen to read the dropped part)."""

CALIBRATE_BOUND = 32_768
"""Fast-path requests are counted for calibration only below this bound (on the loop)."""

OFFLOAD_BOUND = 32_768
"""Requests whose bound is above this many tokens are counted in a worker thread."""


@dataclass(frozen=True, slots=True)
class _Ask:
    """One :meth:`Engine.plan` call's request and how it was asked."""

    req: ChatRequest
    up: Upstream
    hard_limit: int | None
    headers: Mapping[str, str]  # the client's (a summarizer call on its upstream needs its key)
    client: str
    count: bool


class Engine:
    def __init__(
        self,
        settings: Settings,
        registry: WindowRegistry,
        tokens: TokenCounter,
        calibration: Calibration,
        summarizers: SummarizerFactory | None = None,
        recall: RecallSource | None = None,
    ) -> None:
        self.settings = settings
        self.registry = registry
        self.tokens = tokens
        self.calibration = calibration
        self.summarizers = summarizers
        self.cuts = CutMemory(capacity=4096)
        self.memos = TurnMemos(max_bytes=settings.server.history_cache_bytes)
        self.targets = Targets(registry, tokens, settings.tokens)
        self.unknown = UnknownModels()
        self.lanes = CountLanes()
        self.recaller = None if recall is None else Recaller(settings.recall, recall)
        self.long_context = LongContext()
        self.route_models = RouteModels()
        s = settings.compression.summarize
        self._tracks_models = s.enabled and not s.model  # for the summarizer's choice

    async def plan(
        self,
        req: ChatRequest,
        up: Upstream,
        *,
        hard_limit: int | None = None,
        client_headers: Mapping[str, str] | None = None,
        client: str = "",
        count: bool = False,
    ) -> Plan:
        """``count``: always count exactly, no byte-bound fast path (``handoff plan``'s
        dry run shows tokens, never None)."""
        ask = _Ask(req, up, hard_limit, client_headers or {}, client, count)
        recall = await self._recall(ask)
        if recall is None:
            return await self._plan(ask)
        plan = await self._plan(dataclasses.replace(ask, req=recall.request))
        return recalled_plan(plan, recall)

    async def _recall(self, ask: _Ask) -> Recall | None:
        """The request with its recalled message, when it recalls (or replays one)."""
        if self.recaller is None:
            return None

        async def cap() -> tuple[int, Callable[[str], int]]:
            return await self._recall_cap(ask.req, ask.up)

        return await self.recaller.apply(ask.req, ask.client, ask.headers, cap)

    async def _recall_cap(self, req: ChatRequest, up: Upstream) -> tuple[int, Callable[[str], int]]:
        """The recalled message's token cap for this model, and its text counter."""
        info = self.registry.lookup(req.model, up.name)
        if info is None:
            counter = await asyncio.to_thread(self.tokens.for_model, req.model, None)
            return token_cap(self.settings.recall, None), counter.count_text
        target = await self.targets.get(req, up.name, info, None)
        return token_cap(self.settings.recall, target.budget.budget), target.counter.count_text

    async def _plan(self, ask: _Ask) -> Plan:
        """Migrate by the byte bound, else count; migrate if it fits, else compress."""
        req, up, hard_limit = ask.req, ask.up, ask.hard_limit
        info = self._model_info(ask)
        if info is None:
            self.unknown.saw(req.model)
            return Plan(body=req.raw, decision=Decision(action="passthrough", exact=False))
        key: str | None = None
        if self._tracks_models:  # (only then: the fast path does not hash the history)
            key = conversation_key(req.messages)
            self.route_models.saw(key, up.name, req.model)
        target = await self.targets.get(req, up.name, info, hard_limit)
        bound = prompt_bound(req, target.budget.budget, target.counter)
        if hard_limit is None and bound <= target.budget.budget and not ask.count:
            # A token covers at least one byte: this cannot exceed the budget.
            return passthrough(req, target, None, None, bound=bound)
        key = key or conversation_key(req.messages)
        memo = self.memos.begin(key, target.counter, self._factor(req.model, target), len(req.raw))
        base = target.counter.request_counter(req.body, memo.counts)  # compression's too
        counted = await self._count(ask, base, bound)
        tokens = self._corrected(req.model, target.counter, counted)
        asked = requested_output(req.body)
        fitted = self._fitted_output(target, tokens, asked)
        if fitted is not None:
            target = target.with_budget(fitted)
        target = retry_target(target, tokens, hard_limit)
        if hard_limit is None and tokens <= target.budget.budget:
            plan = passthrough(req, target, tokens, counted)
        elif not (up.compress and self.settings.compression.enabled):
            log.warning("over_budget_not_compressed", tokens=tokens, budget=target.budget.budget)
            note = "compression off for this route"
            plan = passthrough(req, target, tokens, counted, note=note)
        else:
            plan = await self._compress(ask, target, tokens, base, key, memo)
        return plan if fitted is None else lowered(plan, asked, fitted.reserved_output)

    def _model_info(self, ask: _Ask) -> ModelInfo | None:
        """The model's window as known (or as the upstream just named it in an error),
        with any long-context switch the client asked for; None: unknown."""
        req, hard_limit = ask.req, ask.hard_limit
        info = self.registry.lookup(req.model, ask.up.name)
        if hard_limit:  # kept for later turns (and persisted): they are not refused first
            self.registry.learn_limit(req.model, ask.up.name, hard_limit)
        if info is not None:
            return self.long_context.apply(info, ask.headers)
        if hard_limit:
            # Unknown to us, but the upstream just named its window in an error.
            out = min(self.settings.tokens.default_max_output_tokens, hard_limit // 4)
            return ModelInfo(req.model, hard_limit, out, None, "upstream-error", req.model)
        return None

    def _factor(self, model: str, target: Target) -> float:
        return 1.0 if target.counter.exact else self.calibration.factor(model)

    async def _count(self, ask: _Ask, base: CountTokens, bound: int) -> int:
        """The request's exact count; a large history is tokenized off the event loop."""
        if bound <= OFFLOAD_BOUND:
            return base(ask.req.messages)
        return await self.lanes.run(partial(base, ask.req.messages), bound=bound, client=ask.client)

    def _fitted_output(self, target: Target, tokens: int, asked: int | None) -> Budget | None:
        """The budget with the output reserve lowered to fit, when the client did not
        insist on its ``max_tokens``; None: no change."""
        if asked is not None and self.settings.compression.strict_max_tokens:
            return None
        share = min(target.info.max_output_tokens, self.settings.tokens.default_max_output_tokens)
        return fitted_output(target.budget, tokens, share)

    def close(self) -> None:
        """Stop the counting threads (at shutdown; running counts finish on their own)."""
        self.lanes.close()

    def warm(self) -> None:
        """Load the exact encodings now (blocking; run it in a thread at start-up), so
        the first request does not wait a second for a BPE file to be parsed."""
        for model in ("gpt-4o", "gpt-4"):
            self.tokens.for_model(model)

    def wants_usage(self, plan: Plan) -> bool:
        counter = plan.counter
        return plan.decision is not None and (
            bool(plan.raw_tokens) or (counter is not None and not counter.exact)
        )

    def observe(self, req: ChatRequest, plan: Plan, usage: object) -> None:
        """Feed the upstream's true prompt size into calibration."""
        decision = plan.decision
        if decision is None or not isinstance(usage, Mapping):
            return
        actual = usage.get("prompt_tokens")
        if not isinstance(actual, int):  # Anthropic's (or Responses') names
            actual = prompt_tokens(usage)
        if not isinstance(actual, int):
            return
        raw = plan.raw_tokens
        counter = plan.counter
        # The fast path skipped counting; approximate counts are the ones that need
        # correcting, so count now (after the reply) when it is cheap.
        if (
            raw is None
            and counter is not None
            and not counter.exact
            and counter.upper_bound(req.body) <= CALIBRATE_BOUND
        ):
            raw = counter.count_request(req.body)
        if raw:
            self.calibration.observe(req.model, raw, actual)

    def _corrected(self, model: str, counter: ModelCounter, counted: int) -> int:
        if counter.exact:
            return counted
        return self.calibration.corrected(model, counted)

    @staticmethod
    def _count_fn(factor: float, base: CountTokens) -> CountTokens:
        if factor == 1.0:
            return base
        return lambda messages: round(base(messages) * factor)

    async def _compress(
        self, ask: _Ask, target: Target, tokens: int, base: CountTokens, key: str, memo: TurnMemo
    ) -> Plan:
        """Run the policy chain. On a retry (the upstream refused what was sent) the cut
        remembered for this window may be that very one (a refusal with no limit named),
        so it is not replayed."""
        req, retry = ask.req, ask.hard_limit is not None
        calls, unused = await self._summarizer(ask, key)
        summarize = calls.summarize if calls is not None else None
        budget = target.budget.budget
        cut_key = (key, target.budget.window)
        ctx = PolicyContext(
            budget=budget,
            count=self._count_fn(memo.factor, base),
            target=low_water_target(budget, self.settings.compression.low_water),
            summarize=summarize,
            merge=calls.merge if calls is not None else None,
            previous=None if retry else self.cuts.get(cut_key),
            memo=memo.policies,
        )
        chain = build_chain(self.settings.compression, has_summarizer=summarize is not None)
        try:
            result = await compress(
                req.messages, ctx, chain, keep=self.settings.compression.elide.keep
            )
        except PinnedTooLarge as e:
            raise too_large(req.model, target.budget, e.pinned_tokens) from None
        if result.cut is not None:
            self.cuts.put(cut_key, result.cut)
        said = summary_said(result, unused, "summarize" in self.settings.compression.chain)
        return compressed(req, target, tokens, result, base(result.messages), said)

    async def _summarizer(self, ask: _Ask, key: str) -> tuple[SummaryCalls | None, str]:
        """The summarizer's calls, or None and why not."""
        req, up = ask.req, ask.up
        cfg = self.settings.compression.summarize
        if not cfg.enabled:
            return None, "compression.summarize.enabled is false"
        if self.summarizers is None:
            return None, "no summarizer in this process"
        where = cfg.upstream or up.name
        used = self.route_models.used(key, up.name) or (req.model,)
        least = least_window(cfg.max_tokens)
        model, window, why = choose(
            cfg.model, used, lambda m: self.registry.lookup(m, where), least
        )
        if model is None:
            return None, why
        count = None
        if (info := self.registry.lookup(model, where)) is not None:
            count = (await self.targets.counter(model, info)).count_text
        made = self.summarizers(req, up, ask.headers, SummarizerChoice(model, window, count))
        if made is None:
            return None, f"upstream {where!r} for summaries is not running"
        return made, ""
