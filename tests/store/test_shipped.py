"""Bodies shipped to the writer process as what they add to one it holds parse whole."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.ingress.incremental_parse import ResentBodies
from proxy.store.base import TurnRecord
from proxy.store.shipped import HeldMessages, ShippedBodies
from proxy.store.wire import Job, Unreadable, decode, encode_turn, frames

PROMPT = "You are a careful assistant. " * 160  # one system prompt for every conversation


def _body(conv: int, texts: list[str]) -> bytes:
    msgs = [{"role": "system", "content": PROMPT}]
    msgs += [{"role": "user", "content": f"[{conv}] {t}"} for t in texts]
    return orjson.dumps({"model": "m", "messages": msgs, "temperature": 0.5})


def _turn(body: bytes, parser: ResentBodies | None = None) -> TurnRecord:
    """The record the proxy makes; with ``parser`` (the proxy's), it names what it resends."""
    if parser is None:
        parser = ResentBodies(min_bytes=1 << 60)  # (an empty one is falsy: no ``or``)
    parsed, resends = parser.parse_resending(body)
    return TurnRecord(workspace="w", started_at=1.0, model="m", upstream="u",
                      messages=parsed["messages"], request_params={"temperature": 0.5},
                      raw_request=body, resends=resends)  # fmt: skip


def _ship(batches: list[list[Job]], proxy: ShippedBodies, writer: HeldMessages) -> list[Any]:
    out: list[Any] = []
    for batch in batches:
        out += decode(b"".join(frames(batch, proxy)), writer)
    return out


def _received(turn: TurnRecord) -> TurnRecord:
    """The record as the writer gets it: the body's parse, not the body."""
    return dataclasses.replace(turn, raw_request=None)


text = st.text(alphabet="abc xyz", min_size=1, max_size=60)
# (conversation, what it does next): add a message, resend as is, edit its last one.
step = st.tuples(st.integers(0, 3), st.sampled_from(["add", "same", "edit"]), text)


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(step, min_size=1, max_size=30),
    cuts=st.sets(st.integers(1, 29)),
    cleared=st.sets(st.integers(1, 29)),
    max_bytes=st.integers(5_000, 50_000),
    named=st.booleans(),
)
def test_every_body_arrives_whole(
    steps: list[tuple[int, str, str]],
    cuts: set[int],
    cleared: set[int],
    max_bytes: int,
    named: bool,
) -> None:
    """Interleaved conversations growing, resent and edited, batched anyhow, with caps
    that evict, and the proxy's mirror cleared now and then (a failed send), with and
    without the proxy's parse naming what each body resends: each turn decodes to the
    very record that was encoded (its messages, parameters and fields)."""
    parser = ResentBodies(max_bytes=max_bytes, min_bytes=600) if named else None
    histories: dict[int, list[str]] = {}
    turns = []
    for conv, what, t in steps:
        h = histories.setdefault(conv, [])
        if what == "add" or not h:
            h.append(t)
        elif what == "edit":
            h[-1] += t
        turns.append(_turn(_body(conv, h), parser))
    proxy = ShippedBodies(max_bytes=max_bytes, min_bytes=600)
    writer = HeldMessages(max_bytes=max_bytes, min_bytes=600)
    got: list[Any] = []
    batch: list[Job] = []
    for i, turn in enumerate(turns):
        if i in cleared:
            got += _ship([batch], proxy, writer)
            batch = []
            proxy.clear()
        batch.append(encode_turn(turn))
        if i in cuts:
            got += _ship([batch], proxy, writer)
            batch = []
    got += _ship([batch], proxy, writer)
    assert got == [_received(t) for t in turns]


def test_a_continued_conversation_ships_only_what_it_adds() -> None:
    parser = ResentBodies(min_bytes=600)
    proxy, writer = ShippedBodies(min_bytes=600), HeldMessages(min_bytes=600)
    texts: list[str] = []
    before: Any = None
    for i in range(30):
        texts.append(f"message {i:02d} " * 20)  # 240 bytes, in a body of 5-12 KB
        turn = _turn(_body(0, texts), parser)
        head, meta, shipped, raw = frames([encode_turn(turn)], proxy)
        (got,) = decode(b"".join((head, meta, shipped, raw)), writer)
        assert got == _received(turn)
        if i:  # the model, the new message, and what follows the messages
            assert len(shipped) < 320 < len(turn.raw_request or b"")
            assert isinstance(got, TurnRecord) and got.extends == (before, i + 1)
            assert got.extends[0] is before  # the very list: the prefix cache trusts it
        before = got.messages
    assert len(proxy) == len(writer) == 1  # each turn replaced the one it extended


def test_a_body_the_writer_does_not_hold_travels_whole() -> None:
    """A body whose parse repeats one that was never shipped (or no longer held) is
    shipped whole, and so is a body saving too little."""
    parser = ResentBodies(min_bytes=600)
    proxy, writer = ShippedBodies(min_bytes=600), HeldMessages(min_bytes=600)
    parser.parse(_body(0, ["a"]))  # parsed, never recorded
    turn = _turn(_body(0, ["a", "b"]), parser)
    assert turn.resends is not None
    body = turn.raw_request or b""
    head, meta, shipped, raw = frames([encode_turn(turn)], proxy)
    assert bytes(shipped) == body
    assert list(decode(b"".join((head, meta, shipped, raw)), writer)) == [_received(turn)]
    small = _turn(_body(0, ["a", "b", "c"]), parser)  # saves a few bytes only
    assert small.resends is not None
    head, meta, shipped, raw = frames([encode_turn(dataclasses.replace(
        small, resends=small.resends._replace(cut=body)))], proxy)  # fmt: skip
    assert bytes(shipped) == small.raw_request


def test_a_base_the_writer_lacks_costs_that_frame_only() -> None:
    """A writer that lost what it held (it cannot, short of a bug) reports the frame
    unreadable, never a wrong parse, and reads the frames after it."""
    parser = ResentBodies(min_bytes=600)
    proxy = ShippedBodies(min_bytes=600)
    first, second = _turn(_body(0, ["hello"]), parser), _turn(_body(0, ["hello", "again"]), parser)
    other = _turn(
        orjson.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 0.5}
        )
    )
    list(decode(b"".join(frames([encode_turn(first)], proxy)), HeldMessages(min_bytes=600)))
    got = list(decode(b"".join(frames([encode_turn(second), encode_turn(other)], proxy)),
                      HeldMessages(min_bytes=600)))  # fmt: skip
    assert isinstance(got[0], Unreadable) and "not held" in got[0].error
    assert got[1:] == [_received(other)]


def test_a_frame_naming_more_messages_than_held_is_unreadable() -> None:
    parser = ResentBodies(min_bytes=600)
    proxy, writer = ShippedBodies(min_bytes=600), HeldMessages(min_bytes=600)
    first, second = _turn(_body(0, ["hello"]), parser), _turn(_body(0, ["hello", "again"]), parser)
    assert second.resends is not None
    list(decode(b"".join(frames([encode_turn(first)], proxy)), writer))
    lying = dataclasses.replace(second, resends=second.resends._replace(messages=9))
    got = list(decode(b"".join(frames([encode_turn(lying)], proxy)), writer))
    assert isinstance(got[0], Unreadable) and "which has 2" in got[0].error


def test_small_bodies_travel_whole_and_are_not_held() -> None:
    held = ShippedBodies()  # the default: 64 KiB and up
    body = _body(0, ["short"])
    assert held.ship(body) == (0, None)
    assert held.ship(body) == (1, None) and len(held) == 0
