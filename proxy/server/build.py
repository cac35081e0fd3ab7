"""Assemble the request path's parts from settings (no I/O here; the app starts them).

The store is :func:`proxy.store.configured.open_store`'s."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ParamSpec

from proxy.config import Settings
from proxy.decide.engine import Engine, SummarizerFactory, SummaryCalls
from proxy.decide.memory_llm import MemoryWriter
from proxy.decide.recall import RecallSource
from proxy.decide.summarizer import Summarizer, SummaryCache
from proxy.decide.summarizer_choice import SummarizerChoice
from proxy.decide.tokens import Calibration, TokenCounter
from proxy.decide.windows import WindowRegistry
from proxy.ingress.chat_request import ChatRequest
from proxy.server.memory_keeper import RefineFactory
from proxy.server.metrics import Metrics
from proxy.store.base import Store, TurnRecord
from proxy.store.remember import Refine
from proxy.upstream.routing import Router, Upstream

P = ParamSpec("P")


def build_engine(
    settings: Settings,
    router: Router,
    *,
    tokens: TokenCounter | None = None,
    metrics: Metrics | None = None,
    recall: RecallSource | None = None,
    store: Store | None = None,
) -> Engine:
    registry = WindowRegistry(settings.models, settings.tokens.default_context_window)
    cache = StoredSummaries(store) if store is not None else None
    return Engine(
        settings,
        registry,
        tokens or TokenCounter(settings.tokens.cache_size),
        Calibration(),
        summarizers=summarizer_factory(settings, router, metrics, cache),
        recall=recall,
    )


class StoredSummaries:
    """The store as the summarizer's cache: summaries survive a restart."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def get(self, key: str) -> str | None:
        return await asyncio.to_thread(self.store.load_summary, key)

    def put(self, key: str, text: str) -> None:
        self.store.save_summary(key, text)


def summarizer_factory(
    settings: Settings,
    router: Router,
    metrics: Metrics | None,
    cache: SummaryCache | None = None,
) -> SummarizerFactory:
    """Summaries go to ``compression.summarize.upstream`` (default: the request's own),
    with that upstream's key, or the client's when the upstream has none, written by
    the model the engine chose (:mod:`proxy.decide.summarizer_choice`), by map-reduce
    in calls that fit its window."""
    cfg = settings.compression.summarize

    def make(
        req: ChatRequest, up: Upstream, client_headers: Mapping[str, str], choice: SummarizerChoice
    ) -> SummaryCalls | None:
        target = router.by_name(cfg.upstream) if cfg.upstream else up
        if target is None or target.session is None or choice.model is None:
            return None
        summarizer = Summarizer(
            target.session,
            target.base_url,
            dict(target.request_headers(client_headers)),
            choice.model,
            cfg.timeout_s,
            cfg.max_tokens,
            input_tokens=_readable(choice.window, cfg.max_tokens, settings.tokens.approx_margin),
            count=choice.count,
            cache=cache,
        )
        if metrics is None:
            return SummaryCalls(summarizer, summarizer.merge)
        counter = metrics.summarizer_calls
        return SummaryCalls(_counted(summarizer, counter), _counted(summarizer.merge, counter))

    return make


def _counted(call: Callable[P, Awaitable[str]], counter: Any) -> Callable[P, Awaitable[str]]:
    """``call``, counting each answer in ``counter`` as "ok" or "error"."""

    async def counted(*args: P.args, **kwargs: P.kwargs) -> str:
        try:
            text = await call(*args, **kwargs)
        except Exception:
            counter.labels("error").inc()
            raise
        counter.labels("ok").inc()
        return text

    return counted


def memory_refiner(settings: Settings, router: Router) -> RefineFactory | None:
    """The LLM that refines session memories: the summarizer's upstream and model, when
    ``compression.summarize`` is enabled; else memories stay deterministic."""
    cfg = settings.compression.summarize
    if not cfg.enabled:
        return None

    def make(turn: TurnRecord, client_headers: Mapping[str, str]) -> Refine | None:
        target = router.by_name(cfg.upstream or turn.upstream)
        if target is None or target.session is None:
            return None
        writer = MemoryWriter(
            target.session,
            target.base_url,
            dict(target.request_headers(client_headers)),
            cfg.model or turn.model,
            cfg.timeout_s,
            max(cfg.max_tokens, 1024),
        )
        return writer

    return make


def _readable(window: int | None, answer: int, margin: float) -> int | None:
    """What the summarizer model reads in one call: its window less the answer and the
    safety margin approximate counts get (its tokenizer may not be ours)."""
    if window is None:
        return None
    return window - answer - math.ceil(window * margin)
