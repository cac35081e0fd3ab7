"""Image parts: their size from a data: URL's header, and their token cost.

Sizes are read from the PNG/GIF/JPEG/WEBP header bytes only (no pixel decoding).
Costs follow OpenAI's published rules (platform.openai.com/docs/guides/images-vision,
"Calculating costs"): tile models pay ``base + tile * tiles`` after scaling to fit
2048x2048 and then to a 768px shortest side (``low``: ``base`` only); patch models
pay ``ceil(patches * multiplier)`` for 32px patches, capped at 1536. An unknown size
(a remote URL) is charged the worst case, so a count never falls short.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from dataclasses import dataclass

_HEADER_B64 = 96 * 1024  # JPEG SOF can follow EXIF/ICC segments; 72 KiB of bytes is plenty


@dataclass(frozen=True, slots=True)
class ImageCost:
    """One model's image pricing: tile (``multiplier`` None) or patch."""

    base: int = 85
    tile: int = 170
    multiplier: float | None = None


TILE_4O = ImageCost(85, 170)
# Longest prefix wins; figures from the OpenAI vision guide's cost table.
_COSTS: dict[str, ImageCost] = {
    "gpt-5": ImageCost(70, 140),
    "gpt-5-mini": ImageCost(multiplier=1.62),
    "gpt-5-nano": ImageCost(multiplier=2.46),
    "gpt-4o-mini": ImageCost(2833, 5667),
    "gpt-4.1-mini": ImageCost(multiplier=1.62),
    "gpt-4.1-nano": ImageCost(multiplier=2.46),
    "o4-mini": ImageCost(multiplier=1.72),
    "o1": ImageCost(75, 150),
    "o3": ImageCost(75, 150),
    "computer-use-preview": ImageCost(65, 129),
}


def cost_for_model(model: str) -> ImageCost:
    name = model.lower().rsplit("/", 1)[-1]
    best = ""
    for prefix in _COSTS:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return _COSTS[best] if best else TILE_4O


def image_tokens(cost: ImageCost, size: tuple[int, int] | None, detail: str) -> int:
    """Tokens for one image; ``size`` None means unknown: the worst case."""
    if cost.multiplier is not None:
        patches = 1536 if size is None else _patches(*size)
        return math.ceil(patches * cost.multiplier)
    if detail == "low":
        return cost.base
    if size is None:
        return cost.base + cost.tile * 8  # worst case: 768x2048 -> 2x4 tiles
    return cost.base + cost.tile * _tiles(*size)


def worst_case_tokens(cost: ImageCost) -> int:
    return image_tokens(cost, None, "high")


def _tiles(width: int, height: int) -> int:
    w, h = float(max(width, 1)), float(max(height, 1))
    if max(w, h) > 2048:
        s = 2048 / max(w, h)
        w, h = w * s, h * s
    if min(w, h) > 768:
        s = 768 / min(w, h)
        w, h = w * s, h * s
    return math.ceil(w / 512) * math.ceil(h / 512)


def _patches(width: int, height: int) -> int:
    w, h = max(width, 1), max(height, 1)
    raw = math.ceil(w / 32) * math.ceil(h / 32)
    if raw <= 1536:
        return raw
    r = math.sqrt(32 * 32 * 1536 / (w * h))
    r *= min(math.floor(w * r / 32) / (w * r / 32), math.floor(h * r / 32) / (h * r / 32))
    return min(1536, math.ceil(w * r / 32) * math.ceil(h * r / 32))


def data_url_size(url: str) -> tuple[int, int] | None:
    """(width, height) of a ``data:image/...;base64,`` URL, or None if unreadable."""
    if not url.startswith("data:"):
        return None
    comma = url.find(",")
    if comma < 0 or ";base64" not in url[:comma]:
        return None
    chunk = url[comma + 1 : comma + 1 + _HEADER_B64]
    chunk = chunk[: len(chunk) - len(chunk) % 4]
    try:
        head = base64.b64decode(chunk, validate=False)
    except (binascii.Error, ValueError):
        return None
    return image_size(head)


def image_size(head: bytes) -> tuple[int, int] | None:
    """(width, height) from an image's first bytes, or None when the format is unknown or
    the header is cut short or impossible (a side of 0): the caller then charges the worst
    case. Every parser checks lengths before it reads, so no bytes make it raise."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        size = _png_size(head)
    elif head[:6] in (b"GIF87a", b"GIF89a"):
        size = _u16s(head, 6, "<")
    elif head.startswith(b"\xff\xd8"):
        size = _jpeg_size(head)
    elif head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        size = _webp_size(head)
    else:
        return None
    return size if size is not None and size[0] > 0 and size[1] > 0 else None


def _u16s(data: bytes, at: int, order: str) -> tuple[int, int] | None:
    """Two 16-bit integers at ``at`` (``order`` "<" or ">"), or None past the end."""
    if len(data) < at + 4:
        return None
    a, b = struct.unpack_from(order + "HH", data, at)
    return a, b


def _png_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 24 or data[12:16] != b"IHDR":
        return None
    w, h = struct.unpack_from(">II", data, 16)
    return w, h


_JPEG_NO_LENGTH = frozenset({0x01, 0xD8, *range(0xD0, 0xD8)})
_JPEG_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """Walk the segments to the first start-of-frame; a scan, an end or a segment
    shorter than its own length field before it means no size."""
    i, n = 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:
            i += 1
            continue
        if marker in _JPEG_NO_LENGTH:
            i += 2
            continue
        if marker in (0xD9, 0xDA):
            return None
        (length,) = struct.unpack_from(">H", data, i + 2)
        if length < 2:
            return None
        if marker in _JPEG_SOF:
            hw = _u16s(data, i + 5, ">")
            return None if hw is None else (hw[1], hw[0])
        i += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    kind = data[12:16]
    if kind == b"VP8 ":
        if data[23:26] != b"\x9d\x01\x2a":
            return None
        wh = _u16s(data, 26, "<")
        return None if wh is None else (wh[0] & 0x3FFF, wh[1] & 0x3FFF)
    if kind == b"VP8L":
        if len(data) < 25 or data[20] != 0x2F:
            return None
        bits = int.from_bytes(data[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if kind == b"VP8X":
        if len(data) < 30:
            return None
        return 1 + int.from_bytes(data[24:27], "little"), 1 + int.from_bytes(data[27:30], "little")
    return None
