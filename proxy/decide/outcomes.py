"""The plan for each decision the engine takes: what is sent, its decision record and
its ``x-handoff-*`` headers."""

from __future__ import annotations

from typing import Any

import structlog

from policies.chain import Compression
from proxy.decide.budget import decision_headers
from proxy.decide.decision import Decision
from proxy.decide.plan import Plan
from proxy.decide.summarizer_choice import SUMMARY_HEADER, header_value
from proxy.decide.targets import Target
from proxy.ingress.chat_request import ChatRequest

log = structlog.get_logger("handoff.engine")


def passthrough(
    req: ChatRequest,
    target: Target,
    tokens: int | None,
    raw_tokens: int | None,
    note: str = "",
    bound: int | None = None,
) -> Plan:
    """Migrate: the original bytes. ``tokens`` None: decided by the byte ``bound`` alone
    (the target's shared decision); ``note`` says why an over-budget request goes as is."""
    if tokens is None and not note:
        decision, headers = target.fast_decision, dict(target.fast_headers)
        if bound is not None:
            headers["x-handoff-tokens-bound"] = str(bound)
        return Plan(body=req.raw, decision=decision, headers=headers, counter=target.counter)
    exact = target.counter.exact
    decision = Decision(
        action="passthrough",
        window=target.budget.window,
        budget=target.budget.budget,
        tokens=tokens,
        forwarded_tokens=tokens,
        exact=exact,
        steps=({"note": note},) if note else (),
    )
    headers = decision_headers(target.budget, tokens, exact, "passthrough", ())
    if bound is not None:
        headers["x-handoff-tokens-bound"] = str(bound)
    return Plan(
        body=req.raw,
        decision=decision,
        headers=headers,
        raw_tokens=raw_tokens,
        counter=target.counter,
    )


def compressed(
    req: ChatRequest,
    target: Target,
    tokens: int,
    result: Compression,
    raw_tokens: int,
    said: str = "",
) -> Plan:
    """Compress: the chain's messages, rendered in the request's wire format; ``said``
    is the summary header's text ("" for none)."""
    decision = Decision(
        action="compressed",
        window=target.budget.window,
        budget=target.budget.budget,
        tokens=tokens,
        forwarded_tokens=result.tokens_after,
        exact=target.counter.exact,
        policies=result.applied,
        steps=tuple(_step_dict(s) for s in result.steps),
    )
    headers = decision_headers(
        target.budget, tokens, target.counter.exact, "compressed", result.applied
    )
    headers["x-handoff-forwarded-tokens"] = str(result.tokens_after)
    if said:
        headers[SUMMARY_HEADER] = header_value(said)
    log.info(
        "compressed",
        tokens=tokens,
        forwarded_tokens=result.tokens_after,
        budget=target.budget.budget,
        policies=list(result.applied),
        summary=said or None,  # used, or not used and why
    )
    return Plan(
        body=req.rendered(result.messages, result.origins),
        decision=decision,
        forwarded=[dict(m) for m in result.messages],
        headers=headers,
        raw_tokens=raw_tokens,
    )


def _step_dict(step: Any) -> dict[str, Any]:
    return {
        "policy": step.policy,
        "removed_messages": step.removed_messages,
        "removed_tokens": step.removed_tokens,
        "note": step.note,
    }
