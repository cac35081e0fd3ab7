"""``python -m bench.run [--quick] [--out DIR]``: the benchmark behind ``make bench``.

Starts the canned upstream, the bare forwarder and handoff (its real CLI, JSON logs to
a file) as pinned subprocesses on free loopback ports, runs every measurement
interleaved, prints the table and writes ``results.json``, ``results.md`` and
``chart.svg``. Every server is stopped on the way out, error or not.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import chart, conversation, litellm_peer, measure, report
from bench.clients import LoadGen, Wrk
from bench.measure import Bench, Plan, Row, interleave, median, ratio_interval
from bench.procs import (
    Cores,
    Fleet,
    Replicas,
    Server,
    cpu_seconds,
    free_port,
    held_note,
    last_line,
    layout_env,
    pin_threads,
    settle,
    store_health,
    store_writer_pid,
)

WORDS = "the quick brown fox jumps over the lazy dog while handoff keeps the thread "


def chat_body(size: int, stream: bool = False, model: str = "gpt-4o-mini") -> bytes:
    """A chat request of exactly ``size`` bytes of plain text (or the smallest one)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [
            {"role": "system", "content": "You are a terse assistant."},
            {"role": "user", "content": ""},
        ],
    }
    if stream:
        body["stream"] = True
    room = max(0, size - len(json.dumps(body).encode()))
    body["messages"][1]["content"] = (WORDS * (room // len(WORDS) + 1))[:room]
    return json.dumps(body).encode()


def messages_body(size: int, model: str = "claude-sonnet-4-5") -> bytes:
    """An Anthropic Messages request of ``size`` bytes, shaped as ``chat_body``'s."""
    body: dict[str, Any] = {
        "model": model,
        "max_tokens": 1024,
        "system": "You are a terse assistant.",
        "messages": [{"role": "user", "content": ""}],
    }
    room = max(0, size - len(json.dumps(body).encode()))
    body["messages"][0]["content"] = (WORDS * (room // len(WORDS) + 1))[:room]
    return json.dumps(body).encode()


def write_bodies(workdir: Path, plan: Plan) -> dict[str, str]:
    # The big body names a 1M-token model so that it fits and passes through unchanged.
    sizes = {"1k": (1024, False, "gpt-4o-mini"), "32k": (32 << 10, False, "gpt-4o-mini"),
             "stream": (1024, True, "gpt-4o-mini"), "big": (plan.big_bytes, False, "gpt-4.1")}  # fmt: skip
    paths = {}
    for name, (size, stream, model) in sizes.items():
        path = workdir / f"body-{name}.json"
        path.write_bytes(chat_body(size, stream, model))
        paths[name] = str(path)
    path = workdir / "body-messages-1k.json"
    path.write_bytes(messages_body(1024))
    paths["messages-1k"] = str(path)
    path = workdir / "body-responses-1k.json"
    path.write_bytes(responses_body(1024))
    paths["responses-1k"] = str(path)
    return paths


def responses_body(size: int, model: str = "gpt-4o-mini") -> bytes:
    """A Responses request as Codex sends one (instructions, items, store false), of
    ``size`` bytes."""
    body: dict[str, Any] = {
        "model": model,
        "instructions": "You are a terse assistant.",
        "input": [{"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": ""}]}],
        "store": False,
        "include": ["reasoning.encrypted_content"],
    }  # fmt: skip
    room = max(0, size - len(json.dumps(body).encode()))
    body["input"][0]["content"][0]["text"] = (WORDS * (room // len(WORDS) + 1))[:room]
    return json.dumps(body).encode()


def child_env() -> dict[str, str]:
    """The environment without HANDOFF_* settings, so only the flags configure handoff."""
    return {k: v for k, v in os.environ.items() if not k.startswith("HANDOFF_")}


def start_handoff(
    fleet: Fleet,
    name: str,
    upstream: Server,
    cpus: frozenset[int],
    store: Path | None,
    env: dict[str, str] | None = None,
    replica: int = 0,
) -> Server:
    config = fleet.workdir / "empty.toml"
    config.touch()
    port = free_port()
    argv = [sys.executable, "-m", "proxy.cli", "--config", str(config), "serve",
            "--host", "127.0.0.1", "--port", str(port),
            "--upstream", f"http://127.0.0.1:{upstream.port}/v1", "--log-format", "json",
            *(["--store", str(store)] if store else ["--no-store"])]  # fmt: skip
    return fleet.start(
        name, argv, port, cpus, {**child_env(), **(env or {}), **layout_env(replica)}
    )


def start_forwarder(
    fleet: Fleet, name: str, upstream: Server, cpus: frozenset[int], replica: int = 0
) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "bench.forwarder", "--port", str(port),
            "--upstream", f"http://127.0.0.1:{upstream.port}"]  # fmt: skip
    return fleet.start(name, argv, port, cpus, {**os.environ, **layout_env(replica)})


def store_wired(server: Server) -> bool:
    """True when handoff's /healthz reports a store, i.e. ``serve`` opened one."""
    return bool(store_health(server.port))


def not_available(what: str, why: str) -> Row:
    return Row(what, "—", None, None, "", None, "info", "≥ 0.9×", None, f"not available: {why}")


def measure_all(
    b: Bench, fleet: Fleet, cores: Cores, notes: list[str], snapshots_only: bool = False
) -> list[Row]:
    say = _say
    upstream = fleet.start("direct", [sys.executable, "-m", "bench.upstream",
                                      "--port", str(port := free_port()),
                                      "--chunks", str(b.plan.chunks)],
                           port, cores.client)  # fmt: skip
    n = range(b.plan.replicas)
    fwds = Replicas(
        "forwarder",
        tuple(start_forwarder(fleet, _nth("forwarder", i), upstream, cores.server, i) for i in n),
    )
    handoffs = Replicas(
        "handoff",
        tuple(
            start_handoff(fleet, _nth("handoff", i), upstream, cores.server, None, replica=i)
            for i in n
        ),
    )
    fwd, handoff = fwds.servers[0], handoffs.servers[0]  # (for the rows on one process)
    say("warming up")
    measure.warm(b, [upstream, *fwds.servers, *handoffs.servers])
    if snapshots_only:
        return _store(b, fleet, upstream, handoffs, cores)
    rows: list[Row] = []
    for body in ("1k", "32k"):
        say(f"CPU per request, {body} body")
        rows.append(measure.cpu_per_request(b, fwds, handoffs, body))
    for body, route in (("messages-1k", measure.MESSAGES), ("responses-1k", measure.RESPONSES)):
        say(f"CPU per request, {body} body")
        rows.append(measure.cpu_per_request(b, fwds, handoffs, body, route))
    say("latency at concurrency 1")
    rows += measure.latency(b, upstream, fwd, handoff)
    rows += measure.latency(b, upstream, fwd, handoff, "responses-1k")
    for c in (16, 64):
        say(f"throughput at concurrency {c}")
        rows.append(measure.throughput(b, fwds, handoffs, c, "fwd", 0.8))
    say("streaming")
    rows += measure.streaming(b, upstream, fwd, handoff)
    rows += _litellm(b, fleet, upstream, handoff, cores, notes)
    rows += _store(b, fleet, upstream, handoffs, cores)
    say("peak memory with big requests in flight")
    h_mem, f_mem = measure.peak_rss(b, handoff), measure.peak_rss(b, fwd)
    rows.append(measure.memory_row(b, h_mem, f_mem))
    return rows


def _nth(name: str, i: int) -> str:
    return name if i == 0 else f"{name}-{i + 1}"


def _litellm(
    b: Bench, fleet: Fleet, upstream: Server, handoff: Server, cores: Cores, notes: list[str]
) -> list[Row]:
    body = Path(b.bodies["1k"]).read_bytes()
    started = litellm_peer.start(fleet, upstream, cores.server, b.litellm, body)
    if isinstance(started, str):
        notes.append(started)
        return []
    _say("throughput vs LiteLLM")
    measure.warm(b, [started])
    rows = [measure.throughput(b, started, handoff, c, "vs LiteLLM", 20.0) for c in (16, 64)]
    fleet.stop(started)
    about = f"LiteLLM {litellm_peer.version(started.proc.args[0])}, pinned to handoff's core"
    for row in rows:
        row.note = f"{row.note}; {about}"
    return rows


STORE_SETUPS = (
    # (writer, where its CPU goes, target): the default on a machine with a free core,
    # then what a one-CPU machine (auto) gets.
    ("process", "writer process on the other core", 0.9),
    ("thread", "writer thread on the proxy's core", None),
)


def _store(b: Bench, fleet: Fleet, upstream: Server, handoffs: Replicas, cores: Cores) -> list[Row]:
    rows = [_store_row(b, fleet, upstream, handoffs, cores, *setup) for setup in STORE_SETUPS]
    return [*rows, _conversation_row(b, fleet, upstream, handoffs, cores)]


def _start_stored(b: Bench, fleet: Fleet, upstream: Server, cores: Cores, label: str,
                  writer: str) -> tuple[Replicas, list[Path], list[int]]:  # fmt: skip
    """``plan.replicas`` handoffs with snapshots on (each its own file), their writer
    processes pinned with the load generator: the side, its files, the writers' pids."""
    servers: list[Server] = []
    dbs = [fleet.workdir / f"s-{label}-{i}.db" for i in range(b.plan.replicas)]
    try:
        for i, db in enumerate(dbs):
            servers.append(start_handoff(fleet, _nth(f"handoff-store-{label}", i), upstream,
                                         cores.server, db, {"HANDOFF_STORE__WRITER": writer}, i))  # fmt: skip
    except RuntimeError:
        for server in servers:
            fleet.stop(server)
        raise
    pids = [p for s in servers if writer == "process" and (p := store_writer_pid(s.pid))]
    for pid in pids:
        pin_threads(pid, cores.client)
    return Replicas(f"handoff-store-{label}", tuple(servers)), dbs, pids


def _conversation_row(b: Bench, fleet: Fleet, upstream: Server, handoffs: Replicas,
                      cores: Cores) -> Row:  # fmt: skip
    """Issue 5's own workload: a 500-turn conversation replayed turn after turn (each
    replay a new conversation), snapshots on (writer process) against off."""
    what = "snapshots on/off: 500-turn conversation, writer process"
    conv = fleet.workdir / "conversation.json"
    sizes = conversation.write(conv, b.plan.conversation_turns)
    try:
        stored, dbs, writers = _start_stored(b, fleet, upstream, cores, "conversation", "process")
    except RuntimeError as e:
        return not_available(what, f"handoff with --store did not start ({last_line(e)})")
    _say("snapshots on vs off (500-turn conversation)")
    try:
        replays = iter(range(1, 10_000))
        side = {s.name: r.name for r in (handoffs, stored) for s in r.servers}
        sent = {handoffs.name: 0, stored.name: 0}

        def once(t: Server) -> float:
            r = b.lg.run(op="replay", port=t.port, body_file=str(conv), marker=conversation.MARKER,
                         tag=f"ROUND-{next(replays):04d}", seconds=b.plan.step_seconds * 3)  # fmt: skip
            sent[side[t.name]] += int(r["ok"])
            return float(r["rps"])

        for t in (*handoffs.servers, *stored.servers):
            once(t)  # warm: first parses, pools, the writer's caches
        warm_sent = sent[stored.name]
        wait_recorded(dbs, warm_sent, limit=60.0)
        cpu0 = sum(map(cpu_seconds, writers))
        per = interleave(b.plan.conversation_rounds, [handoffs, stored], once)
        b.raw["rps_conversation_replay"] = per
        recorded = wait_recorded(dbs, sent[stored.name], limit=60.0)
        writer = ""
        if writers:
            per_turn = _writer_ms_per_turn(writers, cpu0, sent[stored.name] - warm_sent)
            writer = (
                f"; the writer processes used {per_turn:.2f} ms of CPU a turn on the client's core"
            )
        h, f = median(per[stored.name]), median(per[handoffs.name])
        ratio = h / f if f else None
        note = (f"{sizes['turns']} turns, {sizes['messages']:,} messages, final history "
                f"{sizes['final_history_bytes'] / 1024:,.0f} KB; {recorded:,} of "
                f"{sent[stored.name]:,} turns recorded ({warm_sent} in the warm-up replays)"
                f"{writer}; {held_note(stored)}; {stored.described}")  # fmt: skip
        return Row(what, "snapshots off (--no-store)", h, f, "turns/s", ratio, "ratio",
                   "≥ 0.9×", ratio is not None and ratio >= 0.9, note,
                   ratio_interval(per[stored.name], per[handoffs.name]))  # fmt: skip
    finally:
        for server in stored.servers:
            fleet.stop(server)


def _store_row(b: Bench, fleet: Fleet, upstream: Server, handoffs: Replicas, cores: Cores,
               writer: str, where: str, target: float | None) -> Row:  # fmt: skip
    what = f"snapshots on/off: c16 resends of one request, writer {writer}"
    try:
        stored, dbs, writers = _start_stored(b, fleet, upstream, cores, writer, writer)
    except RuntimeError as e:
        return not_available(what, f"handoff with --store did not start ({last_line(e)})")
    try:
        if not store_wired(stored.servers[0]):
            return not_available(what, "`handoff serve --store` does not open a store yet")
        _say(f"snapshots on vs off ({where})")
        measure.warm(b, list(stored.servers))
        settle(writers)
        cpu0, turns0 = sum(map(cpu_seconds, writers)), sum(map(_turns_stored, dbs))
        row = measure.throughput(b, handoffs, stored, 16, f"snapshots on, {writer}", target or 0)
        row.what, row.compared_with = what, "snapshots off (--no-store)"
        row.note = f"{where}; {held_note(stored)}; {stored.described}"
        if target is None:
            row.target, row.passed = "reported", None
        if writers:
            settle(writers)
            turns = sum(map(_turns_stored, dbs)) - turns0
            per_turn = _writer_ms_per_turn(writers, cpu0, turns)
            row.note = (f"{where}: the writer processes (pinned with the load generator) used "
                        f"{per_turn:.3f} ms of CPU per turn ({turns:,} turns); "
                        f"{held_note(stored)}; {stored.described}")  # fmt: skip
        return row
    finally:
        for server in stored.servers:
            fleet.stop(server)


def _writer_ms_per_turn(pids: list[int], cpu0: float, turns: int) -> float:
    """The writer processes' CPU per turn since ``cpu0``, once their deferred work is done."""
    settle(pids)
    return (sum(map(cpu_seconds, pids)) - cpu0) * 1e3 / max(turns, 1)


def wait_recorded(dbs: list[Path], expected: int, limit: float) -> int:
    """Turns in ``dbs`` once ``expected`` are there, or after ``limit`` seconds (the
    writer batches, so the last turns land up to a flush interval later)."""
    deadline = time.monotonic() + limit
    while (n := sum(map(_turns_stored, dbs))) < expected and time.monotonic() < deadline:
        time.sleep(0.1)
    return n


def _turns_stored(db: Path) -> int:
    con = sqlite3.connect(db)
    try:
        return int(con.execute("SELECT count(*) FROM turns").fetchone()[0])
    finally:
        con.close()


def _say(text: str) -> None:
    print(f"… {text}", file=sys.stderr, flush=True)


def write_results(out: Path, rows: list[Row], b: Bench, info: dict[str, Any],
                  notes: list[str], cmd: str, seconds: float) -> str:  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    data = {"machine": info, "plan": b.plan.__dict__, "seconds": round(seconds, 1),
            "rows": [r.to_json() for r in rows], "notes": notes, "raw": b.raw}  # fmt: skip
    (out / "results.json").write_text(json.dumps(data, indent=2) + "\n")
    md = report.markdown(rows, info, notes, cmd)
    (out / "results.md").write_text(md)
    subtitle = f"{info['cpu']}, {info['cores']} cores, Python {info['python']}"
    (out / "chart.svg").write_text(chart.render(rows, subtitle))
    return md


def scaled(plan: Plan, k: int) -> Plan:
    """``plan`` with ``k`` times the rounds of the throughput and conversation rows."""
    return dataclasses.replace(
        plan, tput_rounds=plan.tput_rounds * k, conversation_rounds=plan.conversation_rounds * k
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="benchmark handoff against a bare forwarder")
    parser.add_argument("--quick", action="store_true", help="tiny counts (smoke test)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument(
        "--litellm",
        metavar="PATH",
        help="LiteLLM's `litellm` command, installed in an environment of its own "
        "(it is never a dependency): adds the throughput rows against LiteLLM",
    )
    parser.add_argument(
        "--snapshots-only",
        action="store_true",
        help="only the snapshots on/off rows (with --rounds-scale, to narrow their intervals)",
    )
    parser.add_argument(
        "--rounds-scale",
        type=int,
        default=1,
        metavar="K",
        help="K times the rounds of the throughput and conversation rows: an interval "
        "narrows as 1/sqrt(rounds)",
    )
    args = parser.parse_args(argv)
    if args.rounds_scale < 1:
        parser.error("--rounds-scale must be 1 or more")
    plan = scaled(measure.QUICK if args.quick else measure.FULL, args.rounds_scale)
    cores = Cores.detect()
    info = report.machine(cores.pinned, plan.use_wrk and shutil.which("wrk") is not None)
    os.sched_setaffinity(0, cores.client)
    t0 = time.monotonic()
    notes = [] if cores.pinned else ["only one CPU available: processes are not pinned"]
    with tempfile.TemporaryDirectory(prefix="handoff-bench-") as tmp:
        workdir = Path(tmp)
        wrk = Wrk.find(cores.client, workdir) if plan.use_wrk else None
        with Fleet(workdir) as fleet, LoadGen(cores.client) as lg:
            b = Bench(plan, lg, wrk, write_bodies(workdir, plan), {}, args.litellm)
            rows = measure_all(b, fleet, cores, notes, args.snapshots_only)
    flags = ["--quick"] * args.quick + ["--litellm PATH/TO/bin/litellm"] * bool(args.litellm)
    flags += ["--snapshots-only"] * args.snapshots_only
    flags += [f"--rounds-scale {args.rounds_scale}"] * (args.rounds_scale > 1)
    cmd = "make bench" + (f' ARGS="{" ".join(flags)}"' if flags else "")
    md = write_results(args.out, rows, b, info, notes, cmd, time.monotonic() - t0)
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
