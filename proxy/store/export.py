"""Export a session (up to a turn) as portable JSON, a request body for another
model's API (OpenAI chat, OpenAI Responses, Anthropic Messages, Ollama ``/api/chat``),
or Markdown; ``native`` is the body in the wire format the turn was recorded in.

The bodies carry the original history by default; with ``sent`` they carry what a
turn actually sent (its forwarded messages and request fields), compression and all.
A turn's fields go into a body of its own format as they are; into another format
only the ones that mean the same there (the output limit, temperature, top_p).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from proxy.store import anthropic_messages, markdown, ollama_chat, portable, responses_input
from proxy.store.base import StoreReader
from proxy.store.errors import InvalidDocument

Format = Literal["portable", "openai", "responses", "anthropic", "ollama", "native", "markdown"]
FORMATS: tuple[Format, ...] = (
    "portable", "openai", "responses", "anthropic", "ollama", "native", "markdown",
)  # fmt: skip
BODY_FORMATS: tuple[Format, ...] = ("openai", "responses", "anthropic", "ollama", "native")
NATIVE: dict[str, Format] = {"chat": "openai", "responses": "responses", "anthropic": "anthropic"}
"""The body format of each wire format a turn can be recorded in (``TurnRecord.wire``)."""
OWN_WIRE: dict[str, str] = {v: k for k, v in NATIVE.items()}
DEFAULT_MAX_TOKENS = 4096
"""The Messages API requires ``max_tokens``; this when the turn did not set one."""
_SHARED = ("temperature", "top_p")
_LIMITS = ("max_tokens", "max_completion_tokens", "max_output_tokens")
_NOT_WRITTEN_BACK = ("system", "thinking")
"""A Messages turn's fields an Anthropic body leaves out: ``system`` is what the messages
hold (compressed or not), and ``thinking`` would ask for thinking blocks in the history
that cannot be written back (the store keeps their text, not their signatures)."""


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
    wire = str(last.get("wire") or "chat")
    if sent:
        messages = last["forwarded"] if last["forwarded"] is not None else last["history"]
        return body(fmt, last["model"], messages, last["request_params"], wire)
    return body(fmt, last["model"], [m["message"] for m in doc["messages"]], {}, wire)


def history(reader: StoreReader, ref: str) -> tuple[list[dict[str, Any]], str]:
    """A session's final history (its last turn's history and reply) and the wire
    format that turn was recorded in."""
    _, turns = reader.turns(ref)
    last = turns[-1]
    reply = [last["reply"]] if last["reply"] is not None else []
    return [*last["history"], *reply], str(last.get("wire") or "chat")


def native(wire: str) -> Format:
    """The body format a turn recorded in ``wire`` is exported in by ``native``
    (a format handoff does not know: OpenAI chat, which the messages are)."""
    return NATIVE.get(wire, "openai")


def body(
    fmt: Format,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
    wire: str = "chat",
) -> dict[str, Any]:
    """A request for ``fmt``'s chat API (``native``: ``wire``'s own) from a turn
    recorded in ``wire``: ``params`` (the turn's other fields) kept as they are in a
    body of its own format, and carried by :func:`carried` into another."""
    if fmt == "native":
        fmt = native(wire)
    if OWN_WIRE.get(fmt) != wire:
        params = carried(params, fmt)
    if fmt == "openai":
        return {"model": model, "messages": [dict(m) for m in messages], **params}
    if fmt == "responses":
        return responses_input.request_body(model, messages, params)
    if fmt == "ollama":
        return ollama_chat.chat_body(model, messages)
    system, converted = anthropic_messages.from_openai(messages)
    limit = params.get("max_tokens") or DEFAULT_MAX_TOKENS
    kept = {k: v for k, v in params.items() if k not in _NOT_WRITTEN_BACK}
    out: dict[str, Any] = {"model": model, **kept, "max_tokens": limit}
    if system:
        out["system"] = system
    out["messages"] = converted
    return out


def carried(params: Mapping[str, Any], fmt: Format) -> dict[str, Any]:
    """The fields of another format's request that mean the same in ``fmt``'s: the
    output limit (under ``fmt``'s name for it), temperature and top_p."""
    out = {k: params[k] for k in _SHARED if k in params}
    limit = next((params[k] for k in _LIMITS if params.get(k)), None)
    if limit is not None:
        out["max_output_tokens" if fmt == "responses" else "max_tokens"] = limit
    return out
