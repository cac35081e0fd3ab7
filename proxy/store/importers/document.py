"""An imported conversation as a portable document, so it enters the store the way
an export does (:func:`proxy.store.admin.import_document`).

One turn per assistant message: its history is everything before it, its reply the
message, its model the one that wrote it (a change of model is a handoff). Messages
after the last reply make a last turn without one.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from proxy.store import portable
from proxy.store.ids import new_session_id
from proxy.store.importers.base import Conversation
from proxy.store.messages import message_text, squeeze

UNKNOWN_MODEL = "unknown"


def document(conv: Conversation, workspace: str, now: float) -> dict[str, Any]:
    """The portable document for ``conv`` in ``workspace``."""
    turns: list[dict[str, Any]] = []
    start = _first_stamp(conv) or now
    last_model: str | None = None
    for i, msg in enumerate(conv.messages):
        if msg.get("role") != "assistant":
            continue
        model = conv.models[i] or last_model or UNKNOWN_MODEL
        turns.append(_turn(conv, len(turns) + 1, i, msg, model, last_model, start))
        last_model = model
    if not turns or turns[-1]["history_length"] + 1 < len(conv.messages):
        n = len(conv.messages)
        turns.append(_turn(conv, len(turns) + 1, n, None, last_model or UNKNOWN_MODEL, None, start))
    return {
        "format": portable.FORMAT,
        "format_version": portable.FORMAT_VERSION,
        "exporter": portable.EXPORTER,
        "exported_at": dt.datetime.fromtimestamp(now, dt.UTC).isoformat(),
        "conversation_id": new_session_id(),
        "workspace": workspace,
        "name": portable.IMPORTED + conv.key,
        "source": {"kind": conv.kind, "id": conv.source_id},
        "title": conv.title or _title(conv.messages),
        "parent_conversation_id": None,
        "models": sorted({t["model"] for t in turns}),
        "system_prompt": None,
        "messages": [
            {"message": m, "timestamp": s} for m, s in zip(conv.messages, conv.stamps, strict=True)
        ],
        "turns": turns,
    }


def _turn(
    conv: Conversation,
    number: int,
    at: int,
    reply: dict[str, Any] | None,
    model: str,
    previous: str | None,
    start: float,
) -> dict[str, Any]:
    asked = _stamp_before(conv, at) or start
    answered = conv.stamps[at] if reply is not None else None
    return {
        "turn": number,
        "started_at": asked,
        "model": model,
        "upstream": f"import:{conv.kind}",
        "status": 200 if reply is not None else 0,
        "latency_ms": max(0.0, (answered - asked) * 1000) if answered else 0.0,
        "streamed": False,
        "cancelled": False,
        "history_length": at,
        "reply": reply,
        "decision": None,
        "forwarded": None,
        "usage": None,
        "finish_reason": None,
        "error": None,
        "request_params": {},
        "handoff_from": previous if previous not in (None, model) else None,
    }


def _first_stamp(conv: Conversation) -> float | None:
    return next((s for s in conv.stamps if s is not None), None)


def _stamp_before(conv: Conversation, at: int) -> float | None:
    return next((conv.stamps[j] for j in range(at - 1, -1, -1) if conv.stamps[j]), None)


def _title(messages: list[dict[str, Any]]) -> str:
    for m in messages:
        if m.get("role") == "user":
            return squeeze(message_text(m))
    return ""
