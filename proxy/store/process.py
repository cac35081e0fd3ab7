"""The store with its writer in a process of its own, so snapshots cost the event loop ~nothing.

A writer thread shares the proxy's GIL: hashing messages and driving SQLite take
CPU from request handling and hold the loop up for slices of a batch. Here the
request path encodes each turn (``wire``: the request body travels as received)
onto a queue bounded in bytes; a shipper thread writes batches of frames to a
child process (``writer_process``), which runs the same :class:`SqliteStore`
on whatever core is free. A body that resends one the child holds travels as
what the proxy's parse read of it, the resent messages cut out (``shipped``).

The child outlives a ``kill -9`` of the proxy long enough to drain its pipe, so
every turn handed over is written (a ``kill -9`` loses what still waited here). If the
child dies, it is started again, and the turns it had been handed and not committed
are counted lost, exactly: the store counts each writer's commits in the same
transactions (``progress``). While it is down, or behind, the turns wait here (up to
``MAX_QUEUE_BYTES``). Health is the child's own report plus what waits here. The
proxy holds the store's lock (``lock``), and every child inherits it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson
import structlog

from proxy.store.base import MemoryRecord, StoreHealth, TurnRecord, age_s
from proxy.store.lock import WriterLock, claim
from proxy.store.progress import committed
from proxy.store.shipped import ShippedBodies
from proxy.store.side_rows import SideRows
from proxy.store.wire import TURN, Job, encode_calibration, encode_memory, encode_turn, frames
from proxy.store.writer_process import HEAD

log = structlog.get_logger("handoff.store")

RESTART_BACKOFF_S = 1.0
READY_TIMEOUT_S = 10.0
MAX_BATCH = 256
GATHER_S = 0.02
MAX_QUEUE_BYTES = 256 << 20
"""Framed turns waiting for the writer, at most: beyond it the oldest are dropped (and
counted), so a stalled writer cannot take the proxy's memory."""
BOOT = (
    "import sys; sys.path.append(sys.argv.pop(1)); "
    "from proxy.store.writer_process import main; raise SystemExit(main())"
)
"""The writer process's program (``-c``), after the directory holding this ``proxy``
package, put last on its import path (an editable install's finder finds it anyway)."""


def writer_command() -> list[str]:
    """How the writer process starts: ``python -P -c BOOT``. ``python -m`` would put the
    working directory first on its import path, and an ``inspect.py`` in the folder
    handoff was started from made the writer crash at every start."""
    return [sys.executable, "-P", "-c", BOOT, str(Path(__file__).resolve().parents[2])]


@dataclass(slots=True)
class _Child:
    proc: subprocess.Popen[bytes]
    channel: IO[bytes]  # the child's stdin: our end of a socket pair
    writer_id: str  # what the store counts its commits under (progress)
    shipped: int = 0  # jobs written to its pipe
    shipped_turns: int = 0  # of which turns (the others: calibration saves)
    report: dict[str, Any] = field(default_factory=dict)
    held: ShippedBodies = field(default_factory=ShippedBodies)  # what it holds, mirrored
    # (jobs shipped once this batch was, when its oldest was queued), oldest first:
    in_flight: collections.deque[tuple[int, float]] = field(default_factory=collections.deque)
    gone: bool = False  # exited, and what it lost is counted (_settle)
    settling: threading.Lock = field(default_factory=threading.Lock)


