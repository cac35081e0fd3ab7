"""Bodies shipped to the writer process as what they add to one it holds arrive whole."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.resent import Resends, ResentBodies
from proxy.store.base import TurnRecord
from proxy.store.shipped import ShippedBodies
from proxy.store.wire import Job, Unreadable, decode, encode_turn, frames

PROMPT = "You are a careful assistant. " * 160  # one system prompt for every conversation


def _body(conv: int, texts: list[str]) -> bytes:
    msgs = [{"role": "system", "content": PROMPT}]
    msgs += [{"role": "user", "content": f"[{conv}] {t}"} for t in texts]
    return orjson.dumps({"model": "m", "messages": msgs, "temperature": 0.5})


def _turn(body: bytes, parser: ResentBodies | None = None) -> TurnRecord:
    """The record the proxy makes; with ``parser`` (the proxy's), it names what it resends."""
    parsed, resends = (parser or ResentBodies(min_bytes=1 << 60)).parse_resending(body)
    return TurnRecord(workspace="w", started_at=1.0, model="m", upstream="u",
                      messages=parsed["messages"], request_params={"temperature": 0.5},
                      raw_request=body, resends=resends)  # fmt: skip


def _ship(batches: list[list[Job]], proxy: ShippedBodies, writer: ShippedBodies) -> list[Any]:
    out: list[Any] = []
    for batch in batches:
        out += decode(b"".join(frames(batch, proxy)), writer, with_body=True)
    return out


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
    very record that was encoded."""
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
    writer = ShippedBodies(max_bytes=max_bytes, min_bytes=600)
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
    assert got == turns


def test_a_continued_conversation_ships_only_what_it_adds() -> None:
    proxy, writer = ShippedBodies(min_bytes=600), ShippedBodies(min_bytes=600)
    texts: list[str] = []
    for i in range(30):
        texts.append(f"message {i:02d} " * 20)  # 240 bytes, in a body of 5-12 KB
        turn = _turn(_body(0, texts))
        head, meta, shipped, raw = frames([encode_turn(turn)], proxy)
        assert list(decode(b"".join((head, meta, shipped, raw)), writer, with_body=True)) == [turn]
        if i:  # the new message, its quotes and role, and what follows the messages
            assert len(shipped) < 320 < len(turn.raw_request or b"")
    assert len(proxy) == len(writer) == 1  # each turn replaced the one it extended


def test_a_named_body_is_shipped_against_without_comparing() -> None:
    """A body the proxy's parse says it resends is shipped against that body when it is
    held, even if another held body shares more (nothing is compared to choose), and
    the writer rebuilds it exactly."""
    one, longer = _body(0, ["a"]), _body(0, ["a", "b" * 400])
    third = _body(0, ["a", "b" * 400, "c"])
    proxy, writer, unnamed = (ShippedBodies(min_bytes=600) for _ in range(3))
    for held in (proxy, writer, unnamed):
        held.keep(0, one, None)
        held.keep(1, longer, None)
    assert unnamed.ship(third)[1] == 1  # compared: the longer one shares more
    named = Resends(one, one.index(b"[0] a") + 5)  # true, though not the most
    turn = dataclasses.replace(_turn(third), resends=named)
    head, meta, shipped, raw = frames([encode_turn(turn)], proxy)
    assert len(shipped) == len(third) - named.shared  # shipped against body 0
    got = decode(b"".join((head, meta, shipped, raw)), writer, with_body=True)
    assert list(got) == [turn]


def test_a_base_the_writer_lacks_costs_that_frame_only() -> None:
    """A writer that lost what it held (it cannot, short of a bug) reports the frame
    unreadable, never a wrong body, and reads the frames after it."""
    proxy = ShippedBodies(min_bytes=600)
    first, second = _turn(_body(0, ["hello"])), _turn(_body(0, ["hello", "again"]))
    other = _turn(
        orjson.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 0.5}
        )
    )
    decode(b"".join(frames([encode_turn(first)], proxy)), ShippedBodies(min_bytes=600))
    got = list(decode(b"".join(frames([encode_turn(second), encode_turn(other)], proxy)),
                      ShippedBodies(min_bytes=600), with_body=True))  # fmt: skip
    assert isinstance(got[0], Unreadable) and "not held" in got[0].error
    assert got[1:] == [other]


def test_small_bodies_travel_whole_and_are_not_held() -> None:
    held = ShippedBodies()  # the default: 64 KiB and up
    body = _body(0, ["short"])
    assert held.ship(body) == (0, None, 0)
    assert held.ship(body) == (1, None, 0) and len(held) == 0
