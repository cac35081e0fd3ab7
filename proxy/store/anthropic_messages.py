"""Anthropic Messages ↔ the store's OpenAI chat messages, both ways.

Imports (Claude Code transcripts, Anthropic request JSON) read ``tool_use`` /
``tool_result`` / ``image`` / ``thinking`` blocks into OpenAI ``tool_calls``, ``tool``
messages, ``image_url`` parts and ``reasoning_content``; the export writes them back,
the system prompt kept apart as the Messages API wants it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from proxy.store.jsonout import dumps_text

_DATA_URL = re.compile(r"^data:(?P<media>[\w.+-]+/[\w.+-]+);base64,(?P<data>.*)$", re.S)


def to_openai(messages: Sequence[Mapping[str, Any]], system: Any = None) -> list[dict[str, Any]]:
    """OpenAI chat messages for an Anthropic ``system`` and ``messages``."""
    out: list[dict[str, Any]] = []
    text = block_text(system) if isinstance(system, list) else system
    if isinstance(text, str) and text:
        out.append({"role": "system", "content": text})
    for m in messages:
        out.extend(message_to_openai(m))
    return out


def message_to_openai(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One Anthropic message as one or more OpenAI messages (tool results split out)."""
    role = str(m.get("role", "user"))
    content = m.get("content")
    if not isinstance(content, list):
        return [{"role": role, "content": "" if content is None else content}]
    if role == "assistant":
        return [_assistant(content)]
    out: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "tool_result":
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": str(block.get("tool_use_id", "")),
                    "content": _result_text(block),
                }
            )
        else:
            part = _part(block)
            if part is not None:
                parts.append(part)
    if parts:
        out.append({"role": role, "content": _collapse(parts)})
    return out


def _assistant(content: Sequence[Any]) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    thinking: list[str] = []
    for block in content:
        if not isinstance(block, Mapping):
            continue
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "tool_use":
            calls.append(
                {
                    "id": str(block.get("id", "")),
                    "type": "function",
                    "function": {
                        "name": str(block.get("name", "")),
                        "arguments": dumps_text(block.get("input", {})),
                    },
                }
            )
        elif kind == "thinking":
            thinking.append(str(block.get("thinking", "")))
    msg: dict[str, Any] = {"role": "assistant", "content": "\n\n".join(texts) or None}
    if calls:
        msg["tool_calls"] = calls
    if thinking:
        msg["reasoning_content"] = "\n\n".join(thinking)
    return msg


def _part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": str(block.get("text", ""))}
    if kind == "image":
        src = block.get("source") or {}
        if src.get("type") == "base64":
            url = f"data:{src.get('media_type', 'image/png')};base64,{src.get('data', '')}"
        else:
            url = str(src.get("url", ""))
        return {"type": "image_url", "image_url": {"url": url}}
    return None


def _collapse(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if len(parts) == 1 and parts[0]["type"] == "text":
        return str(parts[0]["text"])
    return parts


def _result_text(block: Mapping[str, Any]) -> str:
    content = block.get("content")
    if isinstance(content, list):
        return block_text(content)
    return "" if content is None else str(content)


def block_text(blocks: Sequence[Any]) -> str:
    """The text blocks of a content list, joined."""
    return "\n".join(
        str(b.get("text", "")) for b in blocks if isinstance(b, Mapping) and b.get("type") == "text"
    )


# -- OpenAI → Anthropic ------------------------------------------------------


def from_openai(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """``(system, messages)`` for the Messages API: system and developer text apart,
    tool calls as ``tool_use``, tool replies as ``tool_result`` in a user turn,
    consecutive same-role turns merged (the API wants them alternating)."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role in ("system", "developer"):
            system.append(_text_of(m.get("content")))
            continue
        if role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": str(m.get("tool_call_id", "")),
                "content": _text_of(m.get("content")),
            }
            _append(out, "user", [block])
        elif role == "assistant":
            _append(out, "assistant", _assistant_blocks(m))
        else:
            _append(out, "user", _blocks(m.get("content")))
    return ("\n\n".join(s for s in system if s) or None), out


def _append(out: list[dict[str, Any]], role: str, blocks: list[dict[str, Any]]) -> None:
    if not blocks:
        return
    if out and out[-1]["role"] == role:
        out[-1]["content"].extend(blocks)
    else:
        out.append({"role": role, "content": blocks})


def _assistant_blocks(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    blocks = _blocks(m.get("content"))
    for call in m.get("tool_calls") or []:
        fn = call.get("function") or {}
        blocks.append(
            {
                "type": "tool_use",
                "id": str(call.get("id", "")),
                "name": str(fn.get("name", "")),
                "input": _arguments(fn.get("arguments")),
            }
        )
    return blocks


def _arguments(args: Any) -> Any:
    if isinstance(args, str):
        try:
            value = orjson.loads(args)
        except orjson.JSONDecodeError:
            return {"input": args}
        return value if isinstance(value, dict) else {"input": value}
    return args if isinstance(args, dict) else {}


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "text":
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
        elif part.get("type") == "image_url":
            blocks.append({"type": "image", "source": image_source(part)})
    return blocks


def image_source(part: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI ``image_url`` part as an Anthropic image source: base64 for a data
    URL, else the URL."""
    image = part.get("image_url")
    url = str(image.get("url", "") if isinstance(image, Mapping) else image or "")
    found = _DATA_URL.match(url)
    if found:
        return {"type": "base64", "media_type": found["media"], "data": found["data"]}
    return {"type": "url", "url": url}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return block_text(content)
    return ""
