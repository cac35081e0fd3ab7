"""The measurements: each runs its targets interleaved (A B A B …) over rounds and
turns the medians into a :class:`Row` that compares handoff with its baseline.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from bench.clients import LoadGen, Wrk
from bench.procs import Replicas, Server, cpu_seconds, memory_kb, reset_peak, settle

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
ROUTE_NAMES = {MESSAGES: "Messages", RESPONSES: "Responses"}
"""The wire formats other than chat, by route, as the rows name them."""
BODY_ROUTES = {"messages-1k": MESSAGES, "responses-1k": RESPONSES}
"""The route a body goes to, when it is not chat's."""


@dataclass(frozen=True)
class Plan:
    """How much to run; every loop is bounded by these counts and seconds."""

    rounds: int
    cpu_requests: int
    lat_requests: int
    tput_seconds: float
    stream_requests: int
    big_bytes: int
    use_wrk: bool
    warm_requests: int = 100
    cpu_concurrency: int = 8
    chunks: int = 8
    chunk_delay_ms: int = 5
    big_concurrency: int = 64
    step_seconds: float = 20.0
    conversation_turns: int = 500
    tput_rounds: int = 12
    """Rounds of the throughput rows, over ``replicas`` processes a side in turn."""
    replicas: int = 6
    """Processes a side in the CPU, throughput and snapshot rows (:class:`Replicas`),
    each with its own stack start (:func:`~bench.procs.layout_env`)."""
    conversation_rounds: int = 21
    """Replays per side of the 500-turn conversation: each is 500 turns, 1-2 s, so
    seven were a noisy sample (the same code: 0.90x to 1.00x in one day's runs)."""


FULL = Plan(
    rounds=7, cpu_requests=1500, lat_requests=300, tput_seconds=2, stream_requests=10,
    big_bytes=4 << 20, use_wrk=True,
)  # fmt: skip
"""Throughput in 12 rounds of 2 s over six processes a side: with five rounds of 2 s,
the same code's c16 ratio moved between 0.76x and 0.93x from one run to the next on
this shared machine, and with seven of 3 s on one process a side, 0.75x to 0.88x."""
QUICK = Plan(
    rounds=2, cpu_requests=100, lat_requests=40, tput_seconds=0.3, stream_requests=2,
    big_bytes=256 << 10, use_wrk=False, warm_requests=20, chunks=4, chunk_delay_ms=2,
    step_seconds=5.0, conversation_turns=20, conversation_rounds=2, tput_rounds=2, replicas=1,
)  # fmt: skip


