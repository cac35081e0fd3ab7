"""The compression chain as configured: ``compression.chain`` names, built into policies."""

from __future__ import annotations

from policies.base import Level
from policies.chain import POLICIES
from policies.summarize import Summarize
from proxy.config import CompressionSettings


def build_chain(settings: CompressionSettings, has_summarizer: bool) -> list[Level]:
    """The configured levels in order; ``summarize`` is skipped without a summarizer."""
    chain: list[Level] = []
    for name in settings.chain:
        if name not in POLICIES:
            raise ValueError(
                f"compression.chain: unknown policy {name!r} (known: {', '.join(POLICIES)})"
            )
        if name == "summarize":
            if has_summarizer:
                chain.append(Summarize(settings.summarize.max_tokens))
        else:
            chain.append(POLICIES[name]())
    return chain
