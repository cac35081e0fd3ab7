"""Server subprocesses for the benchmark: start pinned, wait until ready, read CPU and
memory from ``/proc``, and always stop them (a :class:`Fleet` owns every one it started).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from proxy.process_tuning import MMAP_BYTES, TOP_PAD_BYTES, TRIM_BYTES


@dataclass(frozen=True)
class Cores:
    """Which CPUs the measured server and the client side (load + upstream) run on."""

    server: frozenset[int]
    client: frozenset[int]

    @property
    def pinned(self) -> bool:
        return self.server != self.client

    @classmethod
    def detect(cls) -> Cores:
        """First allowed CPU for servers, second for clients; no pinning on one core."""
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            return cls(frozenset(cpus), frozenset(cpus))
        return cls(frozenset({cpus[0]}), frozenset({cpus[1]}))


_ADDR_NO_RANDOMIZE = 0x0040000
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def pin(cpus: frozenset[int]) -> Callable[[], None]:
    """A ``preexec_fn`` that pins the child before it execs, so all its threads inherit,
    and turns off address-space randomisation for it (as ``setarch -R`` does): with
    random layouts, identical servers differed by up to 10% in CPU per request."""

    def _pin() -> None:
        os.sched_setaffinity(0, cpus)
        if _LIBC is not None:
            _LIBC.personality(_ADDR_NO_RANDOMIZE)

    return _pin


# handoff serve keeps freed heap memory (proxy.process_tuning); every server here gets
# the same glibc settings, so the forwarder's floor is not held to a slower heap.
SAME_HEAP = {
    "MALLOC_TRIM_THRESHOLD_": str(TRIM_BYTES),
    "MALLOC_TOP_PAD_": str(TOP_PAD_BYTES),
    "MALLOC_MMAP_THRESHOLD_": str(MMAP_BYTES),
}


def steady_env(env: dict[str, str] | None) -> dict[str, str]:
    """``env`` (default: ours) with a fixed hash seed, so every run lays out the same,
    and the heap settings handoff gives itself."""
    return {**(os.environ if env is None else env), "PYTHONHASHSEED": "0", **SAME_HEAP}


STACK_STEP = 16
"""Bytes of environment padding between one replica's layout and the next's."""


def layout_env(replica: int) -> dict[str, str]:
    """Padding that starts replica ``replica``'s stack ``STACK_STEP`` bytes a step lower.

    With randomisation off, a process's stack start follows from the size of its
    environment and arguments, and stays for its life: the same handoff, its
    environment longer by five bytes (``PWD=/work/main`` against ``PWD=/tmp``), took
    0.59 against 0.55 ms of CPU per request at c16 over 12 interleaved rounds. The
    i-th replica of every side gets the same padding, so each side is measured over
    the same spread of start offsets (six replicas: 0 to 80 bytes, more than a cache
    line) instead of on whichever one its command line happened to give it."""
    return {"BENCH_STACK_PAD": "x" * (STACK_STEP * replica)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Server:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return ""


@dataclass(frozen=True)
class Replicas:
    """One side of a comparison run as several processes of the same code, used in turn
    (round ``r`` uses replica ``r`` mod their number). Two processes of the same code
    can differ for as long as they live, even with address-space randomisation off and
    one hash seed (:func:`steady_env`): in one interleaved run of 20 rounds, four of
    handoff at c16 gave 0.77x to 0.88x the forwarder (one cause: where each one's stack
    starts, which :func:`layout_env` varies alike for every side). Rotating, no one
    process's luck decides a figure."""

    name: str
    servers: tuple[Server, ...]

    def pick(self, round_: int) -> Server:
        return self.servers[round_ % len(self.servers)]

    @property
    def described(self) -> str:
        """How a row's note says the side was run."""
        n = len(self.servers)
        return "one process a side" if n == 1 else f"{n} processes a side, in turn"

    @property
    def pids(self) -> list[int]:
        return [s.pid for s in self.servers]


def wait_ready(server: Server, timeout: float = 20.0) -> None:
    """Until the port accepts connections; raise with the log tail if the process dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.name} exited early:\n{server.log_tail()}")
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", server.port), 0.2),
        ):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{server.name} not ready after {timeout}s:\n{server.log_tail()}")


def last_line(e: Exception) -> str:
    """The last non-blank line of ``e`` (a failed start ends with its log's tail)."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[-1] if lines else type(e).__name__


def cpu_seconds(pid: int) -> float:
    """CPU time of all live threads of ``pid``: ns-exact from schedstat, else utime+stime."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def settle(
    pids: Sequence[int], window: float = 0.05, busy: float = 0.1, limit: float = 5.0
) -> bool:
    """Wait until ``pids`` together use under ``busy`` of a core over ``window`` seconds
    (deferred work such as store writes has drained); False if ``limit`` passed first."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = sum(cpu_seconds(p) for p in pids)
        time.sleep(window)
        if sum(cpu_seconds(p) for p in pids) - before < busy * window:
            return True
    return False


def memory_kb(pid: int) -> dict[str, int]:
    """``VmRSS`` (now) and ``VmHWM`` (peak) in KiB from ``/proc/PID/status``."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def reset_peak(pid: int) -> bool:
    """Reset ``VmHWM`` to the current RSS (Linux ≥ 4.0); False if not allowed."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@dataclass
class Fleet:
    """Starts servers and stops every one of them on exit, even after an error."""

    workdir: Path
    servers: list[Server] = field(default_factory=list)

    def start(
        self,
        name: str,
        argv: Sequence[str],
        port: int,
        cpus: frozenset[int],
        env: dict[str, str] | None = None,
        ready_s: float = 20.0,
    ) -> Server:
        log = self.workdir / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                env=steady_env(env),
                preexec_fn=pin(cpus),
                start_new_session=True,
            )
        server = Server(name, port, proc, log)
        self.servers.append(server)
        wait_ready(server, ready_s)
        return server

    def stop(self, server: Server) -> None:
        if server.proc.poll() is None:
            server.proc.send_signal(signal.SIGTERM)
            try:
                server.proc.wait(5)
            except subprocess.TimeoutExpired:
                server.proc.kill()
                server.proc.wait(5)
        if server in self.servers:
            self.servers.remove(server)

    def __enter__(self) -> Fleet:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for server in list(self.servers):
            self.stop(server)


def store_writer_pid(pid: int) -> int | None:
    """The store writer process that handoff ``pid`` started (``store.writer = process``)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    for child in map(int, children):
        if "proxy.store.writer_process" in Path(f"/proc/{child}/cmdline").read_text():
            return child
    return None


def pin_threads(pid: int, cpus: frozenset[int]) -> None:
    """Move every thread of ``pid`` (a thread inherits its pinning only when created)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        os.sched_setaffinity(int(task.name), cpus)


def store_health(port: int) -> dict[str, Any]:
    """The store section of handoff's /healthz ({} when it has no store)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as resp:
        store: dict[str, Any] = json.loads(resp.read()).get("store") or {}
        return store


def held_note(stored: Replicas) -> str:
    """What the stored side's /healthz says of its writers' pace: the requests held back
    for them (``store.max_lag_s``) and the slowest write."""
    held, held_s, slowest = 0, 0.0, 0.0
    for server in stored.servers:
        h = store_health(server.port)
        held += h.get("held_requests", 0)
        held_s += h.get("held_s", 0.0)
        slowest = max(slowest, h.get("slowest_write_s", 0.0))
    return (f"{held:,} requests held back for the writer ({held_s:.1f} s in all), "
            f"the slowest write {slowest:.2f} s after its reply")  # fmt: skip
