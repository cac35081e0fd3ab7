"""The writer in a process of its own: what crosses the pipe, and a writer that dies."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.decide.decision import Decision
from proxy.store.base import TurnRecord, settled
from proxy.store.process import ProcessStore
from proxy.store.read import SqliteReader
from proxy.store.shipped import HeldMessages, ShippedBodies
from proxy.store.wire import decode, encode_calibration, encode_turn, frames
from proxy.store.writer_process import HEAD
from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream
from tests.polling import wait_until
from tests.server.test_faults import BOUND, health, until
from tests.store.test_fixtures import conversation

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
messages = st.lists(
    st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]), "content": json_values}),
    max_size=5,
)


def _record(msgs: list[dict[str, Any]], raw: bool, **kw: Any) -> TurnRecord:
    body = orjson.dumps({"model": "m", "messages": msgs, "temperature": 0.5}) if raw else None
    return TurnRecord(workspace="w", started_at=1.5, model="m", upstream="u", messages=msgs,
                      raw_request=body, **kw)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(msgs=messages, raw=st.booleans(), reply=st.none() | json_values, sse=st.binary(max_size=40))
def test_turns_cross_the_pipe_unchanged(
    msgs: list[dict[str, Any]], raw: bool, reply: Any, sse: bytes
) -> None:
    """A turn decodes to an equal record, whether its messages travel raw or as JSON."""
    decision = Decision("compressed", 8000, 7000, 9000, 6000, False, ("truncate",),
                        ({"policy": "truncate", "removed": 3},))  # fmt: skip
    turn = _record(msgs, raw, reply={"role": "assistant", "content": reply}, decision=decision,
                   raw_response=sse or None, request_params={"temperature": 0.5}, status=200)  # fmt: skip
    cal = {"gpt-4o": 1.25}
    wire = b"".join(frames([encode_turn(turn), encode_calibration(cal)], ShippedBodies()))
    # The same record, without the body the writer does not need (its parse travels).
    assert list(decode(wire, HeldMessages())) == [dataclasses.replace(turn, raw_request=None), cal]


async def test_turns_reach_the_store_and_health_drains(tmp_path: Path) -> None:
    store = ProcessStore(tmp_path / "h.db")
    await store.start()
    assert store.health().ok and store.writer_pid not in (None, os.getpid())
    if sys.platform == "linux":  # background work that never preempts request handling
        assert wait_until(lambda: os.sched_getscheduler(store.writer_pid) == os.SCHED_BATCH)
    for t in conversation(12):
        store.record(t)
    store.save_calibration({"gpt-4o": 1.1})
    await store.close()
    assert store.health().queue_depth == 0 and store.health().write_failures == 0
    (session,) = SqliteReader(tmp_path / "h.db").list_sessions()
    assert session["turns"] == 12
    assert store.load_calibration() == {"gpt-4o": 1.1}


def test_a_killed_writer_is_restarted_and_the_loss_reported(tmp_path: Path) -> None:
    """SIGKILL the writer process: the store says so, starts another, and keeps writing."""
    path = tmp_path / "h.db"
    store = ProcessStore(path)
    store.open()
    turns = conversation(6)
    for t in turns[:3]:
        store.record(t)
    assert wait_until(lambda: store.health().queue_depth == 0)
    first = store.writer_pid
    assert first is not None
    os.kill(first, signal.SIGKILL)
    assert wait_until(lambda: not store.health().ok)
    for t in turns[3:]:
        store.record(t)
    assert wait_until(lambda: store.writer_pid != first and store.health().queue_depth == 0)
    store.shutdown()
    assert "exited" in (store.health().last_error or "")
    assert [s["turns"] for s in SqliteReader(path).list_sessions()] == [6]


def test_health_tells_the_age_of_the_oldest_unwritten_turn(tmp_path: Path) -> None:
    """A stopped writer holds what it was shipped: health dates it from when it was
    queued, and says nothing once it is written."""
    store = ProcessStore(tmp_path / "h.db")
    store.open()
    turns = conversation(3)
    store.record(turns[0])
    assert wait_until(lambda: store.health().queue_depth == 0)
    assert store.health().oldest_unwritten_s is None
    pid = store.writer_pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        for t in turns[1:]:
            store.record(t)
        time.sleep(0.4)
        age = store.health().oldest_unwritten_s
        assert age is not None and 0.4 <= age < 5
    finally:
        os.kill(pid, signal.SIGCONT)
    assert wait_until(lambda: store.health().oldest_unwritten_s is None)
    assert store.health().slowest_write_s >= 0.4  # how long they waited, kept
    store.shutdown()
    assert [s["turns"] for s in SqliteReader(tmp_path / "h.db").list_sessions()] == [3]


def test_what_is_dated_is_let_go_without_health_being_asked(tmp_path: Path) -> None:
    """The dates of shipped batches are dropped as the writer reports them written,
    not only when someone asks for health: a proxy nobody polls must not grow."""
    store = ProcessStore(tmp_path / "h.db")
    store.open()
    for t in conversation(40):
        store.record(t)
        time.sleep(0.005)  # several batches
    child = store._child
    assert child is not None and wait_until(lambda: child.shipped == 40 and not child.in_flight)
    store.shutdown()


def _wakeups(pid: int) -> int:
    """How many times ``pid``'s threads have been scheduled in (``schedstat``)."""
    return sum(
        int((task / "schedstat").read_text().split()[2])
        for task in Path(f"/proc/{pid}/task").iterdir()
    )


