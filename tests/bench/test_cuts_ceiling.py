"""The ceiling bench_cuts reports beside each prefix-kept share, and its reuse measure."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from bench.bench_cuts import ceiling, common_tokens, replay


def test_requests_that_all_fit_never_break() -> None:
    assert ceiling([100, 10, 10, 10], budget=1000) == 1.0


def test_each_request_too_large_to_join_the_last_breaks_once() -> None:
    # after the first, 600 + 600 > 1000: every later request breaks
    assert ceiling([600, 600, 600, 600, 600], budget=1000) == 0.0
    # 300s fit three to a budget: the 2nd, 3rd append, the 4th breaks, and so on
    assert ceiling([1000, 300, 300, 300, 300, 300, 300], budget=1000) == round(1 - 2 / 6, 4)


@given(st.lists(st.integers(1, 3000), min_size=2, max_size=60), st.integers(500, 8000))
def test_the_ceiling_is_a_share_and_smaller_requests_never_lower_it(
    sizes: list[int], budget: int
) -> None:
    top = ceiling(sizes, budget)
    assert 0.0 <= top <= 1.0
    assert ceiling([max(1, s // 2) for s in sizes], budget) >= top


def test_reused_tokens_stop_at_the_first_changed_message() -> None:
    count = len  # one token a message, for the test
    old = [{"a": 1}, {"b": 2}, {"c": 3}]
    assert common_tokens(old, [*old, {"d": 4}], count) == 3
    assert common_tokens(old, [{"a": 1}, {"b": 9}, {"c": 3}], count) == 1
    assert common_tokens(old, [{"z": 0}, *old], count) == 0


def test_a_replayed_agent_loop_stays_under_its_ceiling() -> None:
    row = asyncio.run(replay("agent", "exact-model", 120, 8192))
    assert row["compressed"] > 50
    assert row["prefix_kept_share"] <= row["ceiling"]
    assert 0 < row["tokens_reused_share"] <= 1


def test_a_kept_system_prompt_lowers_the_ceiling() -> None:
    sizes = [900, 300, 300, 300, 300, 300, 300, 300]
    assert ceiling(sizes, 1000, floor=400) < ceiling(sizes, 1000)
