"""What the decision engine hands the chat handler: a :class:`Plan`, and the
:class:`Planner` protocol it implements (so the handler can be driven by another)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from proxy.decide.decision import Decision
from proxy.decide.tokens import ModelCounter
from proxy.ingress.chat_request import ChatRequest
from proxy.upstream.routing import Upstream


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
        client: str = "",
    ) -> Plan:
        """``hard_limit``: the upstream's true window (0: unknown), learned from its
        context-length error, for the one retry. ``client`` names who asks (their
        workspace), so one client's large counts cannot hold everyone's.
        ``client_headers`` carry the key a summarizer call on the same upstream needs."""

    def wants_usage(self, plan: Plan) -> bool:
        """Whether :meth:`observe` would learn from the upstream's ``usage`` for this
        plan (if not, and nothing records the reply, it is never parsed)."""

    def observe(self, req: ChatRequest, plan: Plan, usage: object) -> None:
        """Learn from the upstream's usage figures (calibration)."""
