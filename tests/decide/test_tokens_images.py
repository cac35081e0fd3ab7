"""Image headers from client data: every parser is total, whatever the bytes.

A data URL's bytes are the client's; a header cut short, a lying length or a zero side
must give "no size" (the worst-case cost), never an exception (a 500 for the request).
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy.decide.tokens import TokenCounter
from proxy.decide.tokens.images import image_size
from tests.decide.test_tokens import gif, jpeg, png, webp_vp8l, webp_vp8x


def webp_vp8(w: int, h: int) -> bytes:
    frame = b"\x00\x00\x00" + b"\x9d\x01\x2a" + struct.pack("<HH", w, h)
    body = b"VP8 " + struct.pack("<I", len(frame)) + frame
    return b"RIFF" + struct.pack("<I", len(body) + 4) + b"WEBP" + body


HEADERS: dict[str, Callable[[int, int], bytes]] = {
    "png": png,
    "gif": gif,
    "jpeg": jpeg,
    "webp-vp8": webp_vp8,
    "webp-vp8l": webp_vp8l,
    "webp-vp8x": webp_vp8x,
}
SIGNATURES = [
    b"\x89PNG\r\n\x1a\n",
    b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
    b"GIF87a",
    b"GIF89a",
    b"\xff\xd8",
    b"\xff\xd8\xff\xc0",
    b"RIFF\x00\x00\x00\x00WEBPVP8 ",
    b"RIFF\x00\x00\x00\x00WEBPVP8L",
    b"RIFF\x00\x00\x00\x00WEBPVP8X",
]


def _sane(size: tuple[int, int] | None) -> bool:
    return size is None or (
        isinstance(size, tuple) and len(size) == 2 and all(type(v) is int and v > 0 for v in size)
    )


@pytest.mark.parametrize("make", HEADERS.values(), ids=HEADERS.keys())
def test_each_format_reads_its_size(make: Callable[[int, int], bytes]) -> None:
    """A whole header gives its size (the VP8 frame holds 14 bits a side)."""
    assert image_size(make(1234, 567)) == (1234, 567)


@settings(max_examples=300, deadline=None)
@given(
    fmt=st.sampled_from(sorted(HEADERS)),
    w=st.integers(1, 16383),
    h=st.integers(1, 16383),
    cut=st.integers(0, 200),
    flips=st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=4),
)
@example(fmt="webp-vp8l", w=5, h=5, cut=21, flips=[])  # issue 27: was an IndexError
@example(fmt="jpeg", w=5, h=5, cut=30, flips=[(21, 0)])  # a SOF cut before its size
def test_truncated_or_altered_headers_never_raise(
    fmt: str, w: int, h: int, cut: int, flips: list[tuple[int, int]]
) -> None:
    """Every prefix of a real header, with bytes overwritten, gives a size or None."""
    data = bytearray(HEADERS[fmt](w, h)[:cut])
    for at, value in flips:
        if at < len(data):
            data[at] = value
    assert _sane(image_size(bytes(data)))


@settings(max_examples=500, deadline=None)
@given(prefix=st.sampled_from(SIGNATURES), rest=st.binary(max_size=64))
@example(prefix=b"RIFF\x00\x00\x00\x00WEBPVP8L", rest=b"")  # issue 27: was an IndexError
@example(prefix=b"\xff\xd8", rest=b"\xff\xe0\x00\x00" * 4)  # a zero-length segment
@example(prefix=b"GIF89a", rest=b"\x00\x00\x00\x00")  # a side of 0
def test_random_bytes_after_a_signature_never_raise(prefix: bytes, rest: bytes) -> None:
    """Random bytes behind each format's signature give a size or None, never an error."""
    assert _sane(image_size(prefix + rest))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=256))
def test_random_bytes_never_raise(data: bytes) -> None:
    assert _sane(image_size(data))


def test_zero_sides_cost_the_worst_case() -> None:
    """A header claiming a side of 0 is impossible: the image costs what an unknown one does."""
    counter = TokenCounter(0).for_model("gpt-4o")
    for make in (png, gif, webp_vp8):
        assert image_size(make(0, 100)) is None

    def cost(url: str) -> int:
        part = {"type": "image_url", "image_url": {"url": url}}
        return counter.count_messages([{"role": "user", "content": [part]}])

    zero = "data:image/png;base64," + base64.b64encode(png(0, 0)).decode()
    small = "data:image/png;base64," + base64.b64encode(png(10, 10)).decode()
    assert cost(zero) == cost("https://example.com/unknown.png") > cost(small)


@settings(max_examples=100, deadline=None)
@given(prefix=st.sampled_from(SIGNATURES), rest=st.binary(max_size=40))
def test_odd_images_in_a_counted_request(prefix: bytes, rest: bytes) -> None:
    """An odd header inside a request is counted like any image: no exception, a positive cost."""
    counter = TokenCounter(0).for_model("gpt-4o")
    url = "data:image/webp;base64," + base64.b64encode(prefix + rest).decode()
    part = {"type": "image_url", "image_url": {"url": url, "detail": "high"}}
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, part]}]}
    assert 0 < counter.count_request(body) <= counter.upper_bound(body)
