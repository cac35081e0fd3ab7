"""The embedded store: ``record()`` queues, one writer thread owns all writes.

The request path only appends to a bounded deque under a lock (never blocks on
I/O, never raises). The writer thread, started by :meth:`SqliteStore.start` and
drained and joined by :meth:`SqliteStore.close`, takes everything queued, writes
it in one transaction and commits, so a turn is on disk within
``flush_interval_s`` of ``record()``. Failures (disk full, locked, read-only, a
missing directory) are logged, counted and reported by :meth:`health`; the batch
stays queued and is retried, and when the queue is full the oldest turn is
dropped and counted.

The writer shares the GIL with the event loop, so its CPU is taken from request
handling. It keeps a :class:`~proxy.store.prefix.PrefixCache` so a turn costs
its new messages, not its whole history, and it lets other threads run between
the turns of a batch.
"""

from __future__ import annotations

import asyncio
import collections
import sqlite3
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import structlog

from proxy.store import retention
from proxy.store.base import StoreHealth, TurnRecord
from proxy.store.db import connect
from proxy.store.migrations import has_fts
from proxy.store.prefix import PrefixCache
from proxy.store.write import save_calibration, write_turn

log = structlog.get_logger("handoff.store")


@dataclass(frozen=True, slots=True)
class _Calibration:
    data: Mapping[str, Any]


_Job = TurnRecord | _Calibration


@dataclass(slots=True)
class _State:
    queue: collections.deque[_Job]
    failures: int = 0
    last_error: str | None = None
    healthy: bool = True
    closing: bool = False
    busy: int = 0  # jobs taken off the queue but not yet committed
    written: int = 0
    since_cap_check: int = field(default=0)


