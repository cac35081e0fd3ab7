"""The 1M-token beta widens only built-in Claude Sonnet 4/4.5 windows, and only when asked."""

from __future__ import annotations

from proxy.config import Settings
from proxy.decide.windows import WindowRegistry
from proxy.decide.windows.long_context import LongContext, asks_long_context


def test_beta_header_widens_the_built_in_window() -> None:
    """``anthropic-beta: …context-1m-…`` gives Sonnet 4.5 1M; other models and config
    windows stay as they are; the widened info is one object per base info."""
    registry = WindowRegistry(
        overrides=Settings(models={"claude-opus-4-5": {"context_window": 9000}}).models
    )
    wide = LongContext()
    beta = {"anthropic-beta": "interleaved-thinking-2025-05-14, context-1m-2025-08-07"}
    sonnet = registry.lookup("claude-sonnet-4-5-20250929")
    assert sonnet is not None and sonnet.context_window == 200_000
    first = wide.apply(sonnet, beta)
    assert first.context_window == 1_000_000 and wide.apply(sonnet, beta) is first
    assert wide.apply(sonnet, {"anthropic-beta": "interleaved-thinking-2025-05-14"}) is sonnet
    assert wide.apply(sonnet, None) is sonnet
    haiku = registry.lookup("claude-haiku-4-5")
    assert haiku is not None and wide.apply(haiku, beta) is haiku
    opus = registry.lookup("claude-opus-4-5")
    assert opus is not None and opus.source == "config" and wide.apply(opus, beta) is opus
    assert not asks_long_context({"anthropic-beta": "no-context-1m-here"})
