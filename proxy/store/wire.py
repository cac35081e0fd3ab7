"""Turn records as bytes, for the writer process (see ``process``).

A frame is a head (kind, the three parts' lengths, the frame's number, the body it
is shipped against and how many of its messages, the body's size) and then the
parts: the JSON of the record's small fields, the client's request body as received,
and the raw SSE bytes if kept (or a non-streamed answer as received, which the
writer parses). Shipping the body as received costs the proxy no serialising of a
long history (and its tools) every turn. A body that resends one the writer holds
(``shipped``) travels as the bytes the proxy's parse read instead (the body with
the resent messages cut out): the writer parses those and puts the held messages
in front, so a turn costs it what the turn adds. Without a raw body the messages
and other fields travel in the JSON.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from proxy.decide.decision import Decision
from proxy.ingress.incremental_parse import Resends
from proxy.store.base import MemoryRecord, TurnRecord, request_params, settled
from proxy.store.shipped import HeldMessages, ShippedBodies
from proxy.upstream.sse import choices_of, read_answer

TURN, CALIBRATION, MEMORY = b"T", b"C", b"M"
_HEAD = struct.Struct("<cIIIQQIQ")  # kind, 3 lengths, seq, base + 1 (0: none), messages, size


class Job(NamedTuple):
    """A turn or calibration, encoded but not yet framed (that needs the channel's
    :class:`ShippedBodies`)."""

    kind: bytes
    meta: bytes
    body: bytes
    raw: bytes
    resends: Resends | None = None  # (see TurnRecord.resends)

    @property
    def size(self) -> int:
        return len(self.meta) + len(self.body) + len(self.raw)


class Unreadable(NamedTuple):
    """A frame the writer could not decode, and why: skipped, counted, the rest read."""

    error: str


_FIELDS = (
    "workspace", "started_at", "model", "upstream", "status", "latency_ms", "streamed",
    "session_hint", "decision", "forwarded", "reply", "usage", "finish_reason", "error",
    "cancelled",
)  # fmt: skip
"""The record's small fields, in the order a frame's meta lists them. A list, and the
decision a list in it, because the proxy encodes one every turn and orjson writes a
list far faster than objects."""


def encode_turn(turn: TurnRecord) -> Job:
    """The turn as a job. Its meta is the :data:`_FIELDS`, then whether the last part is
    a non-streamed answer (not SSE bytes), the wire format, then, only for a turn
    without its request body, the messages and request parameters."""
    if turn.answer is not None and turn.raw_response is not None:
        turn = settled(turn)  # (cannot be: an answer is a stream's or not; be safe anyway)
    body = turn.raw_request or b""
    meta = [
        turn.workspace, turn.started_at, turn.model, turn.upstream, turn.status,
        turn.latency_ms, turn.streamed, turn.session_hint,
        turn.decision and turn.decision.as_list(), turn.forwarded,
        turn.reply, turn.usage, turn.finish_reason, turn.error, turn.cancelled,
        turn.answer is not None, turn.wire, turn.session_id, turn.choices,
    ]  # fmt: skip
    if not body:
        meta += (turn.messages, turn.request_params)
    return Job(
        TURN,
        orjson.dumps(meta, option=orjson.OPT_NON_STR_KEYS),
        body,
        turn.raw_response or turn.answer or b"",
        turn.resends if body else None,
    )


def encode_calibration(data: Mapping[str, Any]) -> Job:
    return Job(CALIBRATION, orjson.dumps(dict(data)), b"", b"")


def encode_memory(rec: MemoryRecord) -> Job:
    """A session's memory, its fields in order (the writer writes it in its transaction)."""
    fields = [
        rec.workspace, rec.session_id, dict(rec.memory), rec.text, rec.source, rec.reason,
        rec.turns, rec.updated_at, rec.of_turn,
    ]  # fmt: skip
    return Job(MEMORY, orjson.dumps(fields), b"", b"")


def frames(jobs: Sequence[Job], held: ShippedBodies) -> list[bytes | memoryview]:
    """The jobs' frames, as pieces to write in order; a body whose parse repeats one
    ``held`` (the proxy's mirror of the writer's) holds travels as what was parsed of
    it, against that one."""
    pieces: list[bytes | memoryview] = []
    for kind, meta, body, raw, resends in jobs:
        seq, base = held.ship(body, resends) if kind == TURN else (0, None)
        if base is None or resends is None:
            shipped, ref, n = body, 0, 0
        else:
            shipped, ref, n = resends.cut, base + 1, resends.messages
        pieces += (
            _HEAD.pack(kind, len(meta), len(shipped), len(raw), seq, ref, n, len(body)),
            meta,
            shipped,
            raw,
        )
    return pieces


