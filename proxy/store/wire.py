"""Turn records as bytes, for the writer process (see ``process``).

A frame is a kind byte, three little-endian lengths, then the parts: the JSON of
the record's small fields, the client's request body exactly as received, and
the raw SSE bytes if kept. Shipping the body as received costs the proxy one
copy instead of serialising a long history (and its tools) every turn; the writer
parses it, reusing what it parsed of the same history before (``resent``).
Without a raw body the messages and other fields travel in the JSON.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from proxy.resent import ResentBodies
from proxy.store.base import Decision, TurnRecord, request_params

TURN, CALIBRATION = b"T", b"C"
_HEAD = struct.Struct("<cIII")


def encode_turn(turn: TurnRecord) -> bytes:
    meta: dict[str, Any] = {
        "workspace": turn.workspace,
        "started_at": turn.started_at,
        "model": turn.model,
        "upstream": turn.upstream,
        "status": turn.status,
        "latency_ms": turn.latency_ms,
        "streamed": turn.streamed,
        "session_hint": turn.session_hint,
        "decision": turn.decision.as_dict() if turn.decision else None,
        "forwarded": turn.forwarded,
        "reply": turn.reply,
        "usage": turn.usage,
        "finish_reason": turn.finish_reason,
        "error": turn.error,
        "cancelled": turn.cancelled,
    }
    body = turn.raw_request or b""
    if not body:
        meta["messages"], meta["request_params"] = turn.messages, turn.request_params
    return _frame(
        TURN, orjson.dumps(meta, option=orjson.OPT_NON_STR_KEYS), body, turn.raw_response or b""
    )


def encode_calibration(data: Mapping[str, Any]) -> bytes:
    return _frame(CALIBRATION, orjson.dumps(dict(data)), b"", b"")


def _frame(kind: bytes, meta: bytes, body: bytes, raw: bytes) -> bytes:
    return b"".join((_HEAD.pack(kind, len(meta), len(body), len(raw)), meta, body, raw))


def decode(
    buf: bytes | memoryview, bodies: ResentBodies | None = None
) -> Iterator[TurnRecord | dict[str, Any]]:
    """The jobs in ``buf`` (whole frames): turn records, and calibrations as dicts.

    ``bodies`` (the writer's) spares re-parsing the history a body resends.
    """
    view, at = memoryview(buf), 0
    while at < len(buf):
        kind, n_meta, n_body, n_raw = _HEAD.unpack_from(buf, at)
        at += _HEAD.size
        meta = orjson.loads(view[at : at + n_meta])
        at += n_meta
        body = bytes(view[at : at + n_body])
        at += n_body
        raw = bytes(view[at : at + n_raw])
        at += n_raw
        if kind == CALIBRATION:
            yield meta
            continue
        if body:
            parsed = bodies.parse(body) if bodies is not None else orjson.loads(body)
            meta["messages"], meta["request_params"] = parsed["messages"], request_params(parsed)
        if meta["decision"] is not None:
            meta["decision"] = Decision.from_dict(meta["decision"])
        yield TurnRecord(raw_response=raw or None, raw_request=body or None, **meta)
