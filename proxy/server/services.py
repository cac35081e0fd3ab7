"""The objects a running proxy shares between requests, under one typed app key."""

from __future__ import annotations

from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from proxy.config import Settings
from proxy.decide.plan import Planner
from proxy.ingress.incremental_parse import WORTH_REUSING, ResentBodies
from proxy.server.memory_keeper import MemoryKeeper
from proxy.server.metrics import Metrics
from proxy.server.rejections import RejectionBudget
from proxy.server.session_ids import SessionIds
from proxy.server.store_gate import StoreGate
from proxy.store.base import Store
from proxy.upstream.routing import Router


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
    sessions: SessionIds = field(default_factory=SessionIds)
    """Which session each request is announced as (``x-handoff-session``)."""
    rejections: RejectionBudget = field(default_factory=RejectionBudget)
    """How many of handoff's own refusals each workspace may record."""

    other_bodies: dict[str, ResentBodies] = field(default_factory=dict)
    """The same for wire formats whose history is under another key (Responses'
    ``input``), each within the same bound: :meth:`resent`."""

    memories: MemoryKeeper | None = None  # writes session memories (None: no store or off)

    def resent(self, key: str) -> ResentBodies:
        """The cache of recent bodies whose history is the array under ``key``."""
        if key == self.bodies.key:
            return self.bodies
        cache = self.other_bodies.get(key)
        if cache is None:
            cache = self.other_bodies[key] = ResentBodies(
                max_bytes=self.bodies.max_bytes, min_bytes=self.bodies.min_bytes, key=key
            )
        return cache


def history_cache(settings: Settings) -> ResentBodies:
    """The proxy's cache of recent large bodies (the engine's turn memos share the bound)."""
    return ResentBodies(max_bytes=settings.server.history_cache_bytes, min_bytes=WORTH_REUSING)


SERVICES = web.AppKey("services", Services)
