"""Assemble the request path's parts from settings (no I/O here; the app starts them).

The store is :func:`proxy.store.configured.open_store`'s."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from policies.base import Message, Summarize
from proxy.config import Settings
from proxy.decide.engine import Engine, SummarizerFactory
from proxy.decide.summarizer import Summarizer
from proxy.decide.tokens import Calibration, TokenCounter
from proxy.decide.windows import WindowRegistry
from proxy.ingress.chat_request import ChatRequest
from proxy.server.metrics import Metrics
from proxy.upstream.routing import Router, Upstream


def build_engine(
    settings: Settings,
    router: Router,
    *,
    tokens: TokenCounter | None = None,
    metrics: Metrics | None = None,
) -> Engine:
    registry = WindowRegistry(settings.models, settings.tokens.default_context_window)
    return Engine(
        settings,
        registry,
        tokens or TokenCounter(settings.tokens.cache_size),
        Calibration(),
        summarizers=summarizer_factory(settings, router, metrics),
    )


def summarizer_factory(
    settings: Settings, router: Router, metrics: Metrics | None
) -> SummarizerFactory:
    """Summaries go to ``compression.summarize.upstream`` (default: the request's own),
    with that upstream's key, or the client's when the upstream has none."""
    cfg = settings.compression.summarize

    def make(req: ChatRequest, up: Upstream, client_headers: Mapping[str, str]) -> Summarize | None:
        target = router.by_name(cfg.upstream) if cfg.upstream else up
        if target is None or target.session is None:
            return None
        summarizer = Summarizer(
            target.session,
            target.base_url,
            dict(target.request_headers(client_headers)),
            cfg.model or req.model,
            cfg.timeout_s,
            cfg.max_tokens,
        )
        if metrics is None:
            return summarizer

        async def counted(messages: Sequence[Message], previous: str | None) -> str:
            try:
                text = await summarizer(messages, previous)
            except Exception:
                metrics.summarizer_calls.labels("error").inc()
                raise
            metrics.summarizer_calls.labels("ok").inc()
            return text

        return counted

    return make