class ProcessStore(SideRows):
    """A :class:`~proxy.store.base.Store` whose SQLite writer runs in a child process."""

    def __init__(
        self,
        path: str | Path,
        *,
        flush_interval_s: float = 0.2,
        redact: bool = False,
        max_bytes: int | None = None,
        max_queue: int | None = None,
        log_format: str = "console",
    ) -> None:
        self.path = Path(path)
        self.redact = redact
        self._argv = [
            *writer_command(), "--path", str(path),
            "--flush-interval-s", str(flush_interval_s), "--log-format", log_format,
            *(["--redact"] if redact else []),
            *(["--max-bytes", str(max_bytes)] if max_bytes is not None else []),
        ]  # fmt: skip
        self._lock = threading.RLock()  # (taken bare by _put: cheaper than the condition)
        self._cond = threading.Condition(self._lock)
        self._queue: collections.deque[Job] = collections.deque(maxlen=max_queue)
        self._since: collections.deque[float] = collections.deque(maxlen=max_queue)
        self._busy = 0
        self._busy_since = 0.0
        self._queued_bytes = 0
        self._failures = 0  # here, and in children that exited
        self._lost = 0  # turns lost here or in a child that exited
        self._slowest = 0.0  # the longest from record() to written, as reported: seconds
        self._last_error: str | None = None
        self._broken = False  # the last hand-over failed (the child's own state is its report)
        self._closing = False
        self._child: _Child | None = None
        self._writer_lock: WriterLock | None = None  # the store's (lock)
        self._shipper: threading.Thread | None = None
        self._readers: list[threading.Thread] = []

    # -- the request path -------------------------------------------------
    def record(self, turn: TurnRecord) -> None:
        """Queue a turn for the writer process. Never blocks on I/O and never raises.

        The turn is encoded here, so what waits is bytes, counted exactly: a parsed
        history can take tens of times its JSON's size, and a writer that falls
        behind must not let queued turns take the proxy's memory.
        """
        try:
            self._put(encode_turn(turn))
        except (TypeError, ValueError) as e:  # orjson's errors are both
            self._unencodable(e, 1)

    def save_calibration(self, data: Mapping[str, Any]) -> None:
        try:
            self._put(encode_calibration(data))
        except (TypeError, ValueError) as e:
            self._unencodable(e, 0)

    def save_memory(self, memory: MemoryRecord) -> None:
        """Queue a session's memory for the writer process, which writes it in its
        transaction (``memories``)."""
        try:
            self._put(encode_memory(memory))
        except (TypeError, ValueError) as e:
            self._unencodable(e, 0)

    def _unencodable(self, e: Exception, turns: int) -> None:
        """Dropped and counted; the store itself is fine (as the writer thread does)."""
        with self._cond:
            self._failures += 1
            self._lost += turns
            self._last_error = f"cannot encode a turn: {e!r}"

    def _put(self, job: Job) -> None:
        try:
            with self._lock:
                q = self._queue
                if q.maxlen is not None and len(q) == q.maxlen:
                    self._drop_oldest()
                q.append(job)
                self._since.append(time.monotonic())
                self._queued_bytes += _held(job)
                while self._queued_bytes > MAX_QUEUE_BYTES and len(q) > 1:
                    self._drop_oldest()
                if len(q) == 1:
                    self._cond.notify()
        except Exception:  # the store must never break the proxy
            pass

    def _drop_oldest(self) -> None:
        job = self._queue.popleft()
        self._queued_bytes -= _held(job)
        self._since.popleft()
        self._failures += 1
        self._lost += job.kind == TURN
        self._last_error = "queue full: dropped the oldest turn"

    def health(self) -> StoreHealth:
        with self._cond:
            child = self._child
            live = child is not None and not child.gone  # (gone: what it held is counted)
            report = child.report if child is not None and live else {}
            in_pipe = child.shipped - report.get("received", 0) if child and live else 0
            return StoreHealth(
                ok=live and report.get("ok", True) and not self._broken,
                path=str(self.path),
                queue_depth=len(self._queue) + self._busy + in_pipe + report.get("queue_depth", 0),
                write_failures=self._failures + report.get("write_failures", 0),
                lost_turns=self._lost + report.get("lost_turns", 0),
                last_error=(  # the writer's own error while it is failing, else ours
                    not report.get("ok", True) and report.get("last_error")
                )
                or self._last_error
                or report.get("last_error"),
                writer=f"process {child.proc.pid}" if child else "process",
                oldest_unwritten_s=age_s(self._oldest_unwritten(child)),
                slowest_write_s=self._slowest,
            )

    def lag_s(self) -> float:
        try:
            return age_s(self._oldest_unwritten(self._child)) or 0.0
        except IndexError:  # (no lock: a deque emptied between its test and its read)
            return 0.0

    def _oldest_unwritten(self, child: _Child | None) -> float | None:
        """When the oldest turn not yet committed was queued: in the child (shipped, and
        not yet received or written, as it last reported), being shipped, or queued."""
        if child is not None and child.in_flight:  # (emptied when it is gone)
            return child.in_flight[0][1]
        if self._busy:
            return self._busy_since
        return self._since[0] if self._since else None

    def writer_cpu_s(self) -> float | None:
        """CPU seconds the current writer process has used (as it last reported)."""
        child = self._child
        return child.report.get("writer_cpu_s") if child else None

    @property
    def writer_pid(self) -> int | None:
        """The writer process's pid (for operators and tests), None before it starts."""
        child = self._child
        return child.proc.pid if child else None

    # -- lifecycle ----------------------------------------------------------
    async def start(self) -> None:
        """Take the store's lock (:class:`~proxy.store.errors.StoreInUse` if another
        process holds it), start the writer process and wait (bounded) for its first
        report, so that ``/healthz`` tells from the start whether the store can be opened."""
        self.open()
        await asyncio.to_thread(self._wait_ready, READY_TIMEOUT_S)

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while time.monotonic() < deadline:
                child = self._child
                if child is None or child.report or child.proc.poll() is not None:
                    return
                self._cond.wait(0.02)

    async def close(self) -> None:
        await asyncio.to_thread(self.shutdown)

    def open(self) -> None:
        if self._shipper is not None and self._shipper.is_alive():
            return
        if self._writer_lock is None:
            try:
                self._writer_lock = claim(self.path)
            except OSError as e:  # the writer will say why it cannot open the store either
                log.warning("store_lock_failed", error=repr(e), path=str(self.path))
                self._failed(f"cannot lock the store: {e!r}", 0)
        self._closing = False
        self._spawn()
        self._shipper = threading.Thread(target=self._ship, name="handoff-store-ship", daemon=True)
        self._shipper.start()

    def shutdown(self, timeout: float | None = 60.0) -> None:
        """Hand over what is queued, close the pipe, wait for the child to drain and exit."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._shipper is not None:
            self._shipper.join(timeout)
        child = self._child
        if child is not None:
            try:
                child.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.error("store_writer_stuck", pid=child.proc.pid, timeout_s=timeout)
                child.proc.kill()
        for reader in self._readers:
            reader.join(1.0)  # (each settles its child once it has read its last report)
        if child is not None:
            self._settle(child)
        if self._writer_lock is not None:
            self._writer_lock.release()
            self._writer_lock = None

    # -- the shipper thread -------------------------------------------------
    def _spawn(self) -> bool:
        """Start a writer process; False (logged, in health) if it cannot be started."""
        ours, theirs = socket.socketpair()
        writer_id = os.urandom(8).hex()
        try:
            proc = subprocess.Popen(
                [*self._argv, "--writer-id", writer_id],
                stdin=theirs.fileno(),
                stdout=subprocess.PIPE,
                pass_fds=() if self._writer_lock is None else (self._writer_lock.fd,),  # (held too)
            )
        except OSError as e:
            ours.close()
            if self._last_error is None or repr(e) not in self._last_error:  # once, not per retry
                log.error("store_writer_start_failed", error=repr(e), argv0=self._argv[0])
            self._failed(f"cannot start the store writer process: {e!r}", 0)
            return False
        finally:
            theirs.close()
        child = _Child(proc, _channel(ours), writer_id)
        reader = threading.Thread(
            target=self._read_reports, args=(child,), name="handoff-store-health", daemon=True
        )
        reader.start()
        self._readers = [r for r in self._readers if r.is_alive()] + [reader]
        with self._cond:
            self._child = child
        return True

    def _read_reports(self, child: _Child) -> None:
        assert child.proc.stdout is not None
        for line in child.proc.stdout:
            try:
                report = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            with self._cond:
                child.report = report
                written = report.get("received", 0) - report.get("queue_depth", 0)
                now = time.monotonic()
                while child.in_flight and child.in_flight[0][0] <= written:
                    _, since = child.in_flight.popleft()  # (here, not in health: nothing may ask)
                    self._slowest = max(self._slowest, now - since)  # (as late as reported)
                self._cond.notify_all()
        self._settle(child)  # end of its reports: it has exited

    def _settle(self, child: _Child) -> None:
        """Once ``child`` has exited, count the turns it was handed and did not commit as
        lost, exactly, from the store's own count of its commits, and its failures.
        Once per child, by whichever thread sees it go first (this reader, the shipper
        about to restart it, or shutdown)."""
        with child.settling:
            if child.gone:
                return
            code = child.proc.wait()
            done = committed(self.path, child.writer_id)
            with self._cond:
                report = child.report
                if done is None:  # the store cannot tell: by its last report (an upper bound)
                    lost = child.shipped - report.get("received", 0) + report.get("queue_depth", 0)
                    lost += report.get("lost_turns", 0)
                else:
                    lost = child.shipped_turns - done
                lost = max(0, lost)
                child.gone = True
                child.in_flight.clear()
                self._lost += lost
                self._failures += report.get("write_failures", 0) + (code != 0)
                if code != 0:
                    self._last_error = f"store writer process exited with {code}"
                    self._broken = True
                self._cond.notify_all()
        if code != 0:
            log.error("store_writer_exited", code=code, turns_lost=lost, pid=child.proc.pid)

    def _take(self) -> list[Job] | None:
        """The next batch; None once closing with nothing left.

        After the first turn wakes it, the shipper lets ``GATHER_S`` pass before taking
        the queue: waking a thread costs the proxy more CPU than encoding a turn, so
        under load one wake-up ships many turns.
        """
        with self._cond:
            while not self._queue and not self._closing:
                self._cond.wait()
        if not self._closing:
            time.sleep(GATHER_S)
        with self._cond:
            if not self._queue:
                return None
            self._busy_since = self._since[0]
            if len(self._queue) <= MAX_BATCH:  # the usual case: all of it, nothing counted
                batch = list(self._queue)
                self._queue.clear()
                self._since.clear()
                self._queued_bytes = 0
            else:
                batch = [self._queue.popleft() for _ in range(MAX_BATCH)]
                for _ in batch:
                    self._since.popleft()
                self._queued_bytes -= sum(map(_held, batch))
            self._busy = len(batch)
            return batch

    def _ship(self) -> None:
        while (batch := self._take()) is not None:
            try:
                while not self._send(batch):
                    if self._closing:  # no writer and shutting down: give up, not hang
                        self._failed("store writer process gone at shutdown", _turns(batch))
                        break
                    time.sleep(RESTART_BACKOFF_S)
            except Exception as e:  # never let the shipper die: what it held is lost, and said
                log.exception("store_ship_failed")
                self._failed(f"store shipper: {e!r}", _turns(batch))
            with self._cond:
                self._busy = 0  # (also when given up: then counted as failed)
        child = self._child
        if child is not None:
            with contextlib.suppress(OSError):
                child.channel.close()  # end of input: the child drains and exits

    def _send(self, batch: list[Job]) -> bool:
        """Write one batch to the child (restarting it if it died); False to retry later.
        The frames are made for this child (what it holds), and go out in pieces after
        their total length: joining them would copy every request body once more."""
        child = self._child
        if child is None or child.proc.poll() is not None:
            if not self._restart(child):
                return False
            child = self._child
            assert child is not None
        pipe = child.channel
        pieces = frames(batch, child.held)
        turns = _turns(batch)
        try:
            head = HEAD.pack(sum(map(len, pieces)), len(self._queue))  # (behind it)
            pipe.write(b"".join([head, *pieces]))
            pipe.flush()
        except (BrokenPipeError, OSError, ValueError) as e:
            child.held.clear()  # the batch may not have arrived: ship nothing against it
            self._failed(f"store writer process gone: {e!r}", 0)
            return False
        with self._cond:
            child.shipped += len(batch)
            child.shipped_turns += turns
            if child.gone:  # it exited as they went out, and was counted without them
                self._lost += turns
            else:
                child.in_flight.append((child.shipped, self._busy_since))
                self._broken = False
            self._busy = 0  # now counted as in the pipe (or lost)
        return True

    def _restart(self, dead: _Child | None) -> bool:
        if dead is not None:
            self._settle(dead)  # (before the next child clears its count from the store)
        with self._cond:
            self._child = None  # reported once, not again on every retry
        return self._spawn()

    def _failed(self, error: str, lost: int) -> None:
        """A failure here (counted once), which lost ``lost`` turns."""
        with self._cond:
            self._failures += 1
            self._lost += lost
            self._last_error = error
            self._broken = True


def _turns(batch: list[Job]) -> int:
    return sum(job.kind == TURN for job in batch)


def _held(job: Job) -> int:
    """The memory a queued job holds: its bytes, and ~250 for the objects around them."""
    return job.size + 256


def _channel(sock: socket.socket) -> IO[bytes]:
    """A file over our end of the socket pair that owns (and closes) the socket.

    A socket, not a pipe: a large turn costs the reading writer a fraction of the
    kernel time through a Unix socket (bench/NOTES.md). The child reads it as its
    stdin, and sees end of input when we close it or die, as with a pipe.
    """
    return os.fdopen(sock.detach(), "wb")  # write(2) works on a socket
