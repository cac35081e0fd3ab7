"""Head-and-tail cuts: fixed by the text and the size kept, marked, total."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.trim import head_tail, map_text


@settings(max_examples=200, deadline=None)
@given(text=st.text(min_size=0, max_size=3000), keep=st.integers(0, 2000))
def test_head_tail_keeps_both_ends_and_says_how_much_went(text: str, keep: int) -> None:
    """The cut keeps a head and a tail of the text, states the characters removed, and is
    the same every time; short texts are left alone."""
    out = head_tail(text, keep)
    assert out == head_tail(text, keep)
    if out == text:
        assert len(text) <= keep + 80
        return
    head, rest = out.split("\n[handoff: ", 1)
    removed = int(rest.split(" ", 1)[0].replace(",", ""))
    tail = rest.split(" cut from the middle of this message]\n", 1)[1]
    assert text.startswith(head) and text.endswith(tail)
    assert len(head) + removed + len(tail) == len(text)
    assert len(head) + len(tail) <= keep


def test_map_text_touches_text_parts_only() -> None:
    """Images and unknown parts pass through; an unchanged message gives None."""
    msg = {
        "role": "user",
        "content": [
            {"type": "image_url", "image_url": {"url": "x"}},
            {"type": "text", "text": "ab"},
        ],
    }
    assert map_text(msg, lambda t: t) is None
    out = map_text(msg, lambda t: t.upper())
    assert out is not None and out["content"][0] is msg["content"][0]
    assert out["content"][1] == {"type": "text", "text": "AB"}
