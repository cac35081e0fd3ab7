"""The store's writer, in a process of its own.

Started by :class:`~proxy.store.process.ProcessStore` (``process.writer_command``:
never with the working directory on its import path). Reads batches from stdin
(``HEAD``: a length and the turns waiting behind, then ``wire`` frames) and hands each job to a
:class:`~proxy.store.sqlite.SqliteStore`; writes its health to stdout as JSON
lines. End of input, including the proxy's death by ``kill -9``, drains the
store and exits: what reached the pipe is written (of a batch cut short, the turns
that arrived whole). Signals aimed at the proxy's process group are ignored, so
Ctrl-C cannot cut the drain short.
"""

from __future__ import annotations

import argparse
import signal
import struct
import sys
import threading
import time
from collections.abc import Sequence
from typing import IO, Any

import orjson
import structlog

from proxy.log import configure_logging
from proxy.process_tuning import raise_gc_threshold, tune_malloc, yield_to_requests
from proxy.store.base import MemoryRecord
from proxy.store.pacing import Pacer, yield_cpu
from proxy.store.shipped import HeldMessages
from proxy.store.sqlite import SqliteStore
from proxy.store.wire import Unreadable, decode, whole

log = structlog.get_logger("handoff.store")

HEAD = struct.Struct("<II")
"""A batch's length, and how many turns wait behind it in the proxy's queue."""
BACKLOG = 2_000
GIVE_WAY_S = 0.0002
"""Work between two ``sched_yield`` calls (``pacing``): about one turn."""
KEEPING_UP = 64
"""Fewer turns than this waiting, here and in the proxy: the writer gives way (``pacing``);
more, and it takes its full share of the CPU until it has caught up."""
REPORT_EVERY_S = 0.05
"""Health goes to the proxy at most this often while it changes (a batch read, a commit,
a failure), and every ``IDLE_REPORT_S`` regardless."""
IDLE_REPORT_S = 1.0


class Backlog:
    """How far behind the writer is: the turns the proxy said wait behind the last batch,
    plus those waiting for SQLite here."""

    def __init__(self) -> None:
        self.store: SqliteStore | None = None
        self.behind_batch = 0

    def keeping_up(self) -> bool:
        queued = self.store.backlog() if self.store is not None else 0
        return self.behind_batch + queued < KEEPING_UP


class _Reporter:
    def __init__(self, store: SqliteStore, out: IO[bytes]) -> None:
        self.store, self.out = store, out
        self.received = 0
        self.unreadable = 0  # frames skipped: failures of ours, not of the store
        self._last: dict[str, Any] | None = None
        self._last_at = 0.0
        self._lock = threading.Lock()
        self._changed = threading.Event()

    def wake(self) -> None:
        """Something the report says may have changed: report it soon."""
        self._changed.set()

    def report(self, force: bool = False) -> None:
        h = self.store.health()
        now = time.monotonic()
        state = {
            "ok": h.ok,
            "queue_depth": h.queue_depth,
            "write_failures": h.write_failures + self.unreadable,
            "lost_turns": h.lost_turns + self.unreadable,
            "last_error": h.last_error,
            "received": self.received,
            "writer_cpu_s": time.process_time(),
        }
        with self._lock:
            same = self._last is not None and all(
                self._last[k] == state[k] for k in state if k != "writer_cpu_s"
            )
            if same and not force and now - self._last_at < 1.0:
                return
            self._last, self._last_at = state, now
            try:
                self.out.write(orjson.dumps(state) + b"\n")
                self.out.flush()
            except (BrokenPipeError, ValueError, OSError):
                pass  # the proxy is gone: keep writing what it sent

    def run(self, stop: threading.Event) -> None:
        """Report when woken, at most every ``REPORT_EVERY_S``, and every
        ``IDLE_REPORT_S`` regardless: woken, not polling, so an idle writer costs nothing."""
        while not stop.is_set():
            self._changed.wait(IDLE_REPORT_S)
            self._changed.clear()
            if stop.is_set():
                return
            self.report()
            stop.wait(REPORT_EVERY_S)


