"""Output reservations that fit: a request asking for more output than the window leaves
gets its reservation lowered to what fits (and the forwarded ``max_tokens`` with it),
said in ``x-handoff-max-tokens``, unless ``compression.strict_max_tokens`` is set.

A client that asks for 32,768 output tokens of an 8k model would otherwise be refused
outright; a reservation at or under the model's usual share is never lowered (the
prompt is compressed instead), and it never goes below that share.
"""

from __future__ import annotations

import dataclasses

import orjson

from proxy.decide.budget import Budget
from proxy.decide.plan import Plan
from proxy.ingress.json_spans import with_members

OUTPUT_FIELDS = ("max_completion_tokens", "max_tokens")


def fitted_output(budget: Budget, tokens: int, share: int) -> Budget | None:
    """The budget with its reserved output lowered so the ``tokens`` prompt fits beside
    it, but not below ``share`` (the model's usual output, at most half of what the
    margin leaves); None when the reservation fits already or is no more than that."""
    room = budget.window - budget.margin
    if tokens + budget.reserved_output <= room:
        return None
    floor = min(share, room // 2)
    if budget.reserved_output <= floor:
        return None
    reserved = max(floor, room - tokens)
    if reserved >= budget.reserved_output:
        return None
    return Budget(budget.window, reserved, budget.margin, room - reserved)


def lowered(plan: Plan, asked: int | None, reserved: int) -> Plan:
    """``plan`` with the body's output fields lowered to ``reserved`` (when the client sent
    one), a response header and a decision step that say so."""
    body = plan.body
    if asked is not None:
        body = _with_output(body, reserved)
    said = f"reduced from {asked if asked is not None else 'the default'} to {reserved}"
    headers = {**plan.response_headers, "x-handoff-max-tokens": said}
    decision = plan.decision
    if decision is not None:
        step = {"policy": "max-tokens", "note": f"reserved output {said} to fit the window"}
        decision = dataclasses.replace(decision, steps=(*decision.steps, step))
    return dataclasses.replace(plan, body=body, headers=headers, decision=decision)


def _with_output(body: bytes, reserved: int) -> bytes:
    """``body`` with each output field over ``reserved`` set to it; every other byte as
    it was (a migrated body stays the client's, but for that number)."""
    data = orjson.loads(body)
    over = {
        key: str(reserved).encode()
        for key in OUTPUT_FIELDS
        if isinstance(v := data.get(key), int) and not isinstance(v, bool) and v > reserved
    }
    if not over:
        return body
    edited = with_members(body, over)
    if edited is None:  # (orjson read it, so the scanner does too; but never guess)
        data.update({key: reserved for key in over})
        return orjson.dumps(data)
    return edited
