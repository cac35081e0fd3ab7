"""Calibration: per-model factor from upstream usage, robust, persistable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.decide.tokens import Calibration, TokenCounter
from proxy.decide.tokens.calibration import MAX_FACTOR, MIN_FACTOR
from tests.fake_upstream import FakeUpstream


def test_no_sample_means_factor_one() -> None:
    """Before any reply, counts are not corrected."""
    cal = Calibration()
    assert cal.factor("m") == 1.0
    assert cal.corrected("m", 1000) == 1000


def test_converges_to_constant_ratio() -> None:
    """A steady true/counted ratio is learned, per model."""
    cal = Calibration()
    for counted in range(1000, 1030):
        cal.observe("claude", counted, round(counted * 1.25))
    assert cal.factor("claude") == pytest.approx(1.25, abs=0.01)
    assert cal.factor("other") == 1.0
    assert cal.corrected("claude", 1000) == pytest.approx(1250, abs=10)


def test_outliers_and_bad_samples_ignored() -> None:
    """Zero counts and implausible ratios (e.g. cached or truncated prompts) are dropped."""
    cal = Calibration()
    cal.observe("m", 1000, 1100)
    cal.observe("m", 0, 500)
    cal.observe("m", 1000, 0)
    cal.observe("m", 1000, 100_000)
    assert cal.samples("m") == 1
    assert cal.factor("m") == pytest.approx(1.1)


@given(st.lists(st.tuples(st.integers(1, 10**6), st.integers(1, 10**6)), max_size=50))
def test_factor_always_clamped(samples: list[tuple[int, int]]) -> None:
    """Whatever is observed, the factor stays within [0.5, 2]."""
    cal = Calibration()
    for counted, actual in samples:
        cal.observe("m", counted, actual)
    assert MIN_FACTOR <= cal.factor("m") <= MAX_FACTOR


def test_snapshot_round_trip() -> None:
    """snapshot() then load() restores factors; junk entries are skipped."""
    cal = Calibration()
    cal.observe("a", 100, 120)
    snap = cal.snapshot()
    other = Calibration()
    other.load({"models": {**snap["models"], "bad": {"factor": "x"}, "neg": {"factor": -1}}})
    assert other.factor("a") == pytest.approx(1.2)
    assert other.samples("a") == 1
    assert other.samples("bad") == 0 and other.samples("neg") == 0
    other.load({"nonsense": 1})


async def test_converges_on_fake_upstream_usage(aiohttp_server: Any, tmp_path: Path) -> None:
    """Corrected counts approach the fake upstream's own usage.prompt_tokens."""
    fake = FakeUpstream()
    server = await aiohttp_server(fake.app(), host="127.0.0.1")
    url = str(server.make_url("/v1/chat/completions"))
    mc = TokenCounter(1000, tmp_path).for_model("claude-sonnet-4-5", None)
    cal = Calibration()
    history: list[dict[str, Any]] = []
    errors: list[float] = []
    async with aiohttp.ClientSession() as session:
        for turn in range(12):
            history.append(
                {"role": "user", "content": f"Turn {turn}: please summarise the plan again. " * 8}
            )
            body = {"model": "gpt-4o", "messages": history}
            counted = mc.count_request(body)
            async with session.post(url, json=body) as resp:
                usage = (await resp.json())["usage"]
            errors.append(abs(cal.corrected("m", counted) - usage["prompt_tokens"]))
            cal.observe("m", counted, usage["prompt_tokens"])
            history.append({"role": "assistant", "content": "Noted. " * 5})
    assert cal.samples("m") == 12
    assert errors[-1] < errors[0]
    assert errors[-1] / usage["prompt_tokens"] < 0.05
