"""``python -m bench.load [--seconds 60] [--clients 200]``: handoff under sustained load.

Starts the canned upstream and ``handoff serve`` (store on, in a temp dir) as pinned
subprocesses, then runs ``clients`` concurrent keep-alive clients, half of them
streaming, for ``seconds``. Each client finishes the request it has in flight, then
handoff gets SIGTERM and must exit cleanly; the store is then counted. Prints one JSON
line: requests completed, proxy-made errors (the canned upstream never answers 5xx, so
every 5xx is handoff's), turns recorded, peak RSS and CPU of the handoff process, and
the store's lag (the oldest unwritten turn's age, sampled from /healthz), which must
stay within a second: the requests the proxy held back for its writer say what that took.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.loadgen import encode_request, read_response
from bench.procs import (
    Cores,
    Fleet,
    Server,
    cpu_seconds,
    free_port,
    memory_kb,
    pin_threads,
    store_health,
    store_writer_pid,
)
from bench.run import start_handoff

REQUEST_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 300.0  # SIGTERM to exit, store drain included; then it is killed
LAG_EVERY_S = 0.1


@dataclass
class Tally:
    """What the clients saw, over all of them."""

    completed: int = 0  # 200 answers read to the end
    statuses: Counter[int] = field(default_factory=Counter)
    transport_errors: int = 0  # refused, reset or timed-out connections
    events: int = 0  # SSE events received by streaming clients
    lags: list[float] = field(default_factory=list)  # sampled store lag (watch_lag)

    @property
    def proxy_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)


def chat_payload(port: int, client: int, stream: bool) -> bytes:
    """One client's request: its own conversation, so the store sees distinct sessions."""
    body: dict[str, Any] = {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": f"Client {client} asks: what is the capital of France?"},
        ],
    }
    if stream:
        body["stream"] = True
    return encode_request(port, "/v1/chat/completions", json.dumps(body).encode())


async def _client(port: int, payload: bytes, deadline: float, tally: Tally) -> None:
    """Send requests back to back on one keep-alive connection until the deadline."""
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    def on_chunk(data: bytes) -> None:
        tally.events += data.count(b"\n\n")

    while time.monotonic() < deadline:
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                if conn is None:
                    conn = await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)
                conn[1].write(payload)
                status = await read_response(conn[0], on_chunk)
        except (OSError, asyncio.IncompleteReadError, ValueError, TimeoutError):
            tally.transport_errors += 1
            if conn is not None:
                conn[1].close()
            conn = None
            await asyncio.sleep(0.05)
            continue
        tally.statuses[status] += 1
        tally.completed += status == 200
    if conn is not None:
        conn[1].close()


async def drive(port: int, clients: int, seconds: float) -> Tally:
    """``clients`` concurrent clients (every second one streaming) for ``seconds``, while
    the store's lag is sampled (``Tally.lags``)."""
    tally = Tally()
    deadline = time.monotonic() + seconds
    payloads = [chat_payload(port, i, stream=i % 2 == 1) for i in range(clients)]
    await asyncio.gather(
        watch_lag(port, deadline, tally.lags),
        *(_client(port, p, deadline, tally) for p in payloads),
    )
    return tally


async def watch_lag(port: int, deadline: float, lags: list[float]) -> None:
    """The age of the oldest turn not yet on disk, as /healthz says, every ``LAG_EVERY_S``
    (or as fast as the loaded proxy answers) until the deadline."""
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError):
            health = await asyncio.to_thread(store_health, port)
            lags.append(health.get("oldest_unwritten_s") or 0.0)
        await asyncio.sleep(LAG_EVERY_S)


