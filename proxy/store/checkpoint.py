"""WAL checkpoints on a thread of their own, so the writer's commits never wait for the disk.

In WAL mode the commit that takes the log past ``wal_autocheckpoint`` pages also
copies the log back into the database file and syncs both (a checkpoint). Under load
that commit took tens of times as long as the others (bench/NOTES.md), with every turn
queued behind it waiting too; the store gate holds new
requests once the oldest has waited ``store.max_lag_s``. A passive checkpoint on a
connection of its own runs beside the writer instead: WAL lets one connection
append while another copies what is committed, and the sync waits with the GIL
released. The writer's own connection keeps an autocheckpoint as a backstop
(:data:`BACKSTOP_PAGES`), should this thread fall behind or fail.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import structlog

log = structlog.get_logger("handoff.store")

EVERY_S = 0.5
"""At most this often, and only after a commit, so the log stays short under load."""
BACKSTOP_PAGES = 4000
"""The writer's own ``wal_autocheckpoint``: about twice the log's peak here."""


class Checkpointer:
    """Checkpoints ``path``'s WAL, passively, ``every_s`` after a commit it is told of."""

    def __init__(self, path: str | Path, every_s: float = EVERY_S) -> None:
        self.path, self.every_s = Path(path), every_s
        self.done = 0  # checkpoints run
        self._due = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._logged: str | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="handoff-checkpoint", daemon=True)
        self._thread.start()

    def committed(self) -> None:
        """The writer committed: a checkpoint is due (one ``Event.set``)."""
        self._due.set()

    def stop(self) -> None:
        """Stop and join; what is left is checkpointed when the last connection closes."""
        self._stop.set()
        self._due.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        db: sqlite3.Connection | None = None
        try:
            while not self._stop.is_set():
                self._due.wait()
                if self._stop.wait(self.every_s):
                    return
                self._due.clear()
                db = self._checkpoint(db)
        finally:
            if db is not None:
                db.close()

    def _checkpoint(self, db: sqlite3.Connection | None) -> sqlite3.Connection | None:
        """One passive checkpoint; the connection to keep (None after a failure, which is
        logged once: the writer's backstop checkpoints meanwhile, and its own errors are
        the store's health)."""
        try:
            if db is None:  # (never creating a file: that is the writer's, with its mode)
                uri = self.path.resolve().as_uri() + "?mode=rw"
                db = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error as e:
            if repr(e) != self._logged:
                self._logged = repr(e)
                log.warning("store_checkpoint_failed", error=repr(e), path=str(self.path))
            if db is not None:
                db.close()
            return None
        self.done += 1
        self._logged = None
        return db
