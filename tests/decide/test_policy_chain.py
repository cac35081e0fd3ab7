"""The configured chain: names to policies, with their settings."""

from __future__ import annotations

import pytest

from policies.chain import POLICIES
from policies.elide_tool_results import ElideToolResults
from proxy.config import CompressionSettings
from proxy.decide.policy_chain import build_chain


def test_build_chain_default_and_without_summarizer() -> None:
    """The default chain is elide → summarize → truncate; summarize goes without a summarizer."""
    s = CompressionSettings()
    assert [p.name for p in build_chain(s, True)] == ["elide-tool-results", "summarize", "truncate"]
    assert [p.name for p in build_chain(s, False)] == ["elide-tool-results", "truncate"]
    assert set(POLICIES) >= {"elide-tool-results", "summarize", "truncate", "middle-out"}


def test_build_chain_passes_elide_settings() -> None:
    """Elide's keep/min_tokens/elide_arguments come from the settings."""
    s = CompressionSettings.model_validate(
        {"chain": ["elide-tool-results"], "elide": {"keep": 7, "min_tokens": 9}}
    )
    (elide,) = build_chain(s, False)
    assert isinstance(elide, ElideToolResults) and (elide.keep, elide.min_tokens) == (7, 9)


def test_build_chain_unknown_name() -> None:
    """An unknown policy name is a ValueError that names it."""
    s = CompressionSettings(chain=["truncate", "squash"])
    with pytest.raises(ValueError, match="'squash'"):
        build_chain(s, True)
