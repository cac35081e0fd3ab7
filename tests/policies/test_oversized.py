"""oversized: a message too big on its own is cut in its middle, with a marker."""

from __future__ import annotations

import asyncio

from policies.base import PolicyContext
from policies.oversized import Oversized, middle_cut
from tests.strategies import count


def test_middle_cut_keeps_both_ends_of_a_text_part() -> None:
    """In a part array, the largest text part is cut; other parts pass untouched."""
    img = {"type": "image_url", "image_url": {"url": "u"}}
    m = {"role": "user", "content": [img, {"type": "text", "text": "A" + "x" * 1000 + "Z"}]}
    cut = middle_cut(m, 500)
    text = cut["content"][1]["text"]
    assert cut["content"][0] == img and text[0] == "A" and text[-1] == "Z"
    assert "[handoff: 500 characters cut from the middle of this message]" in text
    assert m["content"][1]["text"].count("x") == 1000, "input mutated"


def test_never_cuts_system_and_fits_when_possible() -> None:
    """System messages stay whole; the largest other message is cut until the prompt fits."""
    conv = [
        {"role": "system", "content": "rules " * 100},
        {"role": "user", "content": "y" * 40_000},
    ]
    r = asyncio.run(Oversized().apply(conv, PolicyContext(1000, count)))
    assert r.messages[0] == conv[0] and count(r.messages) <= 1000 and r.changed
