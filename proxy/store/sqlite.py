"""The embedded store: ``record()`` queues, one writer thread owns all writes.

The request path only appends to a bounded deque under a lock (never blocks on
I/O, never raises). The writer thread, started by :meth:`SqliteStore.start` and
drained and joined by :meth:`SqliteStore.close`, takes everything queued, writes
it in one transaction and commits. After an idle spell it writes a turn at once;
under load it lets ``gather_s`` pass between commits, so a transaction holds
many turns and a turn is on disk within ``gather_s`` (well inside a second).
New messages are indexed for search and packed in batches (``indexer``): every
``index_batch`` messages or ``index_interval_s``, when idle, and before closing.
The WAL is checkpointed on a thread of its own (``checkpoint``), so a commit never
waits for the disk's sync.

Failures (disk full, locked, read-only, a missing directory) are logged, counted and
reported by :meth:`health` (with the age of the oldest unwritten turn); the batch
is retried, and when the queue is full the oldest turn is dropped and counted, as are
all turns lost (``lost_turns``). The store is the only writer of its file (``lock``).

A writer thread shares the GIL with the event loop, so it gives way (``pacing``) every
``_YIELD_S`` of a batch; the writer process passes its own ``pacer``. A
:class:`~proxy.store.prefix.PrefixCache` makes a turn cost its new messages, and a
:class:`~proxy.store.known.Known` spares most database lookups.
"""

from __future__ import annotations

import asyncio
import collections
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import structlog

from proxy.store import memories, retention
from proxy.store.base import MemoryRecord, StoreHealth, TurnRecord, age_s, settled
from proxy.store.calibration import (
    save_calibration,
)
from proxy.store.checkpoint import BACKSTOP_PAGES, Checkpointer
from proxy.store.db import connect
from proxy.store.indexer import index_pending
from proxy.store.known import Known
from proxy.store.lock import WriterLock, claim
from proxy.store.pacing import Pacer, release_gil
from proxy.store.prefix import PrefixCache
from proxy.store.progress import advance, begin
from proxy.store.side_rows import SideRows
from proxy.store.write import write_turn

log = structlog.get_logger("handoff.store")


@dataclass(frozen=True, slots=True)
class _Calibration:
    data: Mapping[str, Any]


_Job = TurnRecord | _Calibration | MemoryRecord

_YIELD_S = 0.0005
"""Work between two explicit GIL releases in a batch. ``time.sleep(0)`` costs CPU (the
timer slack) and every SQLite statement releases the GIL: yield by the clock."""


@dataclass(slots=True)
class _State:
    queue: collections.deque[_Job]
    failures: int = 0
    lost: int = 0  # turns that will never be written
    last_error: str | None = None
    healthy: bool = True
    closing: bool = False
    busy: int = 0  # jobs taken off the queue but not yet committed
    queued_since: float = 0.0  # when the oldest job in the queue was queued (monotonic)
    busy_since: float = 0.0  # when the oldest job taken was
    slowest: float = 0.0  # the longest from queued to committed, in seconds
    written: int = 0
    since_cap_check: int = field(default=0)


