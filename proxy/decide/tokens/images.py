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
    """(width, height) from an image's first bytes, or None if the format is unknown."""
    try:
        if head.startswith(b"\x89PNG\r\n\x1a\n") and head[12:16] == b"IHDR":
            w, h = struct.unpack(">II", head[16:24])
            return w, h
        if head[:6] in (b"GIF87a", b"GIF89a"):
            w, h = struct.unpack("<HH", head[6:10])
            return w, h
        if head.startswith(b"\xff\xd8"):
            return _jpeg_size(head)
        if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
            return _webp_size(head)
    except struct.error:
        return None
    return None


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker == 0xFF:
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2 : i + 4])
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", data[i + 5 : i + 9])
            return w, h
        i += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    kind = data[12:16]
    if kind == b"VP8 " and data[23:26] == b"\x9d\x01\x2a":
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    if kind == b"VP8L" and data[20] == 0x2F:
        b = data[21:25]
        w = 1 + (((b[1] & 0x3F) << 8) | b[0])
        h = 1 + (((b[3] & 0x0F) << 10) | (b[2] << 2) | ((b[1] & 0xC0) >> 6))
        return w, h
    if kind == b"VP8X":
        w = 1 + int.from_bytes(data[24:27], "little")
        h = 1 + int.from_bytes(data[27:30], "little")
        return w, h
    return None
