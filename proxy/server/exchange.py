"""One exchange, whatever its wire format: parse → route → plan → forward → relay → record.

:func:`exchange` makes the route handler for a :class:`~proxy.server.formats.WireFormat`
(``POST /v1/chat/completions`` is :data:`chat_completions`). The plan (migrate or
compress) comes from the :class:`~proxy.decide.plan.Planner`. If the upstream still
answers a context-length error, the request is planned again against the limit the
error names and retried once; for streams this works because such an error arrives
as JSON before any event, or as a 200 stream with no event at all (llama.cpp), which
is taken for an overflow of unknown limit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from proxy.decide.decision import Decision
from proxy.decide.plan import Plan
from proxy.errors import HandoffError, StoreUnavailable, UpstreamUnreachable
from proxy.ingress.chat_request import ChatRequest
from proxy.server.formats import ANTHROPIC, CHAT, RESPONSES, WireFormat
from proxy.server.request_body import read_limited
from proxy.server.request_log import request_fields
from proxy.server.services import SERVICES, Services
from proxy.server.workspace import session_hint, workspace_for
from proxy.store.base import TurnRecord, request_params
from proxy.upstream.forward import (
    StreamOutcome,
    first_chunk,
    is_sse,
    read_bounded,
    relay_rest,
    relay_stream,
    response_headers,
    send,
)
from proxy.upstream.routing import Upstream
from proxy.upstream.sse import choices_of

log = structlog.get_logger("handoff.exchange")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(slots=True)
class _Turn:
    """What is learnt about one exchange while it runs; frozen into a TurnRecord."""

    status: int = 0
    streamed: bool = False
    reply: dict[str, Any] | None = None
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    error: dict[str, Any] | None = None
    cancelled: bool = False
    bytes_out: int = 0
    raw: bytes | None = None
    retried: bool = False
    json_body: bytes | None = None  # a non-streamed answer, parsed only if needed
    replanned: Plan | None = None  # the plan finally sent, when an overflow's retry replaced it
    session_id: str | None = None  # announced in x-handoff-session (see session_ids)
    session_hint: str | None = None  # the client's own session name, read once
    choices: list[dict[str, Any]] | None = None  # every choice, when n > 1

    def settle(self, fmt: WireFormat) -> None:
        """Read reply, usage and error out of a non-streamed answer."""
        if self.json_body is not None:
            self.reply, self.finish_reason, self.usage, error = fmt.read_answer(
                self.status, self.json_body
            )
            self.error = error or self.error
            self.choices = choices_of(self.json_body) if self.status < 400 else None
            self.json_body = None


def exchange(fmt: WireFormat) -> Handler:
    """The route handler for requests in ``fmt``."""

    async def handler(request: web.Request) -> web.StreamResponse:
        seen = _Seen()
        try:
            return await _serve(request, fmt, seen)
        except HandoffError as e:
            if not seen.recorded:
                record_rejection(request, request.app[SERVICES], fmt, seen, e)
            raise

    handler.__name__ = handler.__qualname__ = f"{fmt.name}_exchange"
    return handler


@dataclass(slots=True)
class _Seen:
    """What is known of a request before its exchange starts, for recording a refusal."""

    size: int | None = None
    req: ChatRequest | None = None
    upstream: str = ""
    recorded: bool = False  # the exchange started: it records itself


async def _serve(request: web.Request, fmt: WireFormat, seen: _Seen) -> web.StreamResponse:
    svc = request.app[SERVICES]
    req, up, fields = await _admit(request, svc, fmt, seen)
    started, t0 = time.time(), time.perf_counter()
    if svc.gate is not None and svc.gate.must_wait():
        fields["held_s"] = round(await svc.gate.wait(), 3)  # for the store's writer
    workspace = workspace_for(request.headers)
    plan = fmt.own_plan(req) if fmt.own_plan is not None else None
    if plan is None:  # a refusal here is recorded by the handler (record_rejection)
        plan = await svc.planner.plan(req, up, client_headers=request.headers, client=workspace)
    seen.recorded = True
    turn = _begin(svc, request, req, plan, workspace)
    try:
        return await _exchange(request, svc, fmt, req, up, plan, turn)
    except asyncio.CancelledError:
        turn.cancelled = True
        raise
    except HandoffError as e:
        turn.status, turn.error = e.status, e.body()
        raise
    finally:
        _finish(svc, request, fmt, req, up, turn.replanned or plan, turn, fields, started, t0)


async def _admit(
    request: web.Request, svc: Services, fmt: WireFormat, seen: _Seen
) -> tuple[ChatRequest, Upstream, dict[str, Any]]:
    """Read, parse and route the request (each noted in ``seen``, for a refusal's record),
    and its log fields; refused when the store must record and cannot."""
    raw = await read_limited(request, svc.settings.server.max_body_bytes)
    seen.size = len(raw)
    req = seen.req = fmt.parse(raw, svc.resent(fmt.history_key))
    up = svc.router.route(req.model, fmt.upstream_kind)
    seen.upstream = up.name
    fields = request_fields(request)
    fields.update(model=req.model, upstream=up.name, stream=req.stream)
    if svc.store is not None and svc.settings.store.required and not svc.store.health().ok:
        raise StoreUnavailable(
            "The snapshot store cannot write and store.required is set, so handoff refuses "
            "to serve unrecorded. See /healthz for the store's error."
        )
    return req, up, fields


def _begin(
    svc: Services, request: web.Request, req: ChatRequest, plan: Plan, workspace: str
) -> _Turn:
    """The exchange's turn; with a store, its session is named and announced in the plan."""
    turn = _Turn()
    if svc.store is not None:
        hint = session_hint(request.headers, req.body, svc.settings.store.session_from_body)
        turn.session_hint = hint
        turn.session_id = svc.sessions.announce(workspace, hint, req.messages)
        _announce(plan, turn.session_id)
    return turn


def _finish(
    svc: Services,
    request: web.Request,
    fmt: WireFormat,
    req: ChatRequest,
    up: Upstream,
    plan: Plan,
    turn: _Turn,
    fields: dict[str, Any],
    started: float,
    t0: float,
) -> None:
    """Log, metrics, calibration and the record, all of ``plan``: the attempt actually
    sent (however the exchange ended)."""
    latency_ms = (time.perf_counter() - t0) * 1000
    fields.update(
        upstream_status=turn.status,
        cancelled=turn.cancelled,
        decision=plan.decision.action if plan.decision else None,
        bytes_out=turn.bytes_out,
    )
    if (
        svc.settings.server.log_content
        or req.params is not None  # the store's writer reads chat answers only
        or (turn.json_body is not None and svc.planner.wants_usage(plan))
    ):
        turn.settle(fmt)  # else the store's writer parses the answer, if it is recorded
    if turn.usage is not None:
        svc.planner.observe(req, plan, turn.usage)
    # The metric's route: the format's, or the one other spelling of chat.
    route = "/chat/completions" if request.path == "/chat/completions" else fmt.route
    svc.metrics.observe_chat(
        route, req.model, up.name, turn.status, plan.decision, latency_ms / 1000
    )
    if svc.settings.server.log_content:
        # Debug only (server.log_content): what was asked, sent and answered.
        log.info("content", messages=req.messages, forwarded=plan.forwarded, reply=turn.reply)
    # Recorded once this task yields, so after the response is written: a chat client
    # waiting for its answer does not wait for the store's bookkeeping too.
    asyncio.get_running_loop().call_soon(
        _record, svc, request, fmt, req, up, plan, turn, started, latency_ms
    )


async def _exchange(
    request: web.Request,
    svc: Services,
    fmt: WireFormat,
    req: ChatRequest,
    up: Upstream,
    plan: Plan,
    turn: _Turn,
) -> web.StreamResponse:
    headers = up.request_headers(request.headers)
    url = up.url(fmt.upstream_path, request.rel_url.raw_query_string)
    max_answer = svc.settings.server.max_answer_bytes
    while True:
        resp = await send(up, "POST", url, headers, plan.body, svc.timeout)
        empty_stream = False
        try:
            turn.status = resp.status
            if is_sse(resp):
                head = await first_chunk(up, resp)
                if head or resp.status != 200:
                    turn.streamed = True
                    return await _relay_sse(request, svc, fmt, up, resp, plan, turn, head)
                body, empty_stream = b"", True
            else:
                body, whole = await read_bounded(up, resp, max_answer)
                if not whole:  # too large to hold; an overflow error never is
                    return await _relay_large(request, up, resp, plan, body, turn, max_answer)
        finally:
            resp.close()  # drops an unfinished stream's connection: the upstream stops
        limit = 0 if empty_stream else fmt.context_limit(resp.status, body)
        if limit is not None and not turn.retried and up.compress:
            turn.retried = True
            log.warning(
                "upstream_context_overflow",
                limit=limit,
                empty_stream=empty_stream,
                retrying=True,
                model=req.model,
                upstream=up.name,
            )
            plan = await svc.planner.plan(
                req,
                up,
                hard_limit=limit,
                client_headers=request.headers,
                client=workspace_for(request.headers),
            )
            turn.replanned = plan
            if turn.session_id is not None:
                _announce(plan, turn.session_id)
            continue
        if empty_stream:
            raise _empty_stream(up, turn.retried)
        turn.json_body = body
        turn.bytes_out = len(body)
        return web.Response(
            status=resp.status, body=body, headers=response_headers(resp, plan.response_headers)
        )


def _empty_stream(up: Upstream, retried: bool) -> UpstreamUnreachable:
    """A 200 stream with no event, not answered by a retry: an error, never an empty reply."""
    why = (
        "again after handoff fitted the conversation smaller"
        if retried
        else "and compression is off for this route, so handoff cannot fit it smaller"
    )
    return UpstreamUnreachable(
        f"Upstream {up.name!r} answered with an empty event stream {why}. llama.cpp does "
        'this when the prompt does not fit its n_ctx: set [models."NAME"] context_window '
        "to the server's n_ctx, or start the server with a larger one.",
        code="upstream_empty_stream",
    )


async def _relay_sse(
    request: web.Request,
    svc: Services,
    fmt: WireFormat,
    up: Upstream,
    resp: Any,
    plan: Plan,
    turn: _Turn,
    head: bytes,
) -> web.StreamResponse:
    assembler = fmt.assembler()
    keep_raw = svc.settings.store.keep_raw_sse
    raw_parts: list[bytes] = []

    def tee(chunk: bytes) -> None:
        assembler.feed(chunk)
        if keep_raw:
            raw_parts.append(chunk)

    outcome = StreamOutcome()
    try:
        return await relay_stream(
            request,
            up,
            resp,
            plan.response_headers,
            tee,
            outcome,
            head,
            lambda: assembler.complete,
        )
    finally:
        turn.cancelled = outcome.cancelled and not outcome.complete
        turn.bytes_out = outcome.bytes_out
        turn.reply = assembler.reply()
        turn.usage = dict(assembler.usage) if assembler.usage is not None else None
        turn.finish_reason = assembler.finish_reason
        turn.choices = assembler.choices()
        turn.error = dict(assembler.error) if assembler.error is not None else None
        if outcome.upstream_error:
            turn.error = _broke_off(outcome)
        if keep_raw:
            turn.raw = b"".join(raw_parts)


async def _relay_large(
    request: web.Request,
    up: Upstream,
    resp: Any,
    plan: Plan,
    head: bytes,
    turn: _Turn,
    limit: int,
) -> web.StreamResponse:
    """Relay an answer over ``limit`` as it arrives; the store gets a note, not the body."""
    outcome = StreamOutcome()
    try:
        return await relay_rest(request, up, resp, plan.response_headers, head, outcome)
    finally:
        turn.cancelled = outcome.cancelled
        turn.bytes_out = outcome.bytes_out
        turn.error = _broke_off(outcome) if outcome.upstream_error else _not_kept(turn, limit)


def _announce(plan: Plan, session_id: str) -> None:
    """Name the session in the response's headers."""
    plan.headers = {**plan.response_headers, "x-handoff-session": session_id}


def _broke_off(outcome: StreamOutcome) -> dict[str, Any]:
    return {"error": {"message": outcome.upstream_error, "type": "upstream_error"}}


def _not_kept(turn: _Turn, limit: int) -> dict[str, Any]:
    """What the store records instead of an answer too large to keep."""
    size = turn.bytes_out
    message = (
        f"The answer ({size:,} bytes) was relayed to the client but not kept: it is over "
        f"server.max_answer_bytes ({limit:,})."
    )
    error = {"message": message, "type": "handoff_note", "param": None, "code": "answer_not_kept"}
    return {"error": {**error, "answer_bytes": size}}


def _record(
    svc: Services,
    request: web.Request,
    fmt: WireFormat,
    req: ChatRequest,
    up: Upstream,
    plan: Plan,
    turn: _Turn,
    started: float,
    latency_ms: float,
) -> None:
    if svc.store is None:
        return
    hint = turn.session_hint  # (read in _begin, which runs whenever there is a store)
    if turn.session_id is not None:
        svc.sessions.answered(turn.session_id, workspace_for(request.headers), req.messages)
    params = request_params(req.body) if req.params is None else dict(req.params)
    # By position, in the fields' order: a third of the cost of 21 keywords (bench/NOTES.md).
    # test_chat_record_fields checks each lands.
    svc.store.record(
        record := TurnRecord(
            workspace_for(request.headers),  # workspace
            started,  # started_at
            req.model,  # model
            up.name,  # upstream
            req.messages,  # messages
            turn.status,  # status
            latency_ms,  # latency_ms
            turn.streamed,  # streamed
            hint,  # session_hint
            plan.decision,  # decision
            plan.forwarded,  # forwarded
            turn.reply,  # reply
            turn.usage,  # usage
            turn.finish_reason,  # finish_reason
            turn.error,  # error
            turn.cancelled,  # cancelled
            turn.raw,  # raw_response
            params,  # request_params
            req.raw if req.params is None else None,  # raw_request: a chat body's only
            req.resends,  # resends
            turn.json_body,  # answer
            None,  # extends
            fmt.name,  # wire
            turn.session_id,  # session_id
            turn.choices,  # choices
        )
    )
    if svc.memories is not None:  # (a session's memory, when due: off the request path)
        svc.memories.note(record, request.headers)


def record_rejection(
    request: web.Request, svc: Services, fmt: WireFormat, seen: _Seen, error: HandoffError
) -> None:
    """Record a request handoff refused itself (bad JSON, unfittable, unknown model…): its
    status and error body, decision ``rejected``, and its messages when they parsed. Never
    the body otherwise (it may hold anything); at most ``svc.rejections`` per workspace per
    minute."""
    if svc.store is None:
        return
    workspace = workspace_for(request.headers)
    skipped = svc.rejections.admit(workspace)
    if skipped is None:
        return
    req = seen.req
    body = dict(error.body())
    if skipped:
        body["handoff_left_out"] = skipped  # refusals not recorded since the last one
    if seen.size is not None and req is None:
        body["request_bytes"] = seen.size
    hint = (
        None
        if req is None
        else session_hint(request.headers, req.body, svc.settings.store.session_from_body)
    )
    params: dict[str, Any] = {}
    if req is not None:
        params = request_params(req.body) if req.params is None else dict(req.params)
    svc.store.record(
        TurnRecord(
            workspace,
            time.time(),
            req.model if req is not None else "",
            seen.upstream,
            req.messages if req is not None else [],
            status=error.status,
            session_hint=hint,
            decision=Decision(action="rejected"),
            error=body,
            request_params=params,
            wire=fmt.name,
        )
    )


chat_completions = exchange(CHAT)
"""``POST /v1/chat/completions`` (and ``/chat/completions``)."""
responses = exchange(RESPONSES)
"""``POST /v1/responses``."""

anthropic_messages = exchange(ANTHROPIC)
"""``POST /v1/messages`` (Anthropic Messages, ``?beta=true`` passed on)."""
