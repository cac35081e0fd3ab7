"""Budget math: window - reserved output - margin, and the x-handoff headers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.config import TokenSettings
from proxy.decide.budget import Budget, budget_headers, compute_budget
from proxy.decide.windows import ModelInfo

INFO = ModelInfo("m", 100_000, 16_384, "o200k_base", "builtin", "m")
TOKENS = TokenSettings(default_max_output_tokens=4096, margin=0.02, approx_margin=0.10)


@pytest.mark.parametrize(
    ("body", "exact", "override", "expected"),
    [
        ({}, True, None, Budget(100_000, 4096, 2000, 93_904)),
        ({}, False, None, Budget(100_000, 4096, 10_000, 85_904)),
        ({"max_tokens": 1000}, True, None, Budget(100_000, 1000, 2000, 97_000)),
        (
            {"max_tokens": 1000, "max_completion_tokens": 500},
            True,
            None,
            Budget(100_000, 500, 2000, 97_500),
        ),
        ({}, True, 0.25, Budget(100_000, 4096, 25_000, 70_904)),
        ({"max_tokens": 200_000}, True, None, Budget(100_000, 200_000, 2000, 0)),
        ({"max_tokens": "lots"}, True, None, Budget(100_000, 4096, 2000, 93_904)),
    ],
)
def test_compute_budget(
    body: dict[str, Any], exact: bool, override: float | None, expected: Budget
) -> None:
    """Requested output wins over the default; margins differ by exactness and override."""
    assert compute_budget(INFO, body, TOKENS, exact, override) == expected


def test_reserved_is_capped_by_model_max_output() -> None:
    """Without max_tokens the reserve is min(model max output, configured default)."""
    small = ModelInfo("s", 8192, 1024, None, "builtin", "s")
    assert compute_budget(small, {}, TOKENS, True).reserved_output == 1024


@given(
    window=st.integers(1, 10**7),
    reserved=st.one_of(st.none(), st.integers(0, 10**7)),
    margin=st.floats(0, 0.99),
)
def test_budget_never_negative_nor_above_window(
    window: int, reserved: int | None, margin: float
) -> None:
    """The budget is between 0 and the window."""
    info = ModelInfo("m", window, window, None, "builtin", "m")
    body = {} if reserved is None else {"max_tokens": reserved}
    b = compute_budget(info, body, TOKENS, True, margin)
    assert 0 <= b.budget <= window
    assert b.fits(b.budget) and not b.fits(b.budget + 1)


def test_budget_headers() -> None:
    """The four x-handoff headers carry window, budget, count and exactness."""
    b = Budget(128_000, 4096, 2560, 121_344)
    assert budget_headers(b, 5000, False) == {
        "x-handoff-window": "128000",
        "x-handoff-budget": "121344",
        "x-handoff-tokens": "5000",
        "x-handoff-tokens-exact": "false",
    }