@pytest.mark.skipif(
    not Path(f"/proc/{os.getpid()}/schedstat").exists(), reason="counts wake-ups in /proc"
)
def test_an_idle_writer_wakes_a_few_times_a_second(tmp_path: Path) -> None:
    """An idle writer reports when something changes and once a second, not by polling,
    and its SQLite thread sleeps while nothing is pending: its threads wake a few times
    a second (polling every 0.05 and 0.2 s made it ~25)."""
    store = ProcessStore(tmp_path / "h.db")
    store.open()
    store.record(conversation(1)[0])
    assert wait_until(lambda: store.health().queue_depth == 0)
    pid = store.writer_pid
    assert pid is not None
    time.sleep(0.5)
    before = _wakeups(pid)
    time.sleep(3.0)
    per_s = (_wakeups(pid) - before) / 3.0
    store.shutdown()
    assert per_s < 5


@pytest.mark.parametrize("required", [False, True])
async def test_an_unopenable_store_is_degraded_from_the_start(
    tmp_path: Path, required: bool
) -> None:
    """The writer process tries the file before the proxy serves: health says why at once."""
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    store = ProcessStore(blocker / "h.db")
    await store.start()
    try:
        h = store.health()
        assert not h.ok and h.last_error and "FileExistsError" in h.last_error
        assert h.write_failures >= 1  # counted as it is reported
    finally:
        await store.close()


async def test_a_writer_that_cannot_start_never_breaks_recording(tmp_path: Path) -> None:
    """No writer process at all (its interpreter is missing): record() still returns at
    once, health says why, and closing does not hang."""
    store = ProcessStore(tmp_path / "h.db")
    store._argv[0] = str(tmp_path / "no-such-python")  # the one fault we cannot cause outside
    await store.start()
    for t in conversation(3):
        store.record(t)
    h = store.health()
    assert not h.ok and h.last_error and "cannot start the store writer" in h.last_error
    await asyncio.wait_for(store.close(), 10)


