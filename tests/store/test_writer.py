"""The background writer: a broken store never breaks record(), and kill -9 loses nothing."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from proxy.store.errors import StoreMissingError
from proxy.store.read import SqliteReader
from proxy.store.sqlite import SqliteStore
from tests.polling import wait_until
from tests.store.test_fixtures import conversation, turn

A1 = {"role": "assistant", "content": "hi"}


def test_unwritable_path_keeps_accepting_and_reports(tmp_path: Path) -> None:
    """With the store path under a regular file, record() still returns; health is not ok."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = SqliteStore(blocker / "handoff.db", flush_interval_s=0.05)
    store.open()
    for t in conversation(3):
        store.record(t)
    assert wait_until(lambda: store.health().write_failures > 0)
    health = store.health()
    assert not health.ok and health.last_error and health.queue_depth == 3
    store.shutdown()


def test_a_failure_at_open_is_counted_as_it_is_reported(tmp_path: Path) -> None:
    """A store that cannot be opened is degraded from open(), and health says so
    consistently at once: a failure counted and its error, before any turn is tried
    (a degraded /healthz with ``write_failures`` 0 made a test flaky)."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    store = SqliteStore(blocker / "handoff.db", flush_interval_s=60)
    store.open()
    try:
        health = store.health()
        assert not health.ok and health.write_failures == 1 and health.last_error
        assert health.lost_turns == 0  # nothing was handed to it yet
    finally:
        store.shutdown()


def test_locked_store_recovers_and_writes_everything(tmp_path: Path) -> None:
    """While another process holds the write lock turns queue up; afterwards all are written."""
    path = tmp_path / "h.db"
    store = SqliteStore(path, flush_interval_s=0.05, busy_timeout_ms=50)
    store.open()
    store.record(turn([{"role": "user", "content": "first"}], A1))
    assert wait_until(lambda: store.health().queue_depth == 0)
    assert store.health().oldest_unwritten_s is None
    first = store.health().slowest_write_s
    locker = sqlite3.connect(path, isolation_level=None)
    locker.execute("BEGIN IMMEDIATE")
    for t in conversation(4):
        store.record(t)
    assert wait_until(lambda: not store.health().ok)
    time.sleep(0.3)
    assert (store.health().oldest_unwritten_s or 0) >= 0.3  # the age of the first held
    locker.execute("ROLLBACK")
    locker.close()
    assert wait_until(lambda: store.health().ok and store.health().queue_depth == 0)
    assert store.health().oldest_unwritten_s is None
    assert first < 0.3 <= store.health().slowest_write_s  # the held turns' wait, kept
    store.shutdown()
    assert sorted(s["turns"] for s in SqliteReader(path).list_sessions()) == [1, 4]


def test_full_queue_drops_oldest_and_counts(tmp_path: Path) -> None:
    """A bounded queue drops the oldest turn, counting it, instead of growing."""
    store = SqliteStore(tmp_path / "h.db", max_queue=2)
    for i in range(5):  # not started: nothing drains the queue
        store.record(turn([{"role": "user", "content": str(i)}], A1))
    assert store.health().write_failures == 3
    assert store.backlog() == store.health().queue_depth == 2
    store.open()
    store.shutdown()
    titles = sorted(s["title"] for s in SqliteReader(tmp_path / "h.db").list_sessions())
    assert titles == ["3", "4"]
    assert store.backlog() == 0


def test_record_never_raises_on_unserialisable_turn(tmp_path: Path) -> None:
    """A turn that cannot be encoded is dropped and counted; the others are written."""
    store = SqliteStore(tmp_path / "h.db")
    store.open()
    store.record(turn([{"role": "user", "content": object()}], A1))
    store.record(turn([{"role": "user", "content": "fine"}], A1))
    store.shutdown()
    assert store.health().write_failures == 1
    assert [s["title"] for s in SqliteReader(tmp_path / "h.db").list_sessions()] == ["fine"]


async def test_async_lifecycle_drains_on_close(tmp_path: Path) -> None:
    """start() then close() writes every recorded turn."""
    store = SqliteStore(tmp_path / "h.db")
    await store.start()
    for t in conversation(10):
        store.record(t)
    assert store.health().ok
    await store.close()
    assert [s["turns"] for s in SqliteReader(tmp_path / "h.db").list_sessions()] == [10]


CHILD = textwrap.dedent(
    """
    import sys, time
    from proxy.store.process import ProcessStore
    from proxy.store.sqlite import SqliteStore
    from tests.store.test_fixtures import conversation
    kind = ProcessStore if sys.argv[3] == "process" else SqliteStore
    store = kind(sys.argv[1], flush_interval_s=0.2)
    store.open()
    for t in conversation(int(sys.argv[2])):
        store.record(t)
        print("recorded", flush=True)
    print("done", flush=True)
    time.sleep(60)
    """
)


@pytest.mark.parametrize("writer", ["thread", "process"])
def test_kill_9_loses_no_recorded_turn(tmp_path: Path, writer: str) -> None:
    """Turns recorded ~1 s before SIGKILL are all on disk and the file is intact
    (a writer process outlives the proxy: it writes what reached its pipe, then exits)."""
    path = tmp_path / "h.db"
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(path), "25", writer],
        stdout=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line.strip())
        if line.strip() == "done":
            break
    time.sleep(1.0)  # flush_interval_s is 0.2: a second is the durability promise
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert lines.count("recorded") == 25

    def all_there() -> bool:
        try:
            return [s["turns"] for s in SqliteReader(path).list_sessions()] == [25]
        except (sqlite3.Error, OSError, StoreMissingError):
            return False

    assert wait_until(all_there, 10.0)  # an orphaned writer process finishes on its own
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
