"""Which model writes a summary: the configured one, else the largest window the
conversation used on the route, and never one that cannot hold a summary call."""

from __future__ import annotations

from proxy.decide.summarizer_choice import RouteModels, choose
from proxy.decide.windows import ModelInfo

WINDOWS = {"big": 128_000, "small": 8192, "tiny": 2048}


def lookup(model: str) -> ModelInfo | None:
    w = WINDOWS.get(model)
    return None if w is None else ModelInfo(model, w, 1024, None, "config", model)


def test_the_largest_window_used_wins_unless_one_is_configured() -> None:
    """After a switch down the big model is chosen; a configured model always wins."""
    assert choose(None, ["small", "big"], lookup, 4096) == ("big", 128_000, "")
    assert choose("small", ["big"], lookup, 4096) == ("small", 8192, "")
    assert choose("unknown", [], lookup, 4096) == ("unknown", None, "")


def test_no_model_that_cannot_hold_a_call() -> None:
    """Only a 2k model, or none known: no summarizer, and why, naming the setting."""
    model, _, why = choose(None, ["tiny"], lookup, 4096)
    assert model is None and "compression.summarize.model" in why and "tiny" in why
    model, _, why = choose(None, ["mystery"], lookup, 4096)
    assert model is None and "known window" in why


def test_route_models_remember_per_conversation_and_route() -> None:
    """Models are kept per (conversation, upstream), in order, bounded."""
    seen = RouteModels(capacity=2)
    seen.saw("c1", "u", "big")
    seen.saw("c1", "u", "small")
    seen.saw("c1", "u", "big")
    assert seen.used("c1", "u") == ("big", "small")
    assert seen.used("c1", "other") == ()
    seen.saw("c2", "u", "x")
    seen.saw("c3", "u", "y")
    assert seen.used("c1", "u") == ()  # the oldest went
