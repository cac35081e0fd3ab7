"""The store's OpenAI chat messages as an OpenAI Responses request (``POST /v1/responses``).

The leading system messages become ``instructions``; a later system or developer
message, and every user and assistant message, a ``message`` item with ``input_text``
(``output_text`` for the assistant) and ``input_image`` parts; an assistant's
``tool_calls`` ``function_call`` items and a tool's reply a ``function_call_output``,
paired by ``call_id``. Reasoning is left out: the store keeps only its summary text,
and a reasoning input item needs the id of a response the server stored or the
encrypted content it issued, which handoff does not keep, so it cannot be recreated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.ingress.responses_api import item_content, written_items


def from_openai(messages: Sequence[Mapping[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """``(instructions, input items)`` for ``messages``."""
    system: list[str] = []
    at = 0
    while at < len(messages) and messages[at].get("role") == "system":
        system.append(_text(messages[at].get("content")))
        at += 1
    items: list[dict[str, Any]] = []
    for m in messages[at:]:
        items.extend(_items(m))
    return ("\n\n".join(s for s in system if s) or None), items


def _items(m: Mapping[str, Any]) -> list[dict[str, Any]]:
    role = m.get("role")
    if role in ("tool", "function"):
        return written_items(m)
    if role == "assistant" and not m.get("tool_calls") and not m.get("content"):
        return []  # (nothing said: no empty message item)
    out: list[dict[str, Any]] = []
    for item in written_items({k: v for k, v in m.items() if k != "reasoning_content"}):
        if item["type"] == "message":
            item["content"] = _parts(item["content"], item["role"])
        out.append(item)
    return out


def _parts(content: Any, role: str) -> Any:
    """A message item's content as a list of parts (a string as one text part)."""
    if isinstance(content, str):
        content = item_content([{"type": "text", "text": content}], role)
    if role == "assistant" and isinstance(content, list):
        return [
            {**p, "annotations": p.get("annotations", [])}
            if isinstance(p, dict) and p.get("type") == "output_text"
            else p
            for p in content
        ]
    return content


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, Mapping) and p.get("type") in ("text", "input_text", "output_text")
        )
    return ""


def request_body(
    model: str, messages: Sequence[Mapping[str, Any]], params: Mapping[str, Any]
) -> dict[str, Any]:
    """A non-streaming Responses request for ``messages``; ``params`` are the request's
    other fields (a Responses turn's own, or ones carried over from another format)."""
    instructions, items = from_openai(messages)
    out: dict[str, Any] = {"model": model, **params}
    out.pop("instructions", None)  # (the messages hold it, compressed or not)
    if instructions is not None:
        out["instructions"] = instructions
    out["input"] = items
    return out