@dataclass
class Row:
    """One line of the table: handoff's figure, its baseline's, and how they compare."""

    what: str
    compared_with: str
    handoff: float | None
    baseline: float | None
    unit: str
    figure: float | None
    kind: str  # "ratio", "added_ms" or "info"
    target: str
    passed: bool | None
    note: str = ""
    interval: tuple[float, float] | None = None
    """A ratio's 95% bootstrap interval over the rounds (:func:`ratio_interval`)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Bench:
    """What every measurement needs: the plan, the load tools and the bodies on disk."""

    plan: Plan
    lg: LoadGen
    wrk: Wrk | None
    bodies: dict[str, str]
    raw: dict[str, Any]
    litellm: str | None = None  # LiteLLM's command, from an environment of its own


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def ratio_interval(
    top: Sequence[float],
    bottom: Sequence[float],
    *,
    level: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float] | None:
    """The ``level`` bootstrap interval of ``median(top) / median(bottom)``, rounds
    resampled in their interleaved pairs (round i of each side ran back to back, so a
    slow spell of the machine stays in one pair). None for fewer than five pairs.

    Rounds of one run differ by ±20% on this shared machine: the interval says whether
    a ratio near its target is a result or the run's noise. Seeded, so a rerun of the
    report on the same figures gives the same interval.
    """
    n = min(len(top), len(bottom))
    if n < 5:
        return None
    rng = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        b = statistics.median(bottom[i] for i in picks)
        if b:
            ratios.append(statistics.median(top[i] for i in picks) / b)
    if not ratios:
        return None
    ratios.sort()
    cut = (1 - level) / 2
    return ratios[int(cut * (len(ratios) - 1))], ratios[int((1 - cut) * (len(ratios) - 1))]


def interleave(
    rounds: int, targets: Sequence[Server | Replicas], once: Callable[[Server], float]
) -> dict[str, list[float]]:
    """``once(target)`` for A B A B … over ``rounds``, each once all targets are idle
    (so one's deferred work never runs during another's turn); figures per target name.
    A target of :class:`Replicas` runs one of its processes a round, in turn."""
    sides = [_as_replicas(t) for t in targets]
    out: dict[str, list[float]] = {t.name: [] for t in sides}
    pids = [p for t in sides for p in t.pids]
    for r in range(rounds):
        for side in sides:
            settle(pids)
            out[side.name].append(once(side.pick(r)))
    return out


def warm(b: Bench, targets: Sequence[Server]) -> None:
    """First requests load lazy state (tokenizers, pools) before anything is timed."""
    for t in targets:
        for body in ("1k", "32k", "responses-1k"):
            b.lg.run(op="closed", port=t.port, path=BODY_ROUTES.get(body, CHAT),
                     body_file=b.bodies[body], concurrency=4,
                     requests=b.plan.warm_requests, seconds=b.plan.step_seconds)  # fmt: skip
        b.lg.run(op="stream", port=t.port, path=_stream_path(b.plan),
                 body_file=b.bodies["stream"], requests=2, seconds=b.plan.step_seconds)  # fmt: skip


def cpu_per_request(
    b: Bench, fwd: Server | Replicas, handoff: Server | Replicas, body: str, path: str = CHAT
) -> Row:
    """Server CPU time ÷ requests at modest concurrency, from ``/proc``; ``path`` names the
    route (Chat Completions, or Anthropic Messages for the ``messages-…`` bodies)."""

    def once(t: Server) -> float:
        before = cpu_seconds(t.pid)
        r = b.lg.run(op="closed", port=t.port, path=path, body_file=b.bodies[body],
                     concurrency=b.plan.cpu_concurrency, requests=b.plan.cpu_requests,
                     seconds=b.plan.step_seconds)  # fmt: skip
        settle([t.pid])  # work deferred past the answers (e.g. store writes) counts too
        return (cpu_seconds(t.pid) - before) * 1000 / max(1, int(r["ok"]) + int(r["errors"]))

    per = interleave(b.plan.rounds, [fwd, handoff], once)
    b.raw[f"cpu_ms_per_request_{body}"] = per
    h, f = median(per[handoff.name]), median(per[fwd.name])
    ratio = h / f if f else None
    size = body.split("-")[-1].upper()
    what = f"{size}B body" if path == CHAT else f"{size}B {ROUTE_NAMES[path]} body"
    return Row(f"passthrough CPU per request, {what}", "bare forwarder",
               h, f, "ms CPU", ratio, "ratio", "≤ 1.5×",
               ratio is not None and ratio <= 1.5, _sides_note(b.plan.rounds, fwd, handoff),
               ratio_interval(per[handoff.name], per[fwd.name]))  # fmt: skip


def latency(b: Bench, direct: Server, fwd: Server, handoff: Server, body: str = "1k") -> list[Row]:
    """Added latency at concurrency 1: target minus direct, per round, then medians."""
    results: dict[str, list[dict[str, float]]] = {t.name: [] for t in (direct, fwd, handoff)}

    def once(t: Server) -> float:
        r = b.lg.run(op="closed", port=t.port, path=BODY_ROUTES.get(body, CHAT),
                     body_file=b.bodies[body],
                     concurrency=1, requests=b.plan.lat_requests,
                     seconds=b.plan.step_seconds)  # fmt: skip
        results[t.name].append(r)
        return float(r["p50_ms"])

    interleave(b.plan.rounds, [direct, fwd, handoff], once)
    b.raw["latency_c1" if body == "1k" else f"latency_c1_{body}"] = results
    rows = []
    for q in ("p50", "p95"):
        key = f"{q}_ms"
        base = [r[key] for r in results[direct.name]]
        h = median([r[key] - d for r, d in zip(results[handoff.name], base, strict=True)])
        f = median([r[key] - d for r, d in zip(results[fwd.name], base, strict=True)])
        target = "≤ 1 ms over forwarder" if q == "p50" else "reported"
        passed = (h - f <= 1.0) if q == "p50" else None
        note = f"direct {q} {median(base):.3f} ms"
        what = "" if body == "1k" else f", {body} body"
        rows.append(Row(f"added latency at concurrency 1{what}, {q}", "bare forwarder's added",
                        h, f, "ms added", h - f, "added_ms", target, passed, note))  # fmt: skip
    return rows


def rps(b: Bench, port: int, concurrency: int) -> float:
    if b.wrk is not None and b.plan.use_wrk:
        seconds = max(1, round(b.plan.tput_seconds))
        return float(b.wrk.throughput(port, b.bodies["1k"], concurrency, seconds)["rps"])
    r = b.lg.run(op="closed", port=port, path=CHAT, body_file=b.bodies["1k"],
                 concurrency=concurrency, requests=10**7, seconds=b.plan.tput_seconds)  # fmt: skip
    return float(r["rps"])


def throughput(
    b: Bench,
    base: Server | Replicas,
    handoff: Server | Replicas,
    concurrency: int,
    what: str,
    target: float,
) -> Row:
    rounds = b.plan.tput_rounds
    per = interleave(rounds, [base, handoff], lambda t: rps(b, t.port, concurrency))
    b.raw[f"rps_{what}_c{concurrency}"] = per
    h, f = median(per[handoff.name]), median(per[base.name])
    ratio = h / f if f else None
    compared = "bare forwarder" if base.name == "forwarder" else base.name
    note = _sides_note(rounds, base, handoff)
    return Row(f"throughput at concurrency {concurrency}" + ("" if what == "fwd" else f", {what}"),
               compared, h, f, "req/s", ratio, "ratio", f"≥ {target}×",
               ratio is not None and ratio >= target, note,
               ratio_interval(per[handoff.name], per[base.name]))  # fmt: skip


def _sides_note(rounds: int, *sides: Server | Replicas) -> str:
    widest = max(map(_as_replicas, sides), key=lambda r: len(r.servers))
    return f"{rounds} rounds" + ("" if len(widest.servers) == 1 else f"; {widest.described}")


def _as_replicas(t: Server | Replicas) -> Replicas:
    return t if isinstance(t, Replicas) else Replicas(t.name, (t,))


def _stream_path(plan: Plan) -> str:
    return f"{CHAT}?chunk_delay_ms={plan.chunk_delay_ms}"


def _event_medians(runs: list[list[float]]) -> list[float]:
    """Median arrival time of each event index over the runs that have it."""
    longest = max((len(r) for r in runs), default=0)
    return [median([r[i] for r in runs if len(r) > i]) for i in range(longest)]


def streaming(b: Bench, direct: Server, fwd: Server, handoff: Server) -> list[Row]:
    """Time to first event and per-event gap, vs the forwarder; and any event held back."""
    events: dict[str, list[list[float]]] = {t.name: [] for t in (direct, fwd, handoff)}

    def once(t: Server) -> float:
        r = b.lg.run(op="stream", port=t.port, path=_stream_path(b.plan),
                     body_file=b.bodies["stream"], requests=b.plan.stream_requests,
                     seconds=b.plan.step_seconds)  # fmt: skip
        events[t.name].extend(r["events_ms"])
        return float(r["ok"])

    interleave(b.plan.rounds, [direct, fwd, handoff], once)
    times = {name: _event_medians(runs) for name, runs in events.items()}
    b.raw["stream_event_ms"] = times
    d = times[direct.name]
    late = {name: [t - base for t, base in zip(ts, d, strict=False)] for name, ts in times.items()}
    h, f = late[handoff.name], late[fwd.name]
    if not (h and f):
        return [Row("streaming", "bare forwarder", None, None, "", None, "info", "≤ 1 ms added",
                    False, "no stream completed")]  # fmt: skip
    per_h, per_f = median(h[1:] or h), median(f[1:] or f)
    worst_h, worst_f = max(h), max(f)
    expected = b.plan.chunks + 1
    complete = all(len(r) == expected for r in events[handoff.name])
    held = worst_h - worst_f > b.plan.chunk_delay_ms / 2 or not complete
    ctx = (
        f"direct first event at {d[0]:.3f} ms; upstream sends one every {b.plan.chunk_delay_ms} ms"
    )
    count = f"{len(events[handoff.name])} streams of {expected} events: " + (
        "all arrived" if complete else "some incomplete"
    )
    return [
        Row("streaming: time to first chunk (vs direct)", "bare forwarder", h[0], f[0],
            "ms late", h[0] - f[0], "added_ms", "≤ 1 ms added", h[0] - f[0] <= 1.0, ctx),
        Row("streaming: delay per chunk (vs direct)", "bare forwarder", per_h, per_f,
            "ms late", per_h - per_f, "added_ms", "≤ 1 ms added", per_h - per_f <= 1.0,
            "median over events after the first of (arrival − direct's arrival)"),
        Row("streaming: chunks held back (latest event)", "bare forwarder", worst_h, worst_f,
            "ms late", None, "info", "never", not held,
            count + "; held back = latest event over half a chunk interval later than"
            " the forwarder's"),
    ]  # fmt: skip


def peak_rss(b: Bench, server: Server) -> dict[str, Any]:
    """Peak RSS of ``server`` while ``big_concurrency`` big requests are in flight.

    The peak is reset first (``clear_refs``), so earlier measurements do not count.
    """
    idle = memory_kb(server.pid)["VmRSS"] * 1024
    reset = reset_peak(server.pid)
    r = b.lg.run(op="closed", port=server.port, path=CHAT, body_file=b.bodies["big"],
                 concurrency=b.plan.big_concurrency, requests=b.plan.big_concurrency,
                 seconds=max(60.0, b.plan.step_seconds))  # fmt: skip
    peak = memory_kb(server.pid)["VmHWM"] * 1024
    return {"idle_rss": idle, "peak_rss": peak, "ok": r["ok"], "errors": r["errors"],
            "elapsed_s": r["elapsed_s"], "peak_reset": reset,
            "failures": r["failures"]}  # fmt: skip


def memory_row(b: Bench, handoff: dict[str, Any], fwd: dict[str, Any]) -> Row:
    in_flight = b.plan.big_bytes * b.plan.big_concurrency
    growth = handoff["peak_rss"] - handoff["idle_rss"]
    b.raw["peak_rss"] = {"handoff": handoff, "forwarder": fwd, "bytes_in_flight": in_flight}
    mib = 1 << 20
    note = (
        f"{b.plan.big_concurrency} × {b.plan.big_bytes // mib or b.plan.big_bytes / mib} MiB "
        f"= {in_flight / mib:.0f} MiB in flight; handoff grew {growth / mib:.0f} MiB over idle; "
        f"{int(handoff['ok'])} ok, {int(handoff['errors'])} errors in {handoff['elapsed_s']:.1f} s"
    )
    if handoff["failures"]:
        note += f" ({handoff['failures']})"
    if not handoff["peak_reset"]:
        note += "; peak RSS could not be reset, so it counts since start"
    return Row("peak RSS, 64 concurrent big requests", "bare forwarder",
               handoff["peak_rss"] / mib, fwd["peak_rss"] / mib, "MiB",
               growth / in_flight, "info", "reported (growth ÷ bytes in flight)", None,
               note)  # fmt: skip
