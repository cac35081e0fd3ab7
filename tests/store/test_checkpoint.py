"""WAL checkpoints run beside the writer (``proxy.store.checkpoint``), on the real store."""

from __future__ import annotations

import shutil
import sqlite3
import threading
import time
from pathlib import Path

from structlog.testing import capture_logs

from proxy.store.checkpoint import Checkpointer
from proxy.store.sqlite import SqliteStore
from tests.polling import wait_until
from tests.store.test_fixtures import conversation


def _turns_in_database_file(path: Path, tmp: Path) -> int:
    """Turns in ``path`` itself, not its WAL: a copy of the file alone is opened."""
    copy = tmp / "main-file-only.db"
    shutil.copyfile(path, copy)
    db = sqlite3.connect(copy)
    try:
        return int(db.execute("SELECT count(*) FROM turns").fetchone()[0])
    finally:
        db.close()


def test_committed_turns_reach_the_database_file_while_the_writer_runs(tmp_path: Path) -> None:
    """Five turns are a few pages of WAL, far below SQLite's own autocheckpoint (1,000),
    and the writer keeps its connection open: only the checkpointer's thread moves
    them into the database file before the store closes."""
    path = tmp_path / "h.db"
    store = SqliteStore(path, flush_interval_s=0.05)
    store.open()
    try:
        for t in conversation(5):
            store.record(t)
        assert wait_until(lambda: store.health().queue_depth == 0)
        assert wait_until(lambda: _turns_in_database_file(path, tmp_path) == 5)
        assert store.health().ok
    finally:
        store.shutdown()


def test_a_checkpointer_that_cannot_open_the_store_logs_once_and_creates_nothing(
    tmp_path: Path,
) -> None:
    """No store file (moved away, say): each try fails, logged once, and no empty file
    is made in its place (the writer makes the store's file, 0600 in a 0700 directory)."""
    missing = tmp_path / "gone" / "h.db"
    cp = Checkpointer(missing, every_s=0.01)
    with capture_logs() as logs:
        cp.start()
        for _ in range(3):
            cp.committed()
            time.sleep(0.05)
        cp.stop()
    failures = [e for e in logs if e["event"] == "store_checkpoint_failed"]
    assert len(failures) == 1 and str(missing) == failures[0]["path"]
    assert cp.done == 0 and not missing.exists() and not missing.parent.exists()


def test_stop_does_not_wait_out_the_interval(tmp_path: Path) -> None:
    """A commit then stop: the thread ends without its checkpoint (closing the last
    connection checkpoints), rather than after ``every_s``."""
    cp = Checkpointer(tmp_path / "h.db", every_s=3600)
    cp.start()
    cp.committed()
    stopper = threading.Thread(target=cp.stop)
    stopper.start()
    stopper.join(20.0)  # a liveness bound: an hour's wait would fail it
    assert not stopper.is_alive() and cp.done == 0