class SqliteStore(SideRows):
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
        gather_s: float = 0.05,
        max_batch: int = 500,
        index_batch: int = 256,
        index_interval_s: float = 2.0,
        pacer: Pacer | None = None,
        lock: bool = True,
        writer_id: str | None = None,
    ) -> None:
        """``lock=False`` where the lock is held already (a writer process's, by its
        proxy); ``writer_id`` makes the store count its commits for that proxy
        (``progress``)."""
        self.path = Path(path)
        self._takes_lock = lock
        self._writer_lock: WriterLock | None = None
        self.writer_id = writer_id
        self._pacer = pacer or Pacer(_YIELD_S, release_gil)
        self.flush_interval_s = flush_interval_s
        self.redact = redact
        self.max_bytes = max_bytes
        self.busy_timeout_ms = busy_timeout_ms
        self.prefix_cache_sessions = prefix_cache_sessions
        self.prefix_cache_bytes = prefix_cache_bytes
        self.gather_s = gather_s
        self.max_batch = max_batch
        self.index_batch = index_batch
        self.index_interval_s = index_interval_s
        self._cond = threading.Condition()
        self._state = _State(queue=collections.deque(maxlen=max_queue))
        self._thread: threading.Thread | None = None
        # The writer thread's own state:
        self._logged_error: str | None = None
        self._last_commit = 0.0
        self._last_batch = 0
        self._data_version: int | None = None
        self._pending = 0  # messages inserted and not yet indexed
        self._pending_since: float | None = None
        self._checkpointer = Checkpointer(self.path)
        self.on_change: Callable[[], None] | None = None
        """Called (on the writer thread) after a commit or a failure: what ``health``
        says may have changed. The writer process reports it to the proxy then."""

    # -- the request path -------------------------------------------------
    def record(self, turn: TurnRecord) -> None:
        """Queue a turn for writing. Never blocks on I/O and never raises."""
        self._put(turn)

    def save_calibration(self, data: Mapping[str, Any]) -> None:
        """Queue the token-count calibration for writing (non-blocking)."""
        self._put(_Calibration(dict(data)))

    def save_memory(self, memory: MemoryRecord) -> None:
        """Queue a session's memory: written in the writer's transaction (``memories``)."""
        self._put(memory)

    def _put(self, job: _Job) -> None:
        try:
            with self._cond:
                q = self._state.queue
                if not q:  # (taken whole by the writer: the first after is the oldest)
                    self._state.queued_since = time.monotonic()
                if q.maxlen is not None and len(q) == q.maxlen:
                    self._state.failures += 1
                    self._state.lost += _turns((q[0],))
                    self._state.last_error = "queue full: dropped the oldest turn"
                q.append(job)
                if len(q) == 1 or len(q) == self.max_batch:
                    self._cond.notify()  # the writer waits for the first, or for a full batch
        except Exception:  # the store must never break the proxy
            pass

    def health(self) -> StoreHealth:
        with self._cond:
            s = self._state
            return StoreHealth(
                ok=s.healthy and (self._thread is not None and self._thread.is_alive()),
                path=str(self.path),
                queue_depth=self.backlog(),
                write_failures=s.failures,
                lost_turns=s.lost,
                last_error=s.last_error,
                oldest_unwritten_s=age_s(self._oldest_unwritten()),
                slowest_write_s=s.slowest,
            )

    def lag_s(self) -> float:
        return age_s(self._oldest_unwritten()) or 0.0

    def _oldest_unwritten(self) -> float | None:
        s = self._state
        return s.busy_since if s.busy else s.queued_since if s.queue else None

    def backlog(self) -> int:
        """Turns queued or being written: ``health().queue_depth`` without the lock and
        the report (the writer process asks at every pause)."""
        s = self._state
        return len(s.queue) + s.busy

    def writer_cpu_s(self) -> float | None:
        """CPU seconds the writer thread has used (for the benchmark; None if unknown)."""
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
        """Take the store's lock (:class:`~proxy.store.errors.StoreInUse` if another
        process holds it), try the file, then start the writer thread (synchronous
        :meth:`start`), so a store that cannot be opened is degraded in ``/healthz``
        and the log at once: a failure counted, with its error."""
        if self._thread is not None and self._thread.is_alive():
            return
        unlocked: OSError | None = None
        if self._takes_lock and self._writer_lock is None:
            try:
                self._writer_lock = claim(self.path)
            except OSError as e:  # (the file's own error, below, says it better if any)
                unlocked = e
        try:
            connect(self.path, busy_timeout_ms=self.busy_timeout_ms).close()
        except (sqlite3.Error, OSError) as e:
            self._failed(e, 1)
        else:
            if unlocked is not None:
                self._failed(unlocked, 1)
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
            if self._thread.is_alive():
                return  # still writing: keep the lock
        if self._writer_lock is not None:
            self._writer_lock.release()
            self._writer_lock = None

    # -- the writer thread --------------------------------------------------
    def _take(self) -> list[_Job] | None:
        """Wait for a batch: none while idle, the whole queue once it is due; None to stop.

        A batch is due at once while turns come one at a time, but under load (the
        last batch held several) the writer lets ``gather_s`` pass between commits,
        so one transaction holds many turns.
        """
        with self._cond:
            s = self._state
            while True:
                if s.closing or len(s.queue) >= self.max_batch:
                    break
                if not s.queue:
                    # Idle: wake to index what is pending or retry a failing store; a
                    # healthy store with nothing pending sleeps until a turn comes.
                    due = self._pending_since is not None or not s.healthy
                    if not self._cond.wait(self.flush_interval_s if due else None):
                        return []
                    continue
                wait = self._last_commit + self.gather_s - time.monotonic()
                if wait <= 0 or self._last_batch < 2:
                    break
                self._cond.wait(wait)
            if not s.queue:
                return None if s.closing else []
            batch = list(s.queue)
            self._last_batch = len(batch)
            s.queue.clear()
            s.busy, s.busy_since = len(batch), s.queued_since
            return batch

    def _run(self) -> None:
        db: sqlite3.Connection | None = None
        cache = PrefixCache(self.prefix_cache_sessions, self.prefix_cache_bytes)
        known = Known()
        self._pending_since = time.monotonic()  # index what a crash may have left
        self._checkpointer.start()
        try:
            while True:
                batch = self._take()
                if batch is None:
                    break
                idle = not batch
                if idle and self._state.healthy and not self._index_due(idle):
                    continue  # (an unhealthy store tries again, so it can say it recovered)
                db = self._write(db, batch, cache, known, idle)
                if db is None:
                    self._requeue(batch)
                    if self._state.closing:
                        self._give_up()  # cannot write: rather than hang shutdown
                        return
                    time.sleep(self.flush_interval_s)
            if db is not None and self._pending_since is not None:
                self._write(db, [], cache, known)  # leave everything indexed
        finally:
            self._checkpointer.stop()
            if db is not None:
                db.close()

    def _index_due(self, idle: bool = False) -> bool:
        """Index pending messages now? Enough of them, old enough, or about to stop."""
        since = self._pending_since
        if since is None:
            return False
        age = time.monotonic() - since
        return (
            self._state.closing
            or self._pending >= self.index_batch
            or age >= self.index_interval_s
            or (idle and age >= self.flush_interval_s)
        )

    def _write(
        self,
        db: sqlite3.Connection | None,
        batch: list[_Job],
        cache: PrefixCache,
        known: Known,
        idle: bool = False,
    ) -> sqlite3.Connection | None:
        """Write ``batch`` in one transaction; return the connection, or None on failure."""
        try:
            if db is None:
                known.clear()
                known.seen.reset()
                db = connect(self.path, busy_timeout_ms=self.busy_timeout_ms)
                db.execute(f"PRAGMA wal_autocheckpoint = {BACKSTOP_PAGES}")  # (checkpoint)
                if self.writer_id is not None:
                    begin(db, self.writer_id)
                self._data_version = None
            while True:
                bad = self._transaction(db, batch, cache, known, idle)
                if bad is None:
                    break
                # A turn that cannot be serialised never will be: drop it, redo the rest.
                self._failed(bad[1], 1, healthy=True)
                with self._cond:
                    self._state.lost += _turns(batch[bad[0] : bad[0] + 1])
                    del batch[bad[0]]  # in place: a failed retry requeues the rest
                    self._state.busy = len(batch)
        except (sqlite3.Error, OSError) as e:
            self._failed(e, 1)
            if db is not None:
                db.close()
            return None
        self._last_commit = time.monotonic()
        self._checkpointer.committed()
        recovered = self._logged_error is not None
        if recovered:
            log.info("store_recovered", path=str(self.path))
            self._logged_error = None
        with self._cond:
            s = self._state
            if batch:
                s.slowest = max(s.slowest, self._last_commit - s.busy_since)
            s.busy = 0
            s.healthy = True
            s.written += len(batch)
            s.since_cap_check += len(batch)
            check_cap = s.since_cap_check >= 100 or s.closing
        if (batch or recovered) and self.on_change is not None:
            self.on_change()
        if self.max_bytes is not None and check_cap:
            known.clear()  # the cap may delete sessions
            self._enforce_cap(db)
        return db

    def _note_inserted(self, known: Known) -> None:
        if known.inserted:
            self._pending += known.inserted
            known.inserted = 0
            if self._pending_since is None:
                self._pending_since = time.monotonic()

    def _index(self, db: sqlite3.Connection) -> bool:
        """Index and pack a bounded share of the pending messages; True when none are left."""
        limit = 10 * self.index_batch
        done = index_pending(db, limit, self._pacer)
        while done == limit and self._state.closing:
            done = index_pending(db, limit, self._pacer)
        return done < limit

    def _transaction(
        self,
        db: sqlite3.Connection,
        batch: list[_Job],
        cache: PrefixCache,
        known: Known,
        idle: bool,
    ) -> tuple[int, Exception] | None:
        """Write ``batch`` and commit; or roll back and name the job that cannot be encoded.

        No savepoint per job: one costs more than the turn's inserts (every page a
        turn touches is copied first), and a turn that fails to encode is rare.
        """
        db.execute("BEGIN IMMEDIATE")
        try:
            version = db.execute("PRAGMA data_version").fetchone()[0]
            if version != self._data_version:
                known.clear()  # another connection committed: forget what we knew
                known.seen.reset()
                self._data_version = version
            self._pacer.restart()
            for i, job in enumerate(batch):
                self._pacer()
                try:
                    if isinstance(job, _Calibration):
                        save_calibration(db, job.data)
                    elif isinstance(job, MemoryRecord):
                        _save_memory(db, job, known, self.redact)
                    else:
                        write_turn(db, settled(job), redact=self.redact, cache=cache, known=known)
                except (TypeError, ValueError, orjson.JSONEncodeError) as e:
                    known.clear()
                    known.inserted = 0
                    db.execute("ROLLBACK")
                    return i, e
            self._note_inserted(known)
            indexed = self._index_due(idle) and self._index(db)
            if self.writer_id is not None:
                advance(db, self.writer_id, _turns(batch))
            db.execute("COMMIT")
        except BaseException:
            known.clear()
            known.inserted = 0
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        if indexed:
            self._pending, self._pending_since = 0, None
        return None

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
        if self.on_change is not None:
            self.on_change()

    def _requeue(self, batch: list[_Job]) -> None:
        with self._cond:
            q = self._state.queue
            room = (q.maxlen or len(batch) + len(q)) - len(q)
            keep = batch[-room:] if room > 0 else []
            q.extendleft(reversed(keep))
            self._state.queued_since = self._state.busy_since  # the batch is the oldest again
            self._state.failures += len(batch) - len(keep)
            self._state.lost += _turns(batch[: len(batch) - len(keep)])
            self._state.busy = 0

    def _give_up(self) -> None:
        """Closing, and the store cannot be written: what is queued is lost."""
        with self._cond:
            self._state.lost += _turns(self._state.queue)
            self._state.queue.clear()


def _save_memory(db: sqlite3.Connection, rec: MemoryRecord, known: Known, redact: bool) -> None:
    sid = memories.write(db, rec, known, redact=redact)
    if sid is None:
        log.warning("memory_session_not_found", workspace=rec.workspace)
    else:
        log.info("memory_written", session=sid, reason=rec.reason, source=rec.source)


def _turns(jobs: Iterable[_Job]) -> int:
    """How many of ``jobs`` are turns (not calibration or memory saves)."""
    return sum(isinstance(job, TurnRecord) for job in jobs)
