"""The store's OpenAI chat messages as an Ollama ``/api/chat`` body.

Ollama wants ``content`` as a string, images as base64 in ``images`` (a data URL's
payload; a remote image cannot be inlined offline, so its URL is left in the text),
tool calls with ``arguments`` as an object, a tool's reply named by ``tool_name``,
and reasoning as ``thinking``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

_DATA_URL = re.compile(r"^data:[\w.+-]+/[\w.+-]+;base64,(?P<data>.*)$", re.S)


def chat_body(model: str, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A non-streaming ``/api/chat`` request for ``messages``."""
    names: dict[str, str] = {}
    out = [_message(m, names) for m in messages]
    return {"model": model, "messages": out, "stream": False}


def _message(m: Mapping[str, Any], names: dict[str, str]) -> dict[str, Any]:
    role = "system" if m.get("role") == "developer" else str(m.get("role", "user"))
    texts, images = _content(m.get("content"))
    msg: dict[str, Any] = {"role": role, "content": "\n\n".join(texts)}
    if images:
        msg["images"] = images
    calls = m.get("tool_calls") or []
    if calls:
        msg["tool_calls"] = [_call(c, names) for c in calls]
    if role == "tool" and m.get("tool_call_id") in names:
        msg["tool_name"] = names[m["tool_call_id"]]
    if m.get("reasoning_content"):
        msg["thinking"] = m["reasoning_content"]
    return msg


def _call(call: Mapping[str, Any], names: dict[str, str]) -> dict[str, Any]:
    fn = call.get("function") or {}
    name = str(fn.get("name", ""))
    names[str(call.get("id", ""))] = name
    args: Any = fn.get("arguments", {})
    if isinstance(args, str):
        try:
            args = orjson.loads(args) if args else {}
        except orjson.JSONDecodeError:
            args = {"input": args}
    return {"function": {"name": name, "arguments": args if isinstance(args, dict) else {}}}


def _content(content: Any) -> tuple[list[str], list[str]]:
    if isinstance(content, str):
        return [content], []
    texts: list[str] = []
    images: list[str] = []
    for part in content if isinstance(content, list) else []:
        if not isinstance(part, Mapping):
            continue
        if part.get("type") == "text":
            texts.append(str(part.get("text", "")))
        elif part.get("type") == "image_url":
            image = part.get("image_url")
            url = str(image.get("url", "") if isinstance(image, Mapping) else image or "")
            found = _DATA_URL.match(url)
            if found:
                images.append(found["data"])
            else:
                texts.append(f"[image: {url}]")
    return texts, images
