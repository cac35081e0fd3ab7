"""Larger windows some Claude models get when the request asks for them with a beta
header (``anthropic-beta: context-1m-2025-08-07``): 1,000,000 tokens for Claude Sonnet 4
and 4.5 (docs.anthropic.com, "1M token context window"), where the built-in table
says 200,000. A config override or a discovered window is never widened: it is the
operator's word or the upstream's."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from proxy.decide.windows.registry import ModelInfo

LONG_CONTEXT = {"claude-sonnet-4": 1_000_000, "claude-sonnet-4-5": 1_000_000}
"""Built-in table keys and the window the ``context-1m-`` beta gives them."""
BETA_PREFIX = "context-1m-"


def asks_long_context(headers: Mapping[str, str] | None) -> bool:
    """Does the request's ``anthropic-beta`` header name a ``context-1m-…`` beta?"""
    if not headers:
        return False
    beta = headers.get("anthropic-beta", "")
    return BETA_PREFIX in beta and any(b.strip().startswith(BETA_PREFIX) for b in beta.split(","))


class LongContext:
    """Widens a built-in Claude window for requests that ask for the 1M beta; the same
    widened :class:`ModelInfo` object each time (the engine memoises by identity)."""

    def __init__(self) -> None:
        self._widened: dict[int, tuple[ModelInfo, ModelInfo]] = {}

    def apply(self, info: ModelInfo, headers: Mapping[str, str] | None) -> ModelInfo:
        window = LONG_CONTEXT.get(info.matched) if info.source == "builtin" else None
        if window is None or not asks_long_context(headers):
            return info
        hit = self._widened.get(id(info))
        if hit is None or hit[0] is not info:
            if len(self._widened) > 1024:
                self._widened.clear()
            wide = dataclasses.replace(info, context_window=window, source="builtin:context-1m")
            hit = (info, wide)
            self._widened[id(info)] = hit
        return hit[1]
