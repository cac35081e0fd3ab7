"""JSON text of what the readers build, at any depth the store can hold.

orjson writes at most 254 levels, and a message stored at that limit sits a few levels
deeper again inside a turn, a diff or a portable document; those (rare) documents are
written by the standard library instead, so a reader never fails on what was recorded.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def dumps(obj: Any, *, indent: bool = False) -> bytes:
    """``obj`` as UTF-8 JSON (two-space ``indent`` for people), however deeply nested."""
    try:
        return orjson.dumps(obj, option=orjson.OPT_INDENT_2 if indent else 0)
    except orjson.JSONEncodeError:
        text = json.dumps(
            obj,
            ensure_ascii=False,
            indent=2 if indent else None,
            separators=None if indent else (",", ":"),
        )
        return text.encode("utf-8", "surrogatepass")


def dumps_text(obj: Any, *, indent: bool = False) -> str:
    return dumps(obj, indent=indent).decode("utf-8", "replace")
