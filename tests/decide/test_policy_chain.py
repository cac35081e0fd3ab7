"""The configured chain: names to levels, with their settings."""

from __future__ import annotations

import pytest

from policies.chain import DEFAULT_CHAIN, POLICIES
from proxy.config import CompressionSettings
from proxy.decide.policy_chain import build_chain


def test_build_chain_default_and_without_summarizer() -> None:
    """The default chain gives up the cheapest first; summarize goes without a summarizer."""
    s = CompressionSettings()
    assert tuple(s.chain) == DEFAULT_CHAIN
    assert [p.name for p in build_chain(s, True)] == list(DEFAULT_CHAIN)
    assert [p.name for p in build_chain(s, False)] == [n for n in DEFAULT_CHAIN if n != "summarize"]
    assert set(POLICIES) >= {*DEFAULT_CHAIN, "middle-out"}


def test_build_chain_passes_the_summarizer_budget() -> None:
    """summarize reserves the summarizer's max_tokens for the summary it will write."""
    s = CompressionSettings.model_validate(
        {"chain": ["summarize"], "summarize": {"max_tokens": 77}}
    )
    (summarize,) = build_chain(s, True)
    assert summarize.reserve_tokens == 77  # type: ignore[attr-defined]


def test_build_chain_unknown_name() -> None:
    """An unknown policy name is a ValueError that names it."""
    s = CompressionSettings(chain=["truncate", "squash"])
    with pytest.raises(ValueError, match="'squash'"):
        build_chain(s, True)


def test_low_water_is_a_share_or_auto() -> None:
    """compression.low_water is "auto" or a share of the budget in (0, 1]."""
    assert CompressionSettings(low_water=0.7).low_water == 0.7
    with pytest.raises(ValueError, match="low_water"):
        CompressionSettings(low_water=1.5)
