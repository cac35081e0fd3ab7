"""OpenAI's chat prompt accounting, parametrised by how text is measured.

The formulas are the OpenAI cookbook's ("How to count tokens with tiktoken"): 3
tokens a message, 1 more for ``name``, 3 to prime the reply; tool definitions cost
``func_init`` each plus their ``name:description`` and ``key:type:description``
lines, and ``func_end`` once. Everything is a sum of ``measure(text)`` terms with
non-negative weights plus constants, so measuring with UTF-8 byte length (a token
covers at least one byte) and charging every image its worst case gives an upper
bound of the exact count with the same code.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

Measure = Callable[[str], int]
ImageMeasure = Callable[[Mapping[str, Any]], int]
"""Tokens for one ``image_url`` content part."""

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
TOKENS_PER_TOOL_CALL = 3  # not published; the call's framing, measured on gpt-4o
RESPONSE_FORMAT_OVERHEAD = 3  # not published; schema text is counted in full


@dataclass(frozen=True, slots=True)
class ToolConstants:
    """The cookbook's per-encoding constants for tool definitions."""

    func_init: int
    prop_init: int = 3
    prop_key: int = 3
    enum_init: int = -3
    enum_item: int = 3
    func_end: int = 12


O200K_TOOLS = ToolConstants(func_init=7)
CL100K_TOOLS = ToolConstants(func_init=10)


def message_tokens(msg: Mapping[str, Any], measure: Measure, image: ImageMeasure) -> int:
    """One message without the reply priming."""
    total = TOKENS_PER_MESSAGE
    for key, value in msg.items():
        if isinstance(value, str):
            total += measure(value)
            if key == "name":
                total += TOKENS_PER_NAME
        elif key == "content" and isinstance(value, list):
            total += _parts_tokens(value, measure, image)
        elif key == "tool_calls" and isinstance(value, list):
            for call in value:
                fn = call.get("function") if isinstance(call, Mapping) else None
                if isinstance(fn, Mapping):
                    total += TOKENS_PER_TOOL_CALL + _strings(fn, ("name", "arguments"), measure)
        elif key == "function_call" and isinstance(value, Mapping):
            total += _strings(value, ("name", "arguments"), measure)
    return total


def _parts_tokens(parts: list[Any], measure: Measure, image: ImageMeasure) -> int:
    total = 0
    for part in parts:
        if not isinstance(part, Mapping):
            continue
        kind = part.get("type")
        if kind == "image_url":
            total += image(part)
        elif kind == "text" and isinstance(part.get("text"), str):
            total += measure(part["text"])
        else:
            total += sum(measure(v) for k, v in part.items() if k != "type" and isinstance(v, str))
    return total


def _strings(obj: Mapping[str, Any], keys: Sequence[str], measure: Measure) -> int:
    return sum(measure(obj[k]) for k in keys if isinstance(obj.get(k), str))


def tools_tokens(
    tools: Sequence[Any], measure: Measure, consts: ToolConstants, wrapped: bool = True
) -> int:
    """``tools`` (``wrapped``: ``{"type": "function", "function": {...}}``) or legacy
    ``functions`` definitions; JSON-schema keywords beyond the cookbook's are
    counted as their JSON text so nested parameters are not free."""
    total = 0
    for tool in tools:
        fn = tool.get("function") if wrapped and isinstance(tool, Mapping) else tool
        if not isinstance(fn, Mapping):
            continue
        total += consts.func_init
        desc = _text(fn.get("description")).removesuffix(".")
        total += measure(f"{_text(fn.get('name'))}:{desc}")
        params = fn.get("parameters")
        props = params.get("properties") if isinstance(params, Mapping) else None
        if isinstance(props, Mapping) and props:
            total += consts.prop_init
            for key, prop in props.items():
                total += consts.prop_key + _property_tokens(str(key), prop, measure, consts)
    if total:
        total += consts.func_end
    return total


def _property_tokens(key: str, prop: Any, measure: Measure, consts: ToolConstants) -> int:
    if not isinstance(prop, Mapping):
        return measure(f"{key}::")
    total = 0
    enum = prop.get("enum")
    if isinstance(enum, list):
        total += consts.enum_init
        for item in enum:
            total += consts.enum_item + measure(item if isinstance(item, str) else _json(item))
    ptype = prop.get("type")
    ptype_text = ptype if isinstance(ptype, str) else _json(ptype) if ptype else ""
    desc = _text(prop.get("description")).removesuffix(".")
    total += measure(f"{key}:{ptype_text}:{desc}")
    extra = {k: v for k, v in prop.items() if k not in ("type", "description", "enum")}
    if extra:
        total += measure(_json(extra))
    return max(total, 0)


def response_format_tokens(rf: Any, measure: Measure) -> int:
    """A ``json_schema`` response format: its schema's JSON text plus framing."""
    if not isinstance(rf, Mapping) or rf.get("type") != "json_schema":
        return 0
    return RESPONSE_FORMAT_OVERHEAD + measure(_json(rf.get("json_schema")))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _json(value: Any) -> str:
    return orjson.dumps(value, default=str).decode()
