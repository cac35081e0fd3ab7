"""What an importer yields: conversations (or whole portable documents) and problems.

A :class:`Conversation` is another tool's saved conversation turned into the store's
OpenAI chat messages, each with the time it was written and the model that wrote it
(assistant messages); ``key`` names it in its source, so importing it twice adds it once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from proxy.store.messages import message_text, squeeze


@dataclass(slots=True)
class Conversation:
    kind: str
    source_id: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    stamps: list[float | None] = field(default_factory=list)
    models: list[str | None] = field(default_factory=list)
    title: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.source_id}"

    def add(self, message: dict[str, Any], stamp: float | None, model: str | None = None) -> None:
        self.messages.append(message)
        self.stamps.append(stamp)
        self.models.append(model)


@dataclass(frozen=True, slots=True)
class Problem:
    """Something not imported: ``where`` is ``file`` or ``file:line``."""

    where: str
    reason: str


@dataclass(slots=True)
class Reading:
    conversations: list[Conversation] = field(default_factory=list)
    documents: list[dict[str, Any]] = field(default_factory=list)  # portable, as read
    problems: list[Problem] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Importer:
    """One format: ``detect(path, head)`` on a file's first bytes, ``read(path)``."""

    kind: str
    detect: Callable[[Path, bytes], bool]
    read: Callable[[Path], Reading]


def when(value: Any) -> float | None:
    """An ISO 8601 string or a unix time as a unix time (None when neither)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str) and value:
        try:
            return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def json_lines(path: Path, reading: Reading) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each JSON object line; a malformed line becomes a
    problem naming the file and line, and reading goes on."""
    with path.open("rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                reading.problems.append(Problem(f"{path}:{n}", f"not valid JSON ({e})"))
                continue
            if not isinstance(obj, dict):
                reading.problems.append(Problem(f"{path}:{n}", "not a JSON object"))
                continue
            yield n, obj


def first_json_line(head: bytes) -> dict[str, Any] | None:
    """The first line of ``head`` as a JSON object, if it is one."""
    line = head.split(b"\n", 1)[0]
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return obj if isinstance(obj, dict) else None


def load_json(path: Path, reading: Reading) -> Any:
    """The file's JSON, or None with the problem recorded."""
    try:
        return orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError as e:
        reading.problems.append(Problem(str(path), f"not valid JSON ({e})"))
    except OSError as e:
        reading.problems.append(Problem(str(path), f"cannot read: {e.strerror}"))
    return None


def text_message(role: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """A message whose content is its one text part's text, else the parts."""
    if len(parts) == 1 and parts[0].get("type") == "text":
        return {"role": role, "content": parts[0]["text"]}
    return {"role": role, "content": parts}


def injected(text: str) -> bool:
    """Whether a user message is a block a client wrote in (``<environment_context>…``,
    ``<user_instructions>…``, ``<command-name>…``), not what the person asked."""
    text = text.strip()
    return text.startswith("<") and text.endswith(">")


def first_asked(conv: Conversation, skip: set[int] | None = None) -> str:
    """The first user message the person wrote (skipping ``skip`` and injected blocks)."""
    for i, m in enumerate(conv.messages):
        if m.get("role") == "user" and i not in (skip or set()):
            text = message_text(m)
            if text.strip() and not injected(text):
                return squeeze(text)
    return ""