def test_an_unparsed_answer_crosses_the_pipe_and_is_read_by_the_writer() -> None:
    """The proxy hands a non-streamed answer over as received; the writer reads reply,
    finish_reason and usage (or the error) from it, as the proxy would have."""
    answer = orjson.dumps(
        {
            "choices": [
                {"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
        }
    )
    for status, body, expect in [
        (200, answer, ({"role": "assistant", "content": "hi"}, "stop", {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}, None)),
        (429, b'{"error": {"message": "slow down"}}', (None, None, None, {"error": {"message": "slow down"}})),
        (502, b"<html>bad gateway</html>", (None, None, None, {"error": {"message": "<html>bad gateway</html>"}})),
        (200, b"not json", (None, None, None, None)),
    ]:  # fmt: skip
        turn = _record([{"role": "user", "content": "x"}], True, status=status, answer=body)
        (got,) = decode(b"".join(frames([encode_turn(turn)], ShippedBodies())), HeldMessages())
        assert isinstance(got, TurnRecord) and got.answer is None and got.raw_response is None
        assert (got.reply, got.finish_reason, got.usage, got.error) == expect
        assert settled(got) is got  # read once, in decode


async def test_a_writer_killed_under_load_reports_exactly_the_turns_lost(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """kill -9 of the writer process under load, three times (the first stopped first, so
    that it surely holds turns it had not committed; the others as they come): /healthz
    is degraded and its ``lost_turns`` is exactly the turns the clients completed that
    the store lacks."""
    db = tmp_path / "h.db"
    store = ProcessStore(db)
    proxy = await make_proxy(fake_upstream.url, store_obj=store, store={"max_lag_s": 0})
    completed = 0
    stop = asyncio.Event()

    async def client(s: aiohttp.ClientSession, k: int) -> None:
        nonlocal completed
        for i in range(5_000):  # bounded; stopped much sooner
            if stop.is_set():
                return
            body = {"model": "gpt-4o", "messages": [{"role": "user", "content": f"c{k} n{i}"}]}
            async with s.post(proxy.url + "/chat/completions", json=body) as r:
                assert r.status == 200
                await r.read()
            completed += 1

    async def kill_writer(stop_first: bool) -> None:
        before = completed
        await until(lambda: completed >= before + 40, 20)
        child, pid = store._child, store.writer_pid
        assert child is not None and pid is not None
        if stop_first:
            os.kill(pid, signal.SIGSTOP)
            shipped = child.shipped
            await until(lambda: child.shipped >= shipped + 10, 20)  # handed over, not written
        os.kill(pid, signal.SIGKILL)
        await until(lambda: store.writer_pid not in (None, pid), 20)  # a new writer

    async with aiohttp.ClientSession(timeout=BOUND) as s:
        load = asyncio.gather(*(client(s, k) for k in range(6)))
        try:
            for stop_first in (True, False, False):
                await kill_writer(stop_first)
            at_restart = completed
            await until(lambda: completed >= at_restart + 40, 20)
        finally:
            stop.set()
            await load
        await until(lambda: store.health().queue_depth == 0, 20)
        state = await health(proxy)
    stored = sum(s["turns"] for s in SqliteReader(db).list_sessions(limit=100_000))
    assert state["status"] == "degraded" and state["store"]["ok"] is True  # writing again
    assert state["store"]["lost_turns"] == completed - stored >= 10, (completed, stored)


def test_a_batch_cut_short_by_the_proxy_s_death_keeps_its_whole_turns(tmp_path: Path) -> None:
    """kill -9 of the proxy in the middle of writing a batch (the writer behind, the socket
    full): the writer still writes the batch's turns that arrived whole, and not the one
    cut in two."""
    turns = [_record([{"role": "user", "content": f"cut {i}"}], True) for i in range(3)]
    pieces = frames([encode_turn(t) for t in turns], ShippedBodies())
    wire = b"".join(pieces)
    cut = len(wire) - len(pieces[-2]) // 2 - sum(map(len, pieces[-1:]))  # inside the last
    argv = ProcessStore(tmp_path / "h.db")._argv  # the writer as the store starts it
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    assert proc.stdin is not None
    proc.stdin.write(HEAD.pack(len(wire), 0) + wire[:cut])
    proc.stdin.close()  # as the proxy's death closes it
    assert proc.wait(20) == 0
    titles = sorted(s["title"] for s in SqliteReader(tmp_path / "h.db").list_sessions())
    assert titles == ["cut 0", "cut 1"]
