"""The store writer's work a turn, replayed from the frames a proxy would ship it.

``bench_store_writer`` times the SQLite writer on turn records; this one starts a step
earlier, from the bytes on the writer process's pipe, and feeds them to the writer
process's own loop: it decodes the frames (parsing what each body adds), writes
the turns a transaction at a time, commits and indexes. Two workloads, as the snapshot rows of
``make bench`` send them:

* ``resends``: the 1 KB request of the throughput rows again and again (each a fork);
* ``conversation``: the 500-turn conversation, replayed ``--replays`` times, each
  replay a conversation of its own (its marker retagged, as ``bench.loadgen`` does).

The frames are made as the proxy's shipper makes them (``wire.encode_turn`` and
``wire.frames``, a body shipped as what it adds to the last one), ``--batch`` turns a
batch; the answer is the bench upstream's. It prints the CPU a turn of what is timed.
For a count that does not move with the machine, count instructions under callgrind
(``valgrind --tool=callgrind --callgrind-out-file=/dev/null python -m
bench.bench_writer_replay resends --turns 600``), subtract those of the same run with
``--frames-only``, and divide the difference between two such figures (600 and 1,800
turns, say) by the difference in turns: start-up, making the frames and the final
drain drop out.
"""

from __future__ import annotations

import argparse
import io
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench import conversation
from bench.loadgen import conversation_bodies
from bench.run import chat_body
from bench.upstream import COMPLETION
from proxy.decide.decision import Decision
from proxy.ingress.incremental_parse import WORTH_REUSING, ResentBodies
from proxy.process_tuning import raise_gc_threshold
from proxy.store.base import TurnRecord
from proxy.store.db import connect
from proxy.store.pacing import Pacer, yield_cpu
from proxy.store.shipped import ShippedBodies
from proxy.store.sqlite import SqliteStore
from proxy.store.wire import encode_turn, frames
from proxy.store.writer_process import GIVE_WAY_S, HEAD, Backlog, serve


def _bodies(workload: str, turns: int, replays: int) -> Iterator[bytes]:
    if workload == "resends":
        body = chat_body(1024)
        for _ in range(turns):
            yield body
        return
    spec = {"model": conversation.MODEL, "turns": conversation.turns(turns)}
    one = conversation_bodies(spec)
    marker = conversation.MARKER.encode()
    for r in range(replays):
        tag = f"ROUND-{r + 1:04d}".encode()
        yield from (b.replace(marker, tag) for b in one)


def shipped_batches(workload: str, turns: int, replays: int, batch: int) -> list[bytes]:
    """The batches' bytes, as the proxy's shipper writes them (without their heads)."""
    parsed = ResentBodies(max_bytes=16 << 20, min_bytes=WORTH_REUSING)  # the proxy's
    held = ShippedBodies()  # the proxy's mirror of what its writer holds
    decision = Decision("passthrough", 128_000, 120_000, 1_000, None, True)
    batches: list[bytes] = []
    jobs = []
    for body in _bodies(workload, turns, replays):
        request, resends = parsed.parse_resending(body)
        record = TurnRecord(
            "bench", time.time(), request["model"], "default", request["messages"], 200,
            1.0, False, None, decision, raw_request=body, resends=resends,
            answer=COMPLETION,
        )  # fmt: skip
        jobs.append(encode_turn(record))
        if len(jobs) == batch:  # framed as they fill: only what is new is kept
            batches.append(b"".join(frames(jobs, held)))
            jobs = []
    if jobs:
        batches.append(b"".join(frames(jobs, held)))
    return batches


def replay(batches: list[bytes], path: Path) -> int:
    """Feed ``batches`` to the writer process's own loop (``writer_process.serve``, its
    store built as its ``main`` builds it) and return the turns stored."""
    pipe = io.BytesIO(b"".join(HEAD.pack(len(b), 0) + b for b in batches))
    backlog = Backlog()
    store = backlog.store = SqliteStore(
        path, pacer=Pacer(GIVE_WAY_S, yield_cpu, backlog.keeping_up)
    )
    serve(store, pipe, io.BytesIO(), backlog)  # drains and stops at the end of the input
    db = connect(path)
    try:
        return int(db.execute("SELECT count(*) FROM turns").fetchone()[0])
    finally:
        db.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=["resends", "conversation"])
    p.add_argument("--turns", type=int, help="resends (3000), or turns a replay (500)")
    p.add_argument("--replays", type=int, default=5, help="conversation replays")
    p.add_argument("--batch", type=int, default=41, help="turns a shipped batch")
    p.add_argument("--frames-only", action="store_true", help="make the frames, replay none")
    args = p.parse_args(argv)
    raise_gc_threshold()  # as the writer process does
    if args.turns is None:
        args.turns = 3000 if args.workload == "resends" else 500
    batches = shipped_batches(args.workload, args.turns, args.replays, args.batch)
    expected = args.turns * (args.replays if args.workload == "conversation" else 1)
    if args.frames_only:
        print(f"{args.workload}: {expected} turns framed in {len(batches)} batches")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.process_time()
        stored = replay(batches, Path(tmp) / "replay.db")
        cpu = time.process_time() - t0
    print(f"{args.workload}: {stored} of {expected} turns stored, "
          f"{cpu * 1e6 / max(stored, 1):.1f} µs of CPU a turn")  # fmt: skip
    return 0 if stored == expected else 1


if __name__ == "__main__":
    raise SystemExit(main())
