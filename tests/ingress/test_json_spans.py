"""Replacing top-level members' values in a body's bytes (a lowered max_tokens)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.ingress.json_spans import with_members

values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


@given(st.dictionaries(st.text(max_size=6), values, max_size=5), st.booleans(), st.integers(0, 4))
def test_only_the_named_values_change(body: dict[str, Any], ascii_only: bool, indent: int) -> None:
    """Any object, however written: the named members get the new value, every other
    byte (big integers, escapes, spacing) stays as the client wrote it."""
    body = {**body, "max_tokens": 32_768}
    raw = json.dumps(body, ensure_ascii=ascii_only, indent=indent or None).encode()
    out = with_members(raw, {"max_tokens": b"2048", "absent": b"1"})
    assert out is not None
    assert json.loads(out) == {**body, "max_tokens": 2048}
    assert len(out) == len(raw) - 1  # "32768" became "2048"; nothing else was rewritten


def test_not_json_or_a_key_twice_is_none() -> None:
    """What it cannot edit exactly it does not edit."""
    assert with_members(b"[1]", {"a": b"1"}) is None
    assert with_members(b'{"a": 1, "a": 2}', {"a": b"3"}) is None
    assert with_members(b'{"a": ', {"a": b"3"}) is None
