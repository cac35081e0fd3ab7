"""The counting lanes: large counts a client at a time, ordinary ones never behind them.

The counts are real threads held on events, so each test decides exactly what is
running; every wait is bounded.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable

import pytest

from proxy.decide.count_lanes import LARGE_BOUND, CountLanes

LARGE = LARGE_BOUND + 1


def held(release: threading.Event, started: threading.Event | None = None) -> Callable[[], str]:
    """A count that runs until ``release`` is set (at most 10 s)."""

    def count() -> str:
        if started is not None:
            started.set()
        release.wait(10)
        return "done"

    return count


@pytest.fixture
async def lanes() -> AsyncIterator[CountLanes]:
    lanes = CountLanes(workers=2, large_workers=2)
    yield lanes
    lanes.close()


async def test_ordinary_counts_do_not_queue_behind_large_ones(lanes: CountLanes) -> None:
    """With both large threads busy and more large counts waiting, an ordinary count runs."""
    release = threading.Event()
    big = [
        asyncio.create_task(lanes.run(held(release), bound=LARGE, client=f"c{i % 2}"))
        for i in range(6)
    ]
    await asyncio.sleep(0.05)
    async with asyncio.timeout(2):
        assert await lanes.run(lambda: "small", bound=50_000, client="c0") == "small"
    release.set()
    async with asyncio.timeout(10):
        assert await asyncio.gather(*big) == ["done"] * 6


async def test_a_client_holds_one_large_thread(lanes: CountLanes) -> None:
    """A client's second large count waits for its first; another client's starts at once."""
    release, first_started = threading.Event(), threading.Event()
    second_started, other_started = threading.Event(), threading.Event()
    first = asyncio.create_task(lanes.run(held(release, first_started), bound=LARGE, client="a"))
    second = asyncio.create_task(lanes.run(held(release, second_started), bound=LARGE, client="a"))
    other = asyncio.create_task(lanes.run(held(release, other_started), bound=LARGE, client="b"))
    async with asyncio.timeout(5):
        while not (first_started.is_set() and other_started.is_set()):
            await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)
    assert not second_started.is_set()
    release.set()
    async with asyncio.timeout(10):
        await asyncio.gather(first, second, other)
    assert second_started.is_set() and lanes.waiting_clients == 0


async def test_giving_up_does_not_free_the_thread_early(lanes: CountLanes) -> None:
    """A client that cancels its running large count keeps its turn until the thread ends:
    disconnecting cannot stack a client's counts in the large lane."""
    release, started, next_started = threading.Event(), threading.Event(), threading.Event()
    first = asyncio.create_task(lanes.run(held(release, started), bound=LARGE, client="a"))
    async with asyncio.timeout(5):
        while not started.is_set():
            await asyncio.sleep(0.01)
    first.cancel()
    second = asyncio.create_task(lanes.run(held(release, next_started), bound=LARGE, client="a"))
    await asyncio.sleep(0.1)
    assert not next_started.is_set()
    release.set()
    async with asyncio.timeout(10):
        assert await second == "done"
    assert first.cancelled() and lanes.waiting_clients == 0


async def test_a_cancelled_waiting_count_never_runs(lanes: CountLanes) -> None:
    """A large count given up on while it waits for its client's turn is dropped."""
    release, ran = threading.Event(), threading.Event()
    first = asyncio.create_task(lanes.run(held(release), bound=LARGE, client="a"))
    waiting = asyncio.create_task(lanes.run(ran.set, bound=LARGE, client="a"))
    await asyncio.sleep(0.05)
    waiting.cancel()
    release.set()
    async with asyncio.timeout(10):
        assert await first == "done"
    await asyncio.sleep(0.05)
    assert not ran.is_set() and lanes.waiting_clients == 0