def whole(buf: bytes | memoryview) -> int:
    """How many bytes of ``buf`` its whole frames take (a batch cut short by the proxy's
    death ends with part of one)."""
    at = 0
    while at + _HEAD.size <= len(buf):
        _, n_meta, n_body, n_raw, *_ = _HEAD.unpack_from(buf, at)
        end = at + _HEAD.size + n_meta + n_body + n_raw
        if end > len(buf):
            break
        at = end
    return at


def decode(
    buf: bytes | memoryview, held: HeldMessages
) -> Iterator[TurnRecord | dict[str, Any] | MemoryRecord | Unreadable]:
    """The jobs in ``buf`` (whole frames): turn records, calibrations as dicts, memories,
    and :class:`Unreadable` for a frame that cannot be decoded.

    ``held`` is the writer's end of the bodies mirror. A record's ``raw_request`` is
    left out: the writer needs only its parse.
    """
    view, at = memoryview(buf), 0
    while at < len(buf):
        kind, n_meta, n_body, n_raw, seq, ref, n, size = _HEAD.unpack_from(buf, at)
        at += _HEAD.size
        meta, body, raw = (
            view[at : at + n_meta],
            view[at + n_meta : at + n_meta + n_body],
            view[at + n_meta + n_body : at + n_meta + n_body + n_raw],
        )
        at += n_meta + n_body + n_raw
        if kind == CALIBRATION:
            try:
                yield orjson.loads(meta)
            except orjson.JSONDecodeError as e:
                yield Unreadable(f"calibration: {e!r}")
            continue
        if kind == MEMORY:
            try:
                yield MemoryRecord(*orjson.loads(meta))
            except (ValueError, TypeError) as e:
                yield Unreadable(f"memory: {e!r}")
            continue
        base = ref - 1 if ref else None
        try:
            parsed, extends = _parsed(body, held, base, n)
        except (KeyError, ValueError, TypeError) as e:  # (orjson's errors are ValueErrors)
            held.keep(seq, [], 0, base)
            why = f"shipped against body {base}, which is not held"
            yield Unreadable(f"frame {seq}: {why if isinstance(e, KeyError) else repr(e)}")
            continue
        held.keep(seq, [] if parsed is None else parsed["messages"], size, base)
        try:
            yield _turn(orjson.loads(meta), parsed, bytes(raw), extends)
        except (ValueError, TypeError, IndexError) as e:
            yield Unreadable(f"frame {seq}: {e!r}")


def _parsed(
    body: memoryview, held: HeldMessages, base: int | None, n: int
) -> tuple[dict[str, Any] | None, tuple[list[Any], int] | None]:
    """The request body's parse: of the body, or of what was parsed of it after held body
    ``base``'s first ``n`` messages (and those messages, as ``TurnRecord.extends``); None
    without a body."""
    if base is None and not body:
        return None, None
    parsed: dict[str, Any] = orjson.loads(body)
    messages = parsed.get("messages") if type(parsed) is dict else None
    if type(messages) is not list:
        raise ValueError("the body has no messages list")
    if base is not None:
        before = held.get(base)
        if n > len(before):
            raise ValueError(f"{n} messages of body {base}, which has {len(before)}")
        parsed["messages"] = before[:n] + messages
        return parsed, (before, n)
    return parsed, None


def _turn(
    values: list[Any],
    parsed: dict[str, Any] | None,
    raw: bytes,
    extends: tuple[list[Any], int] | None,
) -> TurnRecord:
    """The record, built by position (as ``exchange`` builds it: keywords cost more)."""
    (workspace, started_at, model, upstream, status, latency_ms, streamed, hint, decision,
     forwarded, reply, usage, finish_reason, error, cancelled, answer, wire, announced,
     choices, *extra) = values  # fmt: skip
    if parsed is not None:
        messages, params = parsed["messages"], request_params(parsed)
    else:
        messages, params = extra
    if decision is not None:
        decision = Decision.from_list(decision)
    raw_response = raw or None
    if answer:  # read here: one record built, not one and a copy
        reply, finish_reason, usage, error = read_answer(status, raw)
        choices = choices_of(raw) if status < 400 else None
        raw_response = None
    return TurnRecord(
        workspace, started_at, model, upstream, messages, status, latency_ms, streamed,
        hint, decision, forwarded, reply, usage, finish_reason, error, cancelled,
        raw_response, params, extends=extends, wire=wire, session_id=announced,
        choices=choices,
    )  # fmt: skip
