"""A conversation as Markdown, for people to read."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import orjson


def _when(ts: float | None) -> str:
    if ts is None:
        return ""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def message_md(m: Mapping[str, Any]) -> str:
    """One message: a heading with the role (and name), the text, tool calls as code."""
    role = str(m.get("role", "?"))
    name = m.get("name") or m.get("tool_call_id")
    lines = [f"### {role}" + (f" ({name})" if name else "")]
    content = m.get("content")
    if isinstance(content, str) and content:
        lines.append(content)
    elif isinstance(content, list):
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                lines.append(str(part.get("text", "")))
            elif isinstance(part, Mapping):
                lines.append(f"*[{part.get('type', 'part')}]*")
    for call in m.get("tool_calls") or ():
        fn = call.get("function", {}) if isinstance(call, Mapping) else {}
        lines.append(f"**tool call** `{fn.get('name', '?')}` ({call.get('id', '')})")
        lines.append("```json\n" + str(fn.get("arguments", "")) + "\n```")
    return "\n\n".join(lines)


def decision_md(t: Mapping[str, Any]) -> str:
    d = t.get("decision") or {}
    parts = [f"turn {t['turn']}", t["model"], str(d.get("action", "recorded"))]
    if d.get("tokens") is not None:
        sent = d.get("forwarded_tokens")
        parts.append(f"{d['tokens']} tokens" + (f" → {sent}" if sent is not None else ""))
    if d.get("window"):
        parts.append(f"window {d['window']}")
    if d.get("policies"):
        parts.append("policies " + ", ".join(d["policies"]))
    if t.get("handoff_from"):
        parts.append(f"**handoff {t['handoff_from']} → {t['model']}**")
    if t.get("error"):
        parts.append("error " + orjson.dumps(t["error"]).decode()[:120])
    return "- " + " · ".join(parts)


def render(doc: Mapping[str, Any]) -> str:
    """Markdown for a portable document (see ``portable.build``)."""
    turns: Sequence[Mapping[str, Any]] = doc["turns"]
    out = [
        f"# {doc['title'] or 'Conversation ' + doc['conversation_id']}",
        f"Conversation `{doc['conversation_id']}` · models: {', '.join(doc['models'])}"
        f" · exported {doc['exported_at']}",
        "## Turns",
        "\n".join(decision_md(t) for t in turns),
        "## Messages",
    ]
    for entry in doc["messages"]:
        stamp = _when(entry.get("timestamp"))
        out.append(message_md(entry["message"]) + (f"\n\n<sub>{stamp}</sub>" if stamp else ""))
    return "\n\n".join(out) + "\n"