def count_turns(db: Path) -> int:
    """Turns in the store (read-only, after handoff has exited)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        (n,) = conn.execute("SELECT count(*) FROM turns").fetchone()
    return int(n)


def stop_gracefully(server: Server, timeout: float = DRAIN_TIMEOUT_S) -> int | None:
    """SIGTERM and wait for the exit code; None if it had to be killed."""
    server.proc.send_signal(signal.SIGTERM)
    try:
        return server.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        server.proc.kill()
        server.proc.wait(5)
        return None


def run_load(
    seconds: float,
    clients: int,
    workdir: Path,
    cores: Cores,
    writer: str = "process",
    max_lag_s: float | None = None,
) -> dict[str, Any]:
    """Start the servers, drive them, stop handoff, count its store; the figures.

    A writer process is pinned with the load generator (handoff's core is its own)."""
    db = workdir / "load.db"
    with Fleet(workdir) as fleet:
        handoff, writer_pid = _start(fleet, db, cores, writer, max_lag_s)
        cpu0, t0 = cpu_seconds(handoff.pid), time.monotonic()
        wcpu0 = cpu_seconds(writer_pid) if writer_pid is not None else 0.0
        tally = asyncio.run(drive(handoff.port, clients, seconds))
        wall, cpu = time.monotonic() - t0, cpu_seconds(handoff.pid) - cpu0
        peak_kb = memory_kb(handoff.pid).get("VmHWM", 0)
        health = store_health(handoff.port)
        # the writer's CPU per turn written so far (it exits with the proxy, after draining)
        written = count_turns(db)
        wcpu = cpu_seconds(writer_pid) - wcpu0 if writer_pid is not None else None
        t_stop = time.monotonic()
        exit_code = stop_gracefully(handoff)
        drain = time.monotonic() - t_stop
        fleet.servers.remove(handoff)
    recorded = count_turns(db)
    return {
        "clients": clients,
        "streaming_clients": clients // 2,
        "seconds": round(wall, 2),
        "completed": tally.completed,
        "rps": round(tally.completed / wall, 1) if wall else 0.0,
        "statuses": {str(k): v for k, v in sorted(tally.statuses.items())},
        "proxy_errors": tally.proxy_errors,
        "transport_errors": tally.transport_errors,
        "sse_events": tally.events,
        "recorded": recorded,
        **store_figures(health, tally.lags),
        "shutdown_s": round(drain, 2),
        "all_recorded": recorded == sum(tally.statuses.values()),
        "exit_code": exit_code,
        "peak_rss_mib": round(peak_kb / 1024, 1),
        "cpu_s": round(cpu, 2),
        "cpu_percent": round(100 * cpu / wall, 1) if wall else 0.0,
        "pinned": cores.pinned,
        "store_writer": writer,
        "writer_cpu_ms_per_turn": round(wcpu * 1e3 / written, 3) if wcpu and written else None,
    }


def _start(fleet: Fleet, db: Path, cores: Cores, writer: str,
           max_lag_s: float | None) -> tuple[Server, int | None]:  # fmt: skip
    """The upstream and handoff (with its store at ``db``); handoff and its writer
    process's pid, pinned with the load generator (None for a writer thread)."""
    up_port = free_port()
    upstream = fleet.start(
        "upstream",
        [sys.executable, "-m", "bench.upstream", "--port", str(up_port), "--chunks", "8"],
        up_port,
        cores.client,
    )
    env = {"HANDOFF_STORE__WRITER": writer}
    if max_lag_s is not None:
        env["HANDOFF_STORE__MAX_LAG_S"] = str(max_lag_s)
    handoff = start_handoff(fleet, "handoff", upstream, cores.server, db, env)
    writer_pid = store_writer_pid(handoff.pid) if writer == "process" else None
    if writer_pid is not None:
        pin_threads(writer_pid, cores.client)
    return handoff, writer_pid


def store_figures(health: dict[str, Any], lags: list[float]) -> dict[str, Any]:
    """The store at the end of the load (its /healthz) and its lag sampled during it."""
    return {
        "store_queue_at_end_of_load": health.get("queue_depth"),
        "store_behind_s_at_end_of_load": health.get("oldest_unwritten_s"),
        "store_write_failures": health.get("write_failures"),
        "store_lag_samples": len(lags),
        "store_lag_median_s": statistics.median(lags) if lags else None,
        "store_lag_max_s": max(lags, default=None),
        "store_lag_over_1s": sum(lag > 1.0 for lag in lags),
        "store_slowest_write_s": health.get("slowest_write_s"),
        "held_requests": health.get("held_requests"),
        "held_s": health.get("held_s"),
        "writer_stalls": health.get("writer_stalls"),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="handoff under sustained concurrent load")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--clients", type=int, default=200)
    parser.add_argument("--writer", choices=["process", "thread"], default="process",
                        help="the store writer (process: auto's choice with a free core)")  # fmt: skip
    parser.add_argument("--max-lag-s", type=float,
                        help="store.max_lag_s for handoff (0: never hold requests back)")  # fmt: skip
    args = parser.parse_args(argv)
    cores = Cores.detect()
    os.sched_setaffinity(0, cores.client)  # with the upstream; handoff gets its own core
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so the Fleet stops its servers
    with tempfile.TemporaryDirectory(prefix="handoff-load-") as tmp:
        figures = run_load(
            args.seconds, args.clients, Path(tmp), cores, args.writer, args.max_lag_s
        )
    print(json.dumps(figures), flush=True)
    ok = (
        figures["proxy_errors"] == 0
        and figures["all_recorded"]
        and figures["exit_code"] == 0
        and figures["store_lag_over_1s"] == 0
        and (figures["store_slowest_write_s"] or 0.0) <= 1.0
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
