"""``/metrics`` in Prometheus' text format, from a registry owned by the app.

A fresh ``CollectorRegistry`` per app (never prometheus-client's global one), so two
proxies in one process — as in the tests — keep separate figures.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric

from proxy.decide.decision import Decision
from proxy.server.store_gate import StoreGate
from proxy.store.base import Store

MAX_LABEL_SETS = 10_000
OTHER_MODEL = "(other)"
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class _RequestStats:
    """Requests by route, model, decision and status, and upstream latency, as plain
    dicts the event loop bumps (prometheus-client's labelled metrics take a lock per
    request: figures in bench/NOTES.md), turned into metric families only when
    /metrics is scraped."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, str, str], int] = {}
        self.latency: dict[str, list[float]] = {}  # per-bucket counts, then the sum

    def observe(self, key: tuple[str, str, str, str], upstream: str, seconds: float) -> None:
        n = self.requests.get(key)
        if n is None and len(self.requests) >= MAX_LABEL_SETS:
            # Model names come from clients: past the cap, new ones share one series.
            key = (key[0], OTHER_MODEL, key[2], key[3])
            n = self.requests.get(key)
        self.requests[key] = (n or 0) + 1
        hist = self.latency.get(upstream)
        if hist is None:
            hist = self.latency[upstream] = [0.0] * (len(_LATENCY_BUCKETS) + 2)
        hist[bisect.bisect_left(_LATENCY_BUCKETS, seconds)] += 1
        hist[-1] += seconds

    def collect(self) -> Iterator[Metric]:
        # Copies first: a scrape runs in a worker thread while the loop keeps counting
        # (list() of a dict's items is atomic under the GIL).
        requests = CounterMetricFamily(
            "handoff_requests",
            "Chat requests by route, model and decision",
            labels=["route", "model", "decision", "status"],
        )
        for labels, n in list(self.requests.items()):
            requests.add_metric(labels, n)
        yield requests
        latency = HistogramMetricFamily(
            "handoff_upstream_latency_seconds",
            "Time from request to the end of the reply",
            labels=["upstream"],
        )
        for upstream, hist in list(self.latency.items()):
            counts = list(hist)
            cumulative = list(itertools.accumulate(counts[:-1]))
            bounds = [*(str(float(b)) for b in _LATENCY_BUCKETS), "+Inf"]
            latency.add_metric([upstream], list(zip(bounds, cumulative, strict=True)), counts[-1])
        yield latency


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._stats = _RequestStats()
        self.registry.register(self._stats)
        r = self.registry
        self.tokens_counted = Counter(
            "handoff_tokens_counted",
            "Prompt tokens counted in client requests",
            ["model"],
            registry=r,
        )
        self.tokens_forwarded = Counter(
            "handoff_tokens_forwarded", "Prompt tokens forwarded upstream", ["model"], registry=r
        )
        self.tokens_saved = Counter(
            "handoff_tokens_saved", "Prompt tokens removed by compression", ["model"], registry=r
        )
        self.summarizer_calls = Counter(
            "handoff_summarizer_calls", "Summarizer LLM calls", ["outcome"], registry=r
        )
        self.summary_cache_hits = Counter(
            "handoff_summary_cache_hits", "Summaries reused from an earlier turn", registry=r
        )
        self.store_write_failures = Gauge(
            "handoff_store_write_failures", "Store write failures since start", registry=r
        )
        self.store_lost_turns = Gauge(
            "handoff_store_lost_turns", "Turns that will never be written, since start", registry=r
        )
        self.store_queue_depth = Gauge(
            "handoff_store_queue_depth", "Turns waiting to be written", registry=r
        )
        self.store_oldest_unwritten = Gauge(
            "handoff_store_oldest_unwritten_seconds",
            "Age of the oldest turn not yet on disk (0 when none waits)",
            registry=r,
        )
        self.store_held = Gauge(
            "handoff_store_held_requests",
            "Chat requests held back while the store's writer was behind, since start",
            registry=r,
        )
        self.store_held_seconds = Gauge(
            "handoff_store_held_seconds",
            "Seconds chat requests waited for the store's writer, in all, since start",
            registry=r,
        )

    def observe_chat(
        self,
        route: str,
        model: str,
        upstream: str,
        status: int,
        decision: Decision | None,
        seconds: float,
    ) -> None:
        action = decision.action if decision else "none"
        self._stats.observe((route, model, action, str(status)), upstream, seconds)
        if decision is None or decision.tokens is None:
            return
        self.tokens_counted.labels(model).inc(decision.tokens)
        forwarded = decision.forwarded_tokens or decision.tokens
        self.tokens_forwarded.labels(model).inc(forwarded)
        if decision.action == "compressed":
            self.tokens_saved.labels(model).inc(max(0, decision.tokens - forwarded))
            for step in decision.steps:
                note = str(step.get("note", ""))
                if step.get("policy") == "summarize" and note == "as on the previous turn":
                    self.summary_cache_hits.inc()

    def render(self, store: Store | None, gate: StoreGate | None = None) -> bytes:
        if gate is not None:
            self.store_held.set(gate.held)
            self.store_held_seconds.set(gate.held_s)
        if store is not None:
            h = store.health()
            self.store_write_failures.set(h.write_failures)
            self.store_lost_turns.set(h.lost_turns)
            self.store_queue_depth.set(h.queue_depth)
            self.store_oldest_unwritten.set(h.oldest_unwritten_s or 0.0)
        return generate_latest(self.registry)
