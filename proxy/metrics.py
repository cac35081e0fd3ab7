"""``/metrics`` in Prometheus' text format, from a registry owned by the app.

A fresh ``CollectorRegistry`` per app (never prometheus-client's global one), so two
proxies in one process — as in the tests — keep separate figures.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from proxy.store.base import Decision, Store

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self._children: dict[tuple[str, str, str, int, str], tuple[Any, Any]] = {}
        r = self.registry
        self.requests = Counter(
            "handoff_requests",
            "Chat requests by route, model and decision",
            ["route", "model", "decision", "status"],
            registry=r,
        )
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
        self.upstream_latency = Histogram(
            "handoff_upstream_latency_seconds",
            "Time from request to the end of the reply",
            ["upstream"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
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
        self.store_queue_depth = Gauge(
            "handoff_store_queue_depth", "Turns waiting to be written", registry=r
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
        key = (route, model, action, status, upstream)
        children = self._children.get(key)
        if children is None:  # labels() takes a lock and builds a tuple: once per key
            children = (
                self.requests.labels(route, model, action, str(status)),
                self.upstream_latency.labels(upstream),
            )
            if len(self._children) < 10_000:
                self._children[key] = children
        children[0].inc()
        children[1].observe(seconds)
        if decision is None or decision.tokens is None:
            return
        self.tokens_counted.labels(model).inc(decision.tokens)
        forwarded = decision.forwarded_tokens or decision.tokens
        self.tokens_forwarded.labels(model).inc(forwarded)
        if decision.action == "compressed":
            self.tokens_saved.labels(model).inc(max(0, decision.tokens - forwarded))
            for step in decision.steps:
                note = str(step.get("note", ""))
                if step.get("policy") == "summarize" and "reused cached summary" in note:
                    self.summary_cache_hits.inc()

    def render(self, store: Store | None) -> bytes:
        if store is not None:
            h = store.health()
            self.store_write_failures.set(h.write_failures)
            self.store_queue_depth.set(h.queue_depth)
        return generate_latest(self.registry)
