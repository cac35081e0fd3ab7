"""Plain chat JSON: an OpenAI messages request, or an Anthropic Messages one.

OpenAI: ``{"model", "messages": [...]}`` or a bare list of messages. Anthropic:
``{"model", "system", "messages"}`` whose content blocks are ``text`` / ``image`` /
``tool_use`` / ``tool_result`` / ``thinking``. Neither has an id, so a conversation is
named by its content's digest: the same file imported twice is one session.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from proxy.store.anthropic_messages import to_openai
from proxy.store.importers.base import Conversation, Problem, Reading, load_json
from proxy.store.jsonout import dumps_text

_ANTHROPIC_BLOCKS = (b'"tool_use"', b'"tool_result"', b'"thinking"', b'"source"')


def _looks_anthropic(head: bytes) -> bool:
    return b'"system"' in head.split(b'"messages"', 1)[0] or any(
        b in head for b in _ANTHROPIC_BLOCKS
    )


def detect_openai(path: Path, head: bytes) -> bool:
    start = head.lstrip()[:1]
    return b'"role"' in head and (
        start == b"[" or (start == b"{" and b'"messages"' in head and not _looks_anthropic(head))
    )


def detect_anthropic(path: Path, head: bytes) -> bool:
    start = head.lstrip()[:1]
    return start == b"{" and b'"messages"' in head and _looks_anthropic(head)


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
