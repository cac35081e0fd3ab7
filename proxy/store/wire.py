"""Turn records as bytes, for the writer process (see ``process``).

A frame is a head (kind, the three parts' lengths, the frame's number, the body it
is shipped against and how many bytes of it) and then the parts: the JSON of the
record's small fields, the client's request body as received, and the raw SSE
bytes if kept (or a non-streamed answer as received, which the writer parses).
Shipping the body as received costs the proxy no serialising of a long history (and
its tools) every turn, and shipping only what it adds to a body the writer holds
(``shipped``) costs no copying of it either; the writer rebuilds the body and parses
it, reusing what it parsed of the same history before (``resent``). Without a raw
body the messages and other fields travel in the JSON.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from proxy.resent import Resends, ResentBodies
from proxy.sse import read_answer
from proxy.store.base import Decision, TurnRecord, request_params, settled
from proxy.store.shipped import ShippedBodies

TURN, CALIBRATION = b"T", b"C"
_HEAD = struct.Struct("<cIIIQQI")  # kind, 3 lengths, seq, base + 1 (0: none), shared


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
decision a list in it, because the proxy encodes one every turn: 9,600 instructions
against 24,700 as objects (callgrind, a 1 KB turn)."""


def encode_turn(turn: TurnRecord) -> Job:
    """The turn as a job. Its meta is the :data:`_FIELDS`, then whether the last part is
    a non-streamed answer (not SSE bytes), then, only for a turn without its request
    body, the messages and request parameters."""
    if turn.answer is not None and turn.raw_response is not None:
        turn = settled(turn)  # (cannot be: an answer is a stream's or not; be safe anyway)
    body = turn.raw_request or b""
    meta = [
        turn.workspace, turn.started_at, turn.model, turn.upstream, turn.status,
        turn.latency_ms, turn.streamed, turn.session_hint,
        turn.decision and turn.decision.as_list(), turn.forwarded,
        turn.reply, turn.usage, turn.finish_reason, turn.error, turn.cancelled,
        turn.answer is not None,
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


def frames(jobs: Sequence[Job], held: ShippedBodies) -> list[bytes | memoryview]:
    """The jobs' frames, as pieces to write in order; each body is shipped against the
    body ``held`` (the proxy's mirror of the writer's) shares the most with, if any."""
    pieces: list[bytes | memoryview] = []
    for kind, meta, body, raw, resends in jobs:
        seq, base, shared = held.ship(body, resends) if kind == TURN else (0, None, 0)
        tail = memoryview(body)[shared:] if shared else body
        ref = 0 if base is None else base + 1
        pieces += (
            _HEAD.pack(kind, len(meta), len(tail), len(raw), seq, ref, shared),
            meta,
            tail,
            raw,
        )
    return pieces


def decode(
    buf: bytes | memoryview,
    held: ShippedBodies,
    bodies: ResentBodies | None = None,
    *,
    with_body: bool = False,
) -> Iterator[TurnRecord | dict[str, Any] | Unreadable]:
    """The jobs in ``buf`` (whole frames): turn records, calibrations as dicts, and
    :class:`Unreadable` for a frame that cannot be decoded.

    ``held`` is the writer's end of the bodies mirror; ``bodies`` (the writer's)
    spares re-parsing the history a body resends. A record's ``raw_request`` is left
    out unless ``with_body``: the writer needs only its parse, and a batch's bodies
    held until their turns were written kept each new body off the pages the last
    ones freed (at 500 turns, 75 page faults a turn instead of 14, and decoding took
    476 µs a turn instead of 218).
    """
    view, at = memoryview(buf), 0
    while at < len(buf):
        kind, n_meta, n_tail, n_raw, seq, ref, shared = _HEAD.unpack_from(buf, at)
        at += _HEAD.size
        meta, tail, raw = (
            view[at : at + n_meta],
            view[at + n_meta : at + n_meta + n_tail],
            view[at + n_meta + n_tail : at + n_meta + n_tail + n_raw],
        )
        at += n_meta + n_tail + n_raw
        if kind == CALIBRATION:
            try:
                yield orjson.loads(meta)
            except orjson.JSONDecodeError as e:
                yield Unreadable(f"calibration: {e!r}")
            continue
        base = ref - 1 if ref else None
        try:
            like = None if base is None else Resends(held.get(base), shared)
        except KeyError:
            held.keep(seq, b"", base)
            yield Unreadable(f"frame {seq} is shipped against body {base}, which is not held")
            continue
        body = bytes(tail) if like is None else b"".join((memoryview(like.body)[:shared], tail))
        held.keep(seq, body, base)
        try:
            yield _turn(orjson.loads(meta), body, bytes(raw), bodies, with_body, like)
        except (ValueError, TypeError, IndexError) as e:  # (orjson's errors are ValueErrors)
            yield Unreadable(f"frame {seq}: {e!r}")


def _turn(
    values: list[Any],
    body: bytes,
    raw: bytes,
    bodies: ResentBodies | None,
    with_body: bool,
    like: Resends | None,
) -> TurnRecord:
    """The record, built by position (as ``chat`` builds it: 21 keywords cost three times
    the instructions); a body shipped against one the writer parsed before is parsed
    reusing that one's messages, found by name (``like``), not by comparing bytes again."""
    (workspace, started_at, model, upstream, status, latency_ms, streamed, hint, decision,
     forwarded, reply, usage, finish_reason, error, cancelled, answer, *extra) = values  # fmt: skip
    if body:
        parsed = bodies.parse(body, like=like) if bodies is not None else orjson.loads(body)
        messages, params = parsed["messages"], request_params(parsed)
    else:
        messages, params = extra
    if decision is not None:
        decision = Decision.from_list(decision)
    raw_response = raw or None
    if answer:  # read here: one record built, not one and a copy
        reply, finish_reason, usage, error = read_answer(status, raw)
        raw_response = None
    return TurnRecord(
        workspace, started_at, model, upstream, messages, status, latency_ms, streamed,
        hint, decision, forwarded, reply, usage, finish_reason, error, cancelled,
        raw_response, params, body if with_body and body else None,
    )  # fmt: skip
