"""The objects a running proxy shares between requests, under one typed app key."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp
from aiohttp import web

from proxy.config import Settings
from proxy.decide.tokens import ModelCounter
from proxy.ingress.chat_request import ChatRequest
from proxy.ingress.incremental_parse import WORTH_REUSING, ResentBodies
from proxy.server.metrics import Metrics
from proxy.server.store_gate import StoreGate
from proxy.store.base import Decision, Store
from proxy.upstream.routing import Router, Upstream


@dataclass(slots=True)
class Plan:
    """What to send upstream for one chat request, and why."""

    body: bytes
    decision: Decision | None = None
    forwarded: list[dict[str, object]] | None = None  # messages, when rewritten
    headers: dict[str, str] | None = None  # x-handoff-* response headers
    raw_tokens: int | None = None  # our uncorrected count of what is sent (calibration)
    counter: ModelCounter | None = None  # the target's counter, to count later if skipped

    @property
    def response_headers(self) -> dict[str, str]:
        return self.headers or {}


class Planner(Protocol):
    """Decides migrate or compress (the decision engine implements this)."""

    async def plan(
        self,
        req: ChatRequest,
        up: Upstream,
        *,
        hard_limit: int | None = None,
        client_headers: Mapping[str, str] | None = None,
    ) -> Plan:
        """``hard_limit``: the upstream's true window (0: unknown), learned from its
        context-length error, for the one retry. ``client_headers`` carry the key a
        summarizer call on the same upstream needs."""

    def wants_usage(self, plan: Plan) -> bool:
        """Whether :meth:`observe` would learn from the upstream's ``usage`` for this
        plan (if not, and nothing records the reply, it is never parsed)."""

    def observe(self, req: ChatRequest, plan: Plan, usage: object) -> None:
        """Learn from the upstream's usage figures (calibration)."""


@dataclass(slots=True)
class Services:
    settings: Settings
    router: Router
    planner: Planner
    store: Store | None
    gate: StoreGate | None  # holds requests while the store's writer is behind
    timeout: aiohttp.ClientTimeout
    metrics: Metrics
    bodies: ResentBodies
    """Recent large bodies, so a resent history is not parsed again (see ``resent``),
    within ``server.history_cache_bytes``: :func:`history_cache`."""


def history_cache(settings: Settings) -> ResentBodies:
    """The proxy's cache of recent large bodies (the engine's turn memos share the bound)."""
    return ResentBodies(max_bytes=settings.server.history_cache_bytes, min_bytes=WORTH_REUSING)


SERVICES = web.AppKey("services", Services)
