"""Parsing resent bodies by reuse gives exactly ``orjson.loads``, and does reuse."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy.ingress.incremental_parse import ResentBodies
from proxy.ingress.json_spans import elements_from, has_key_after, layout

# Values that compare equal yet serialise differently, and text that looks like JSON.
scalar = st.one_of(
    st.sampled_from([1, 1.0, True, 0, 0.0, -0.0, False, None, 10**18, 1e-7]),
    st.text(alphabet=st.sampled_from('ab ]},[{":\\é€😀\n'), max_size=12),
)
value = st.recursive(
    scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from("xyz"), inner, max_size=3)
    ),
    max_leaves=6,
)
message = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool"]), "content": value},
    optional={"name": st.text(max_size=3), "tool_calls": st.lists(value, max_size=2)},
)
style = st.sampled_from(
    [
        {},
        {"separators": (",", ":")},
        {"ensure_ascii": False},
        {"indent": 1},
        {"indent": "\t", "ensure_ascii": False},
    ]
)
# What a client does next: append messages, resend as is, or go back (edit, regenerate).
step = st.one_of(
    st.tuples(st.just("add"), st.lists(message, min_size=1, max_size=3)),
    st.tuples(st.just("same"), st.just([])),
    st.tuples(st.just("back"), st.integers(1, 4)),
    st.tuples(st.just("style"), style),
)


def body_of(messages: list[Any], model: str, extra: dict[str, Any], fmt: dict[str, Any]) -> bytes:
    doc: dict[str, Any] = {"model": model, "messages": messages, **extra}
    return json.dumps(doc, **fmt).encode()


def exact(obj: Any) -> bytes:
    """A serialisation that tells 1, 1.0 and True apart, and keeps key order."""
    return orjson.dumps(obj)


@settings(max_examples=300, deadline=None)
@given(
    first=st.lists(message, min_size=1, max_size=4),
    steps=st.lists(step, max_size=12),
    fmt=style,
    extra=st.sampled_from([{}, {"stream": True}, {"tools": [{"messages": "]"}], "n": 1}]),
)
@example(first=[{"role": "user", "content": "a"}], steps=[("add", [{"role": "user", "content": 1}])],
         fmt={}, extra={})  # fmt: skip
def test_same_as_orjson(
    first: list[Any], steps: list[tuple[str, Any]], fmt: dict[str, Any], extra: dict[str, Any]
) -> None:
    """Every body of a conversation parses to what ``orjson.loads`` gives, whatever it does."""
    bodies = ResentBodies()
    history = list(first)
    sent = [body_of(history, "m", extra, fmt)]
    for kind, arg in steps:
        if kind == "add":
            history = history + arg
        elif kind == "back":
            history = history[: max(1, len(history) - arg)]
        elif kind == "style":
            fmt = arg
        sent.append(body_of(history, "m", extra, fmt))
    for body in sent:
        got, resends = bodies.parse_resending(body)
        assert exact(got) == exact(orjson.loads(body))
        if resends is not None:  # the writer's rebuilding from what it says gives the same
            assert resends.body in sent
            rebuilt = orjson.loads(resends.cut)
            before = orjson.loads(resends.body)["messages"][: resends.messages]
            rebuilt["messages"] = before + rebuilt["messages"]
            assert exact(rebuilt) == exact(orjson.loads(body))


@settings(max_examples=300, deadline=None)
@given(
    history=st.lists(message, min_size=2, max_size=6),
    more=st.lists(message, max_size=2),
    at=st.integers(1, 40),
    edit=st.sampled_from([b"", b",", b"]", b"}", b" ", b'"', b"[", b"x", b"\xff"]),
    drop=st.integers(0, 2),
)
@example(history=[{"role": "user", "content": "a"}] * 2, more=[], at=2, edit=b",", drop=0)
def test_a_damaged_resend_fails_as_orjson_fails(
    history: list[Any], more: list[Any], at: int, edit: bytes, drop: int
) -> None:
    """A resend damaged near its end (where the new messages are) parses to what orjson
    gives, or fails as orjson fails: cutting out the reused messages hides nothing."""
    bodies = ResentBodies()
    bodies.parse(body_of(history, "m", {}, {}))
    body = body_of(history + more, "m", {}, {})
    i = max(0, len(body) - at)
    damaged = body[:i] + edit + body[i + drop :]
    try:
        expected = exact(orjson.loads(damaged))
    except orjson.JSONDecodeError:
        expected = None
    try:
        got = exact(bodies.parse(damaged))
    except orjson.JSONDecodeError:
        got = None
    assert got == expected


def test_a_growing_conversation_parses_only_what_is_new() -> None:
    """200 turns: each body is parsed for its new messages, not the whole history again."""
    bodies = ResentBodies()
    history: list[Any] = [{"role": "system", "content": "You are terse. " * 20}]
    total = 0
    for i in range(200):
        history = [*history, {"role": "user", "content": f"question {i} " * 30}]
        body = body_of(history, "gpt-4.1", {"stream": True}, {})
        total += len(body)
        assert bodies.parse(body) == orjson.loads(body)
        history.append({"role": "assistant", "content": f"answer {i} " * 40})
    assert bodies.reused_messages == sum(2 * i for i in range(200))  # all the last body had
    assert bodies.parsed_bytes < total / 20


def test_a_changed_message_reuses_those_before_it() -> None:
    """A client that rewrites its latest message (say, strips retrieved context) still
    reuses everything before it."""
    bodies = ResentBodies()
    base = [{"role": "user", "content": f"m{i} " * 50} for i in range(50)]
    bodies.parse(body_of([*base, {"role": "user", "content": "with context"}], "m", {}, {}))
    second = body_of([*base, {"role": "user", "content": "bare"}, {"role": "user", "content": "x"}], "m", {}, {})  # fmt: skip
    assert bodies.parse(second) == orjson.loads(second)
    assert bodies.reused_messages == 50


def test_little_in_common_costs_no_scan() -> None:
    """A body that shares only its start with a remembered one is parsed whole, and the
    remembered one is not scanned for its layout."""
    bodies = ResentBodies()
    a = body_of([{"role": "user", "content": "same start " + "a" * 2000}], "m", {}, {})
    b = body_of([{"role": "user", "content": "same start " + "b" * 2000}], "m", {}, {})
    bodies.parse(a)
    assert bodies.parse(b) == orjson.loads(b)
    assert bodies.reused_messages == 0
    assert bodies.parsed_bytes == len(a) + len(b)


def test_a_second_messages_key_is_never_followed() -> None:
    """orjson keeps the last of a repeated key; reuse must not take the first array."""
    bodies = ResentBodies()
    one = b'{"messages": [{"role": "user", "content": "a"}], "model": "m"}'
    two = b'{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], "messages": [{"role": "user", "content": "z"}]}'
    escaped = b'{"messages": [{"role": "user", "content": "a"}], "messa\\u0067es": [1]}'
    for body in (one, two, one, escaped):
        assert exact(bodies.parse(body)) == exact(orjson.loads(body))


def test_a_trailing_comma_after_reused_messages_is_refused_as_orjson_refuses_it() -> None:
    """Cutting the reused messages out must not turn invalid JSON into valid JSON."""
    bodies = ResentBodies()
    history = [{"role": "user", "content": f"m{i} " * 50} for i in range(20)]
    good = body_of(history, "m", {}, {})
    bodies.parse(good)
    bad = good.replace(b"]}", b", ]}")
    for body in (bad, bad.replace(b", ]}", b",]}")):
        try:
            orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
        else:
            raise AssertionError("the fixture should be invalid JSON")
        try:
            bodies.parse(body)
        except orjson.JSONDecodeError:
            continue
        raise AssertionError("a trailing comma was accepted")


def test_layout_offsets() -> None:
    """Offsets are bytes, also where the text is not ASCII."""
    body = '{"model": "é", "messages": [ {"a": "]é"} , [1, 2],"s"], "t": {"messages": 1}}'.encode()
    lay = layout(body)
    assert lay is not None
    assert body[lay.open : lay.open + 1] == b"["
    assert [body[:e][-2:] for e in lay.ends] == [b'"}', b"2]", b's"']
    assert body[lay.close : lay.close + 1] == b"]"
    assert elements_from(body, lay.ends[0] + 3) == (lay.ends[1:], lay.close)
    assert has_key_after(body, lay.close, "messages") is False
    assert has_key_after(body, lay.close, "t") is True
    for not_one in (b"[1]", b'{"messages": 1}', b'{"messages": [], "messages": []}', b"{"):
        assert layout(not_one) is None


def test_the_request_checks_still_refuse_a_resent_body() -> None:
    """A large body that resends a remembered history but nests its new message too
    deep is refused as before, and is not remembered for reuse."""
    from proxy.errors import InvalidRequest
    from proxy.ingress.chat_completions import MAX_DEPTH, parse_chat
    from proxy.ingress.incremental_parse import WORTH_REUSING

    bodies = ResentBodies(min_bytes=WORTH_REUSING)
    history = [{"role": "user", "content": "x" * 1000} for _ in range(WORTH_REUSING // 1000 + 1)]
    ok = json.dumps({"model": "m", "messages": history}).encode()
    assert parse_chat(ok, bodies).messages == tuple(history)
    deep: Any = "leaf"
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    bad = json.dumps({"model": "m", "messages": [*history, {"role": "user", "content": deep}]})
    try:
        parse_chat(bad.encode(), bodies)
    except InvalidRequest as e:
        assert "levels deep" in str(e)
    else:
        raise AssertionError("a too-deep body was accepted")
    assert len(bodies) == 1  # not remembered
    more = [*history, {"role": "user", "content": "fine"}]
    good = json.dumps({"model": "m", "messages": more}).encode()
    assert parse_chat(good, bodies).messages == tuple(more)
    assert bodies.reused_messages == len(history)


def test_a_resent_body_is_checked_for_its_new_messages_by_their_place() -> None:
    """Reused messages passed before; a bad new one is refused under its own index."""
    from proxy.errors import InvalidRequest
    from proxy.ingress.chat_completions import parse_chat
    from proxy.ingress.incremental_parse import WORTH_REUSING

    bodies = ResentBodies(min_bytes=WORTH_REUSING)
    history = [{"role": "user", "content": "y" * 1000} for _ in range(WORTH_REUSING // 1000 + 1)]
    parse_chat(json.dumps({"model": "m", "messages": history}).encode(), bodies)
    bad = json.dumps({"model": "m", "messages": [*history, {"content": "no role"}]}).encode()
    try:
        parse_chat(bad, bodies)
    except InvalidRequest as e:
        assert e.param == f"messages[{len(history)}].role"
    else:
        raise AssertionError("a message without a role was accepted")
    assert bodies.reused_messages == 0 and len(bodies) == 1


def test_conversations_sharing_a_system_prompt_each_reuse_their_own() -> None:
    """Forty interleaved conversations with one system prompt: each body reuses its own
    conversation's last body, not another's shared start (a first turn reuses just
    the system prompt another conversation sent)."""
    bodies = ResentBodies()
    system = {"role": "system", "content": "You are a coding assistant. " * 40}
    histories: list[list[Any]] = [[system] for _ in range(40)]
    expected = 0
    for turn in range(5):
        for c, history in enumerate(histories):
            history.append({"role": "user", "content": f"conversation {c}, turn {turn}"})
            body = body_of(history, "m", {}, {})
            assert exact(bodies.parse(body)) == exact(orjson.loads(body))
            expected += len(history) - 2 if turn else min(c, 1)
            history.append({"role": "assistant", "content": f"answer {c}.{turn}"})
    assert bodies.reused_messages == expected


def test_bodies_below_min_bytes_are_parsed_whole_and_not_kept() -> None:
    """A small body costs one orjson.loads: no lookup, nothing remembered."""
    bodies = ResentBodies(min_bytes=10_000)
    small = body_of([{"role": "user", "content": "hi"}], "m", {}, {})
    for _ in range(3):
        assert bodies.parse(small) == orjson.loads(small)
    assert len(bodies) == 0 and bodies.reused_messages == 0