class SqliteStore:
    """The default :class:`~proxy.store.base.Store`, in one SQLite file."""

    def __init__(
        self,
        path: str | Path,
        *,
        flush_interval_s: float = 0.2,
        redact: bool = False,
        max_bytes: int | None = None,
        max_queue: int = 10_000,
        busy_timeout_ms: int = 2000,
        prefix_cache_sessions: int = 256,
        prefix_cache_bytes: int = 32 << 20,
    ) -> None:
        self.path = Path(path)
        self.flush_interval_s = flush_interval_s
        self.redact = redact
        self.max_bytes = max_bytes
        self.busy_timeout_ms = busy_timeout_ms
        self.prefix_cache_sessions = prefix_cache_sessions
        self.prefix_cache_bytes = prefix_cache_bytes
        self._cond = threading.Condition()
        self._state = _State(queue=collections.deque(maxlen=max_queue))
        self._thread: threading.Thread | None = None
        self._logged_error: str | None = None  # writer thread only

    # -- the request path -------------------------------------------------
    def record(self, turn: TurnRecord) -> None:
        """Queue a turn for writing. Never blocks on I/O and never raises."""
        self._put(turn)

    def save_calibration(self, data: Mapping[str, Any]) -> None:
        """Queue the token-count calibration for writing (non-blocking)."""
        self._put(_Calibration(dict(data)))

    def _put(self, job: _Job) -> None:
        try:
            with self._cond:
                q = self._state.queue
                if q.maxlen is not None and len(q) == q.maxlen:
                    self._state.failures += 1
                    self._state.last_error = "queue full: dropped the oldest turn"
                q.append(job)
                self._cond.notify()
        except Exception:  # the store must never break the proxy
            pass

    def health(self) -> StoreHealth:
        with self._cond:
            s = self._state
            return StoreHealth(
                ok=s.healthy and (self._thread is not None and self._thread.is_alive()),
                path=str(self.path),
                queue_depth=len(s.queue) + s.busy,
                write_failures=s.failures,
                last_error=s.last_error,
            )

    def writer_cpu_s(self) -> float | None:
        """CPU seconds the writer thread has used so far (None if not running or unsupported).

        The writer competes with the event loop for the GIL, so its CPU is the cost
        snapshots put on requests/s; the benchmark reports it per turn.
        """
        thread = self._thread
        if thread is None or thread.ident is None or not thread.is_alive():
            return None
        try:
            return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
        except (AttributeError, OSError):
            return None

    # -- lifecycle ----------------------------------------------------------
    async def start(self) -> None:
        self.open()

    async def close(self) -> None:
        """Drain everything queued, then close (the join runs off the event loop)."""
        await asyncio.to_thread(self.shutdown)

    def open(self) -> None:
        """Start the writer thread (synchronous form of :meth:`start`)."""
        if self._thread is not None and self._thread.is_alive():
            return
        with self._cond:
            self._state.closing = False
        self._thread = threading.Thread(target=self._run, name="handoff-store", daemon=True)
        self._thread.start()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop accepting waits, write what is queued, join the writer."""
        with self._cond:
            self._state.closing = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout)

    def load_calibration(self) -> dict[str, Any]:
        """The saved calibration (empty if none or the store is unreadable)."""
        try:
            db = connect(self.path)
        except (sqlite3.Error, OSError):
            return {}
        try:
            rows = db.execute("SELECT key, value FROM calibration").fetchall()
            return {k: orjson.loads(v) for k, v in rows}
        finally:
            db.close()

    # -- the writer thread --------------------------------------------------
    def _run(self) -> None:
        db: sqlite3.Connection | None = None
        cache = PrefixCache(self.prefix_cache_sessions, self.prefix_cache_bytes)
        try:
            while True:
                with self._cond:
                    s = self._state
                    if not s.queue and not s.closing:
                        self._cond.wait(self.flush_interval_s)
                    if not s.queue and s.closing:
                        return
                    batch = list(s.queue)
                    s.queue.clear()
                    s.busy = len(batch)
                if not batch:
                    continue
                db = self._write(db, batch, cache)
                if db is None:
                    self._requeue(batch)
                    if self._state.closing:
                        return  # cannot write: give up rather than hang shutdown
                    time.sleep(self.flush_interval_s)
        finally:
            if db is not None:
                db.close()

    def _write(
        self, db: sqlite3.Connection | None, batch: list[_Job], cache: PrefixCache
    ) -> sqlite3.Connection | None:
        """Write ``batch`` in one transaction; return the connection, or None on failure."""
        try:
            if db is None:
                db = connect(self.path, busy_timeout_ms=self.busy_timeout_ms)
            fts = has_fts(db)
            db.execute("BEGIN IMMEDIATE")
            try:
                for i, job in enumerate(batch):
                    if i:
                        time.sleep(0)  # release the GIL: the event loop may be waiting
                    self._write_one(db, job, fts, cache)
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except (sqlite3.Error, OSError) as e:
            self._failed(e, 1)
            if db is not None:
                db.close()
            return None
        if self._logged_error is not None:
            log.info("store_recovered", path=str(self.path))
            self._logged_error = None
        with self._cond:
            self._state.busy = 0
            self._state.healthy = True
            self._state.written += len(batch)
            self._state.since_cap_check += len(batch)
            check_cap = self._state.since_cap_check >= 100 or self._state.closing
        if self.max_bytes is not None and check_cap:
            self._enforce_cap(db)
        return db

    def _write_one(self, db: sqlite3.Connection, job: _Job, fts: bool, cache: PrefixCache) -> None:
        db.execute("SAVEPOINT job")
        try:
            if isinstance(job, _Calibration):
                save_calibration(db, job.data)
            else:
                write_turn(db, job, redact=self.redact, fts=fts, cache=cache)
            db.execute("RELEASE job")
        except (TypeError, ValueError, orjson.JSONEncodeError) as e:
            # A turn that cannot be serialised will never be; drop it, keep the rest.
            db.execute("ROLLBACK TO job")
            db.execute("RELEASE job")
            self._failed(e, 1, healthy=True)

    def _enforce_cap(self, db: sqlite3.Connection) -> None:
        assert self.max_bytes is not None
        try:
            retention.enforce_max_bytes(db, self.max_bytes)
        except sqlite3.Error as e:
            self._failed(e, 1)
        with self._cond:
            self._state.since_cap_check = 0

    def _failed(self, err: BaseException, count: int, healthy: bool = False) -> None:
        # A broken store retries every flush: log when the error changes, not each retry.
        if repr(err) != self._logged_error:
            self._logged_error = repr(err)
            log.warning("store_write_failed", error=repr(err), turns=count, path=str(self.path))
        with self._cond:
            self._state.failures += count
            self._state.last_error = repr(err)
            self._state.healthy = self._state.healthy and healthy

    def _requeue(self, batch: list[_Job]) -> None:
        with self._cond:
            q = self._state.queue
            room = (q.maxlen or len(batch) + len(q)) - len(q)
            keep = batch[-room:] if room > 0 else []
            q.extendleft(reversed(keep))
            self._state.failures += len(batch) - len(keep)
            self._state.busy = 0
