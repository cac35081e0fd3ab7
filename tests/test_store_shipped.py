"""Bodies shipped to the writer process as what they add to one it holds arrive whole."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.store.base import TurnRecord
from proxy.store.shipped import ShippedBodies
from proxy.store.wire import Job, Unreadable, decode, encode_turn, frames

PROMPT = "You are a careful assistant. " * 160  # one system prompt for every conversation


def _body(conv: int, texts: list[str]) -> bytes:
    msgs = [{"role": "system", "content": PROMPT}]
    msgs += [{"role": "user", "content": f"[{conv}] {t}"} for t in texts]
    return orjson.dumps({"model": "m", "messages": msgs, "temperature": 0.5})


def _turn(body: bytes) -> TurnRecord:
    msgs = orjson.loads(body)["messages"]
    return TurnRecord(workspace="w", started_at=1.0, model="m", upstream="u", messages=msgs,
                      request_params={"temperature": 0.5}, raw_request=body)  # fmt: skip


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
)
def test_every_body_arrives_whole(
    steps: list[tuple[int, str, str]], cuts: set[int], cleared: set[int], max_bytes: int
) -> None:
    """Interleaved conversations growing, resent and edited, batched anyhow, with caps
    that evict, and the proxy's mirror cleared now and then (a failed send): each turn
    decodes to the very record that was encoded."""
    histories: dict[int, list[str]] = {}
    turns = []
    for conv, what, t in steps:
        h = histories.setdefault(conv, [])
        if what == "add" or not h:
            h.append(t)
        elif what == "edit":
            h[-1] += t
        turns.append(_turn(_body(conv, h)))
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
