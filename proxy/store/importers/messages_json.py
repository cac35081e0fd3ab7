"""Plain chat JSON: an OpenAI messages request, or an Anthropic Messages one.

OpenAI: ``{"model", "messages": [...]}`` or a bare list of messages. Anthropic:
``{"model", "system", "messages"}`` whose content blocks are ``text`` / ``image`` /
``tool_use`` / ``tool_result`` / ``thinking``. Neither has an id, so a conversation is
named by its content's digest: the same file imported twice is one session.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import orjson

from proxy.store.anthropic_messages import to_openai
from proxy.store.importers.base import Conversation, Problem, Reading, load_json
from proxy.store.jsonout import dumps_text

_ANTHROPIC_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking"}
_ANTHROPIC_BYTES = tuple(f'"type": "{b}"'.encode() for b in _ANTHROPIC_BLOCKS) + tuple(
    f'"type":"{b}"'.encode() for b in _ANTHROPIC_BLOCKS
)


def _shape(head: bytes) -> str | None:
    """ "openai", "anthropic" or None, from the parsed file when ``head`` holds all of
    it, else from its bytes."""
    try:
        data = orjson.loads(head)
    except orjson.JSONDecodeError:
        return _shape_of_bytes(head)
    body = {"messages": data} if isinstance(data, list) else data
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not all(
        isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages
    ):
        return None
    if "system" in body or any(_anthropic_block(m) for m in messages):
        return "anthropic"
    return "openai"


def _anthropic_block(m: dict[str, Any]) -> bool:
    content = m.get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict)
        and (b.get("type") in _ANTHROPIC_BLOCKS or (b.get("type") == "image" and "source" in b))
        for b in content
    )


def _shape_of_bytes(head: bytes) -> str | None:
    start = head.lstrip()[:1]
    if b'"role"' not in head or start not in (b"[", b"{"):
        return None
    if start == b"{" and b'"messages"' not in head:
        return None
    top = head.split(b'"messages"', 1)[0]
    anthropic = b'"system"' in top or any(b in head for b in _ANTHROPIC_BYTES)
    return "anthropic" if anthropic else "openai"


def detect_openai(path: Path, head: bytes) -> bool:
    return _shape(head) == "openai"


def detect_anthropic(path: Path, head: bytes) -> bool:
    return _shape(head) == "anthropic"


def read_openai(path: Path) -> Reading:
    return _read(path, "openai")


def read_anthropic(path: Path) -> Reading:
    return _read(path, "anthropic")


def _read(path: Path, kind: str) -> Reading:
    reading = Reading()
    data = load_json(path, reading)
    if data is None:
        return reading
    body = {"messages": data} if isinstance(data, list) else data
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages:
        reading.problems.append(Problem(str(path), "no messages list"))
        return reading
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            reading.problems.append(Problem(f"{path}:messages[{i}]", "a message needs a role"))
            return reading
    if kind == "anthropic":
        messages = to_openai(messages, body.get("system"))
    digest = hashlib.sha256(dumps_text(body).encode()).hexdigest()[:32]
    conv = Conversation(kind, digest)
    named = body.get("model")
    model = named if isinstance(named, str) else None
    for m in messages:
        conv.add(dict(m), None, model if m.get("role") == "assistant" else None)
    reading.conversations.append(conv)
    return reading
