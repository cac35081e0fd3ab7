"""Assemble the request path's parts from settings (no I/O here; the app starts them)."""

from __future__ import annotations

from proxy.config import Settings
from proxy.engine import Engine, SummarizerFactory
from proxy.store.base import Store
from proxy.store.sqlite import SqliteStore
from proxy.tokens import Calibration, TokenCounter
from proxy.upstreams import Router
from proxy.windows import WindowRegistry


def build_engine(
    settings: Settings,
    router: Router,
    *,
    tokens: TokenCounter | None = None,
    summarizers: SummarizerFactory | None = None,
) -> Engine:
    registry = WindowRegistry(settings.models, settings.tokens.default_context_window)
    return Engine(
        settings,
        router,
        registry,
        tokens or TokenCounter(settings.tokens.cache_size),
        Calibration(),
        summarizers=summarizers,
    )


def open_store(settings: Settings) -> Store | None:
    if not settings.store.enabled:
        return None
    s = settings.store
    return SqliteStore(
        settings.store_path(),
        flush_interval_s=s.flush_interval_s,
        redact=s.redact,
        max_bytes=s.max_bytes,
    )
