"""``POST /v1/messages/count_tokens``: how large the prompt handoff would send is.

Claude Code asks this after large tool results to decide on its own compaction. It
is told the size of what handoff would forward (the request as it is when it fits,
else as handoff compresses it), the same figure the ``usage`` of its next answer
reports, so its compaction and handoff's do not both act on one overflow. The
upstream counts that body when it can (Anthropic's tokenizer is exact); when it
cannot (no such route, an error, unreachable), handoff answers its own calibrated
estimate, marked ``x-handoff-count: approximate``. Not a turn: nothing is recorded.
"""

from __future__ import annotations

import orjson
import structlog
from aiohttp import web

from proxy.decide.plan import Plan
from proxy.errors import UpstreamError
from proxy.ingress.chat_request import ChatRequest
from proxy.server.formats import ANTHROPIC
from proxy.server.request_body import read_limited
from proxy.server.request_log import request_fields
from proxy.server.services import SERVICES, Services
from proxy.server.workspace import workspace_for
from proxy.upstream.forward import read_bounded, send
from proxy.upstream.routing import Upstream

log = structlog.get_logger("handoff.count_tokens")


async def count_tokens(request: web.Request) -> web.StreamResponse:
    svc = request.app[SERVICES]
    raw = await read_limited(request, svc.settings.server.max_body_bytes)
    req = ANTHROPIC.parse(raw, None)
    up = svc.router.route(req.model, ANTHROPIC.upstream_kind)
    request_fields(request).update(model=req.model, upstream=up.name)
    workspace = workspace_for(request.headers)
    plan = await svc.planner.plan(req, up, client_headers=request.headers, client=workspace)
    headers = dict(plan.response_headers)
    counted = await _upstream_count(request, svc, up, plan)
    if counted is not None:
        svc.planner.observe(req, plan, {"input_tokens": counted})
        headers["x-handoff-count"] = "upstream"
    else:
        counted = _estimate(req, plan)
        headers["x-handoff-count"] = "approximate"
    return web.json_response({"input_tokens": counted}, headers=headers)


async def _upstream_count(
    request: web.Request, svc: Services, up: Upstream, plan: Plan
) -> int | None:
    """The upstream's count of the body handoff would send, or None if it gives none."""
    url = up.url("/messages/count_tokens", request.rel_url.raw_query_string)
    try:
        resp = await send(
            up, "POST", url, up.request_headers(request.headers), plan.body, svc.timeout
        )
    except UpstreamError as e:
        log.info("count_tokens_upstream_failed", error=e.message)
        return None
    try:
        body, whole = await read_bounded(up, resp, 1 << 20)
    finally:
        resp.close()
    if resp.status != 200 or not whole:
        return None
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    n = parsed.get("input_tokens") if isinstance(parsed, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) else None


def _estimate(req: ChatRequest, plan: Plan) -> int:
    """Handoff's own count of what it would send: the plan's, else counted now."""
    decision = plan.decision
    if decision is not None and decision.forwarded_tokens is not None:
        return decision.forwarded_tokens
    if plan.counter is None:  # a model without a known window: bytes over four
        return max(1, len(req.raw) // 4)
    return plan.counter.count_request(req.body)