def _next_head(store: SqliteStore, inp: IO[bytes]) -> bytes:
    """The next batch's length, read once fewer than ``BACKLOG`` turns wait for SQLite:
    the pipe then fills and the proxy's bounded queue takes the overflow, so a slow disk
    costs turns, not memory. (A failing store is not waited for: it drops its oldest.)"""
    while (h := store.health()).ok and h.queue_depth > BACKLOG:
        time.sleep(0.01)
    return inp.read(HEAD.size)


class _Batches:
    """Batches read into one buffer, reused: a new multi-megabyte bytes object per batch
    is a fresh mapping, and faulting its pages in cost more than reading them."""

    def __init__(self, inp: IO[bytes]) -> None:
        self.inp = inp
        self.buf = bytearray()

    def read(self, size: int) -> memoryview:
        """The next ``size`` bytes (valid until the next call), fewer at end of input."""
        if len(self.buf) < size:
            self.buf = bytearray(max(size, 2 * len(self.buf)))
        view = memoryview(self.buf)[:size]
        got = 0
        while got < size:
            n = self.inp.readinto(view[got:])  # type: ignore[attr-defined]
            if not n:
                return view[:got]
            got += n
        return view


def serve(store: SqliteStore, inp: IO[bytes], out: IO[bytes], backlog: Backlog) -> None:
    store.open()
    reporter = _Reporter(store, out)
    store.on_change = reporter.wake
    stop = threading.Event()
    thread = threading.Thread(target=reporter.run, args=(stop,), daemon=True)
    thread.start()
    reporter.report(force=True)
    held = HeldMessages()  # the proxy's shipper keeps its mirror
    batch = _Batches(inp)
    pace = Pacer(GIVE_WAY_S, yield_cpu, backlog.keeping_up)
    try:
        while (head := _next_head(store, inp)) and len(head) == HEAD.size:
            size, backlog.behind_batch = HEAD.unpack(head)
            payload = batch.read(size)
            if len(payload) < size:  # the proxy died writing it: keep the turns that came whole
                log.warning("store_batch_cut", size=size, received=len(payload))
                payload = payload[: whole(payload)]
            try:
                pace.restart()
                for job in decode(payload, held):
                    pace()
                    if isinstance(job, Unreadable):
                        log.error("store_frame_unreadable", error=job.error)
                        reporter.unreadable += 1
                    elif isinstance(job, dict):
                        store.save_calibration(job)
                    elif isinstance(job, MemoryRecord):
                        store.save_memory(job)
                    else:
                        store.record(job)
                    reporter.received += 1
            except (ValueError, TypeError, struct.error) as e:  # orjson's errors are ValueErrors
                log.error("store_batch_unreadable", error=repr(e), size=size)
            reporter.wake()
    finally:
        store.shutdown()
        stop.set()
        reporter.wake()
        thread.join()
        reporter.report(force=True)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--path", required=True)
    p.add_argument("--flush-interval-s", type=float, default=0.2)
    p.add_argument("--redact", action="store_true")
    p.add_argument("--max-bytes", type=int)
    p.add_argument("--writer-id", help="counts its commits under this id (progress)")
    p.add_argument("--log-format", choices=["console", "json"], default="console")
    args = p.parse_args(argv)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    configure_logging(args.log_format)
    tune_malloc()  # it parses every request body too
    raise_gc_threshold()  # as the proxy does
    yield_to_requests()  # background work: it must not preempt the turn being served
    backlog = Backlog()
    store = backlog.store = SqliteStore(
        args.path,
        flush_interval_s=args.flush_interval_s,
        redact=args.redact,
        max_bytes=args.max_bytes,
        # No event loop here, but a client or a model may share the CPU:
        pacer=Pacer(GIVE_WAY_S, yield_cpu, backlog.keeping_up),
        lock=False,  # its proxy holds the store's lock, and this process inherited it
        writer_id=args.writer_id,
    )
    serve(store, sys.stdin.buffer, sys.stdout.buffer, backlog)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
