"""What a recorded turn costs each process, live: ``python -m bench.store_probe``.

The snapshot rows of ``make bench`` give one ratio; this says where the CPU behind it
goes. It starts the bench upstream and one handoff with its store's writer process,
placed as ``make bench`` places them (the proxy on one core; the writer, the upstream
and the load generator on the other), sends one of the snapshot rows' workloads for
``--seconds`` after a warm-up, waits for the writer to finish, and prints per turn
recorded: the user and kernel CPU of the proxy's event loop, of its other threads
(the store's shipper and report reader), of the writer's main thread (reading and
decoding frames) and of its other threads (SQLite, health), and the writer's bytes
written, write and read calls and context switches (all from ``/proc``, so Linux only).
Counts are exact; CPU moves with the machine, so compare runs made side by side.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import conversation
from bench.clients import LoadGen
from bench.measure import CHAT
from bench.procs import Cores, Fleet, Server, free_port, pin_threads, settle, store_writer_pid
from bench.run import chat_body, start_handoff, wait_recorded

TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Sample:
    """Counters of one process: CPU by thread group, and its I/O."""

    loop: tuple[float, float]  # the main thread's user and kernel seconds
    others: tuple[float, float]  # every other thread's
    io: dict[str, int]  # /proc/PID/io
    switches: tuple[int, int]  # voluntary, involuntary (all threads)


def sample(pid: int) -> Sample:
    loop, others, vol, invol = [0.0, 0.0], [0.0, 0.0], 0, 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        cpu = loop if int(task.name) == pid else others
        cpu[0] += int(fields[11]) / TICK
        cpu[1] += int(fields[12]) / TICK
        for line in (task / "status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key == "voluntary_ctxt_switches":
                vol += int(value)
            elif key == "nonvoluntary_ctxt_switches":
                invol += int(value)
    io = {
        k: int(v)
        for k, v in (line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    }
    return Sample((loop[0], loop[1]), (others[0], others[1]), io, (vol, invol))


def _cpu(before: tuple[float, float], after: tuple[float, float], turns: int) -> str:
    user, kernel = ((a - b) * 1e6 / turns for a, b in zip(after, before, strict=True))
    return f"{user:,.0f} + {kernel:,.0f} µs"


def report(proxy: tuple[Sample, Sample], writer: tuple[Sample, Sample], turns: int) -> str:
    (p0, p1), (w0, w1) = proxy, writer
    per = {k: (w1.io[k] - w0.io[k]) / turns for k in ("wchar", "syscw", "rchar", "syscr")}
    vol, invol = ((b - a) / turns for a, b in zip(w0.switches, w1.switches, strict=True))
    return "\n".join(
        [
            f"per turn recorded ({turns:,} turns), CPU as user + kernel:",
            f"  proxy, event loop        {_cpu(p0.loop, p1.loop, turns)}",
            f"  proxy, other threads     {_cpu(p0.others, p1.others, turns)}  (store shipper, reports)",
            f"  writer, main thread      {_cpu(w0.loop, w1.loop, turns)}  (reads, decodes)",
            f"  writer, other threads    {_cpu(w0.others, w1.others, turns)}  (SQLite, health)",
            f"  writer I/O               {per['wchar']:,.0f} bytes in {per['syscw']:.2f} writes, "
            f"{per['rchar']:,.0f} bytes in {per['syscr']:.2f} reads; "
            f"{vol:.2f} + {invol:.2f} context switches (voluntary + not)",
        ]
    )


def _send(lg: LoadGen, h: Server, workload: str, files: dict[str, Path], seconds: float,
          tag: int) -> int:  # fmt: skip
    """Send the workload for about ``seconds``; the turns answered."""
    if workload == "resends":
        return int(lg.run(op="closed", port=h.port, path=CHAT, body_file=str(files["body"]),
                          concurrency=16, seconds=seconds, requests=10**9)["ok"])  # fmt: skip
    sent, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:  # one replay after another, each a new conversation
        sent += int(lg.run(op="replay", port=h.port, body_file=str(files["conversation"]),
                           marker=conversation.MARKER, tag=f"ROUND-{tag:04d}",
                           seconds=max(deadline - time.monotonic(), 0.1))["ok"])  # fmt: skip
        tag += 1
    return sent


def _recorded(db: Path, expected: int, writer: int) -> int:
    """The turns in ``db`` once ``expected`` are there and the writer has gone quiet:
    what was sent is then written and its cost counted."""
    n = wait_recorded([db], expected, limit=60.0)
    settle([writer])
    return n


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=["resends", "conversation"])
    p.add_argument("--seconds", type=float, default=8.0, help="how long to send (after warm-up)")
    p.add_argument("--turns", type=int, default=500, help="turns of the conversation")
    args = p.parse_args(argv)
    cores = Cores.detect()
    os.sched_setaffinity(0, cores.client)
    with tempfile.TemporaryDirectory(prefix="handoff-probe-") as tmp, Fleet(Path(tmp)) as fleet:
        work = Path(tmp)
        files = {"conversation": work / "conversation.json", "body": work / "body.json"}
        conversation.write(files["conversation"], args.turns)
        files["body"].write_bytes(chat_body(1024))
        port = free_port()
        upstream = fleet.start("upstream", [sys.executable, "-m", "bench.upstream",
                                            "--port", str(port)], port, cores.client)  # fmt: skip
        db = work / "store.db"
        h = start_handoff(fleet, "handoff", upstream, cores.server, db,
                          {"HANDOFF_STORE__WRITER": "process"})  # fmt: skip
        writer = store_writer_pid(h.pid)
        if writer is None:
            print("handoff started no store writer process", file=sys.stderr)
            return 1
        pin_threads(writer, cores.client)
        with LoadGen(cores.client) as lg:
            warm = _send(lg, h, args.workload, files, 2.0, 1)  # parses, pools, caches
            _recorded(db, warm, writer)
            before = (sample(h.pid), sample(writer))
            sent = _send(lg, h, args.workload, files, args.seconds, 1000)
            stored = _recorded(db, warm + sent, writer) - warm
            after = (sample(h.pid), sample(writer))
        print(
            f"{args.workload}: {sent:,} turns answered in {args.seconds:g} s, {stored:,} recorded"
        )
        print(report((before[0], after[0]), (before[1], after[1]), max(stored, 1)))
        return 0 if stored == sent else 1


if __name__ == "__main__":
    raise SystemExit(main())
