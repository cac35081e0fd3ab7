"""Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Each line is a ``RolloutLine``: ``{"timestamp", "type", "payload"}`` with type
``session_meta`` (id, cwd, base instructions), ``turn_context`` (the model from then
on), ``response_item`` (a Responses API item: ``message``, ``reasoning``,
``function_call`` / ``function_call_output``, ``custom_tool_call`` / ``…_output``,
``local_shell_call``), ``compacted`` (Codex summarised the history; the full history
is kept and the compaction noted) or ``event_msg`` (UI events, which repeat items).
Older rollouts wrote a bare meta line and bare items; both are read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.store.importers.base import (
    Conversation,
    Problem,
    Reading,
    first_asked,
    first_json_line,
    json_lines,
    text_message,
    when,
)
from proxy.store.jsonout import dumps_text

KIND = "codex"
_LINE_TYPES = {"session_meta", "response_item", "turn_context", "compacted", "event_msg"}
_ITEM_TYPES = {
    "message",
    "reasoning",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "web_search_call",
}


def detect(path: Path, head: bytes) -> bool:
    line = first_json_line(head)
    if line is None:
        return False
    if line.get("type") in _LINE_TYPES and "payload" in line:
        return True
    return path.name.startswith("rollout-") and ("instructions" in line or "id" in line)


def read(path: Path) -> Reading:
    reading = Reading()
    state = _State(Conversation(KIND, path.stem.removeprefix("rollout-")))
    for n, line in json_lines(path, reading):
        kind, payload = line.get("type"), line.get("payload")
        if kind not in _LINE_TYPES:  # an old rollout: bare items, a bare meta line
            kind, payload = ("response_item", line) if kind in _ITEM_TYPES else ("meta", line)
        if not isinstance(payload, dict):
            reading.problems.append(Problem(f"{path}:{n}", f"{kind} without a payload object"))
            continue
        stamp = when(line.get("timestamp")) or when(payload.get("timestamp"))
        try:
            state.line(str(kind), payload, stamp)
        except (KeyError, TypeError, AttributeError) as e:
            reading.problems.append(Problem(f"{path}:{n}", f"unexpected {kind} record ({e})"))
    if state.conv.messages:
        state.conv.title = first_asked(state.conv)
        reading.conversations.append(state.conv)
    return reading


class _State:
    def __init__(self, conv: Conversation) -> None:
        self.conv = conv
        self.model: str | None = None
        self.reasoning: list[str] = []
        self.open_calls = False  # the last message is an assistant turn taking more calls

    def line(self, kind: str, p: dict[str, Any], stamp: float | None) -> None:
        if kind in ("session_meta", "meta"):
            self._meta(p, stamp)
        elif kind == "turn_context":
            self.model = p.get("model") or self.model
        elif kind == "compacted":
            self.conv.notes.append("Codex compacted the history here; its summary is left out")
        elif kind == "response_item":
            self._item(p, stamp)

    def _meta(self, p: dict[str, Any], stamp: float | None) -> None:
        if p.get("id"):
            self.conv.source_id = str(p["id"])
        base = p.get("base_instructions")
        text = base.get("text") if isinstance(base, dict) else p.get("instructions")
        if isinstance(text, str) and text and not self.conv.messages:
            self.conv.add({"role": "system", "content": text}, stamp)

    def _item(self, p: dict[str, Any], stamp: float | None) -> None:
        kind = p.get("type")
        if kind == "message":
            self._message(p, stamp)
        elif kind == "reasoning":
            summary = p.get("summary") or []
            self.reasoning.extend(str(s.get("text", "")) for s in summary if isinstance(s, dict))
        elif kind in ("function_call", "custom_tool_call", "local_shell_call"):
            self._call(p, stamp)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            msg = {"role": "tool", "tool_call_id": str(p["call_id"]), "content": _output(p)}
            self.conv.add(msg, stamp)
            self.open_calls = False

    def _message(self, p: dict[str, Any], stamp: float | None) -> None:
        role = "system" if p.get("role") == "developer" else str(p.get("role", "user"))
        parts = [_part(c) for c in p.get("content") or [] if isinstance(c, dict)]
        msg = text_message(role, [x for x in parts if x is not None])
        if role == "assistant":
            self._reason(msg)
        self.conv.add(msg, stamp, self.model if role == "assistant" else None)
        self.open_calls = role == "assistant"

    def _call(self, p: dict[str, Any], stamp: float | None) -> None:
        if p.get("type") == "local_shell_call":
            name, args = "local_shell", dumps_text(p.get("action", {}))
        elif p.get("type") == "custom_tool_call":
            name, args = str(p["name"]), str(p.get("input", ""))
        else:
            name, args = str(p["name"]), str(p.get("arguments", ""))
        call: dict[str, Any] = {
            "id": str(p.get("call_id") or p.get("id")),
            "type": "function",
            "function": {"name": name, "arguments": args},
        }
        if self.open_calls and self.conv.messages[-1]["role"] == "assistant":
            self.conv.messages[-1].setdefault("tool_calls", []).append(call)
            return
        msg: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        self._reason(msg)
        self.conv.add(msg, stamp, self.model)
        self.open_calls = True

    def _reason(self, msg: dict[str, Any]) -> None:
        if self.reasoning:
            msg["reasoning_content"] = "\n\n".join(self.reasoning)
            self.reasoning = []


def _part(c: dict[str, Any]) -> dict[str, Any] | None:
    kind = c.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": str(c.get("text", ""))}
    if kind == "input_image":
        return {"type": "image_url", "image_url": {"url": str(c.get("image_url", ""))}}
    return None


def _output(p: dict[str, Any]) -> str:
    """A call's output: a string, ``{"content", "success"}`` (older), or content items
    (``input_text``, and ``input_image``, which a tool message cannot hold: marked)."""
    out = p.get("output")
    if isinstance(out, dict):
        out = out.get("content", out)
    if isinstance(out, list):
        return "\n".join(
            str(c.get("text", "")) if c.get("type") != "input_image" else "[image]"
            for c in out
            if isinstance(c, dict)
        )
    return out if isinstance(out, str) else dumps_text(out)
