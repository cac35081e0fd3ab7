"""The decision engine: migrate (original bytes) or compress (rewritten messages).

Placeholder until token counting and the policies land: every request migrates.
"""

from __future__ import annotations

from proxy.chat_request import ChatRequest
from proxy.services import Plan
from proxy.store.base import Decision
from proxy.upstreams import Upstream


class Engine:
    async def plan(
        self,
        req: ChatRequest,
        up: Upstream,
        *,
        hard_limit: int | None = None,
        client_headers: object = None,
    ) -> Plan:
        return Plan(body=req.raw, decision=Decision(action="passthrough"))

    def observe(self, req: ChatRequest, plan: Plan, usage: object) -> None:
        return None
