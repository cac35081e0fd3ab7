"""Export a session (up to a turn) as portable JSON, a request body for another
model's API (OpenAI, Anthropic Messages, Ollama ``/api/chat``), or Markdown.

The bodies carry the original history by default; with ``sent`` they carry what a
turn actually sent (its forwarded messages and request fields), compression and all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from proxy.store import anthropic_messages, markdown, ollama_chat, portable
from proxy.store.base import StoreReader
from proxy.store.errors import InvalidDocument

Format = Literal["portable", "openai", "anthropic", "ollama", "markdown"]
FORMATS: tuple[Format, ...] = ("portable", "openai", "anthropic", "ollama", "markdown")
BODY_FORMATS: tuple[Format, ...] = ("openai", "anthropic", "ollama")
DEFAULT_MAX_TOKENS = 4096
"""The Messages API requires ``max_tokens``; this when the turn did not set one."""


def export(
    reader: StoreReader,
    ref: str,
    fmt: Format,
    turn: int | None = None,
    now: float | None = None,
    sent: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any] | str:
    """A dict (portable and the request bodies) or a string (markdown); ``progress(done,
    total)`` is told of each turn read."""
    info, turns = reader.turns(ref, turn, progress)
    memory = reader.memory(info["id"]) if fmt == "portable" else None
    doc = portable.build(info, turns, time.time() if now is None else now, memory)
    if sent and fmt not in BODY_FORMATS:
        raise InvalidDocument("--sent", f"applies to {', '.join(BODY_FORMATS)}, not {fmt}")
    if fmt == "portable":
        return doc
    if fmt == "markdown":
        return markdown.render(doc)
    last = turns[-1]
    if sent:
        messages = last["forwarded"] if last["forwarded"] is not None else last["history"]
        return body(fmt, last["model"], messages, last["request_params"])
    return body(fmt, last["model"], [m["message"] for m in doc["messages"]], {})


def body(
    fmt: Format,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
) -> dict[str, Any]:
    """A request for ``fmt``'s chat API: ``params`` (the turn's other fields) kept in
    an OpenAI body as they are, ``max_tokens`` in an Anthropic one."""
    if fmt == "openai":
        return {"model": model, "messages": [dict(m) for m in messages], **params}
    if fmt == "ollama":
        return ollama_chat.chat_body(model, messages)
    system, converted = anthropic_messages.from_openai(messages)
    limit = params.get("max_tokens") or params.get("max_completion_tokens") or DEFAULT_MAX_TOKENS
    out: dict[str, Any] = {"model": model, "max_tokens": limit}
    if system:
        out["system"] = system
    out["messages"] = converted
    return out
