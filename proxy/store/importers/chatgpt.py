"""A ChatGPT data export's ``conversations.json``.

A list of conversations, each a tree: ``mapping`` of node id → ``{message, parent,
children}``, and ``current_node``, the leaf of the branch the person last saw. That
branch is read from the leaf up. The root's ``message`` is null, and system nodes that
are empty or hidden carry nothing; both are skipped. A message's ``content`` is
``text`` / ``multimodal_text`` (strings and ``image_asset_pointer`` parts), ``code``
(a call to the tool in ``recipient``), ``execution_output`` and others from tools,
``thoughts`` (reasoning, kept on the next reply), ``user_editable_context`` (the
person's custom instructions, hidden but sent: a system message).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.store.importers.base import Conversation, Problem, Reading, load_json, when

KIND = "chatgpt"


def detect(path: Path, head: bytes) -> bool:
    start = head.lstrip()[:1]
    return start == b"[" and b'"mapping"' in head and b'"current_node"' in head


def read(path: Path) -> Reading:
    reading = Reading()
    data = load_json(path, reading)
    if data is None:
        return reading
    convs = data if isinstance(data, list) else [data]
    for i, c in enumerate(convs):
        where = f"{path}:[{i}]"
        if not isinstance(c, dict) or not isinstance(c.get("mapping"), dict):
            reading.problems.append(Problem(where, "not a conversation (no mapping)"))
            continue
        try:
            conv = _conversation(c)
        except (KeyError, TypeError, AttributeError) as e:
            reading.problems.append(Problem(where, f"unexpected conversation shape ({e})"))
            continue
        if conv.messages:
            reading.conversations.append(conv)
        else:
            reading.problems.append(Problem(where, "no messages on its current branch"))
    return reading


def _conversation(c: dict[str, Any]) -> Conversation:
    conv = Conversation(KIND, str(c.get("conversation_id") or c.get("id") or c.get("title")))
    conv.title = str(c.get("title") or "")
    default_model = c.get("default_model_slug")
    state = _Branch(conv, default_model if isinstance(default_model, str) else None)
    for node in _branch(c["mapping"], c.get("current_node")):
        msg = node.get("message")
        if isinstance(msg, dict):
            state.message(msg)
    return conv


def _branch(mapping: dict[str, Any], leaf: Any) -> list[dict[str, Any]]:
    if leaf not in mapping:  # no current_node: the newest leaf
        leaves = [k for k, n in mapping.items() if not n.get("children")]
        leaf = leaves[-1] if leaves else None
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    while isinstance(leaf, str) and leaf in mapping and leaf not in seen:
        seen.add(leaf)
        out.append(mapping[leaf])
        leaf = mapping[leaf].get("parent")
    return out[::-1]


class _Branch:
    def __init__(self, conv: Conversation, model: str | None) -> None:
        self.conv = conv
        self.model = model
        self.thoughts: list[str] = []
        self.call: str | None = None  # the id of a tool call awaiting its output

    def message(self, m: dict[str, Any]) -> None:
        role = (m.get("author") or {}).get("role")
        content = m.get("content") or {}
        meta = m.get("metadata") or {}
        stamp = when(m.get("create_time"))
        kind = content.get("content_type")
        if kind == "thoughts":
            self.thoughts.extend(str(t.get("content", "")) for t in content.get("thoughts", []))
            return
        if kind == "user_editable_context":  # custom instructions: hidden, but sent
            text = "\n\n".join(
                str(content[k]) for k in ("user_profile", "user_instructions") if content.get(k)
            )
            if text:
                self.conv.add({"role": "system", "content": text}, stamp)
            return
        if meta.get("is_visually_hidden_from_conversation") or kind == "reasoning_recap":
            return
        parts = _parts(content)
        if role == "tool":
            self._tool_output(m, parts, stamp)
        elif role == "assistant" and m.get("recipient", "all") != "all":
            self._tool_call(m, parts, stamp, meta)
        elif parts and role in ("user", "assistant", "system"):
            msg: dict[str, Any] = {"role": role, "content": _content(parts)}
            if role == "assistant" and self.thoughts:
                msg["reasoning_content"] = "\n\n".join(self.thoughts)
                self.thoughts = []
            model = (meta.get("model_slug") or self.model) if role == "assistant" else None
            self.conv.add(msg, stamp, model)

    def _tool_call(
        self, m: dict[str, Any], parts: list[dict[str, Any]], stamp: float | None, meta: Any
    ) -> None:
        self.call = f"call_{m.get('id', len(self.conv.messages))}"
        fn = {"name": str(m["recipient"]), "arguments": _text(parts)}
        msg = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": self.call, "type": "function", "function": fn}],
        }
        self.conv.add(msg, stamp, meta.get("model_slug") or self.model)

    def _tool_output(
        self, m: dict[str, Any], parts: list[dict[str, Any]], stamp: float | None
    ) -> None:
        if self.call is None:  # a tool that spoke unasked (a browsing display, say)
            name = str((m.get("author") or {}).get("name") or "tool")
            self._tool_call({"id": m.get("id"), "recipient": name}, [], stamp, {})
        msg = {"role": "tool", "tool_call_id": self.call, "content": _text(parts)}
        self.conv.add(msg, stamp)
        self.call = None


def _parts(content: dict[str, Any]) -> list[dict[str, Any]]:
    kind = content.get("content_type")
    if kind in ("text", "multimodal_text"):
        out: list[dict[str, Any]] = []
        for p in content.get("parts") or []:
            if isinstance(p, str):
                if p:
                    out.append({"type": "text", "text": p})
            elif isinstance(p, dict) and p.get("content_type") == "image_asset_pointer":
                url = str(p.get("asset_pointer", ""))
                out.append({"type": "image_url", "image_url": {"url": url}})
        return out
    text = content.get("text") or content.get("result")
    return [{"type": "text", "text": str(text)}] if text else []


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    if all(p["type"] == "text" for p in parts):
        return "\n\n".join(p["text"] for p in parts)
    return parts


def _text(parts: list[dict[str, Any]]) -> str:
    return "\n\n".join(p["text"] for p in parts if p["type"] == "text")
