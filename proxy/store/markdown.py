"""A conversation as Markdown, for people to read."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from proxy.store.jsonout import dumps_text
from proxy.store.messages import message_text, squeeze


def _when(ts: float | None) -> str:
    if ts is None:
        return ""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def message_md(m: Mapping[str, Any]) -> str:
    """One message: a heading with the role (and name), the text, tool calls as code.
    Whatever shape a recorded field has, it is shown (as JSON when it is not the usual)."""
    role = str(m.get("role", "?"))
    name = m.get("name") or m.get("tool_call_id")
    lines = [f"### {role}" + (f" ({name})" if name else "")]
    reasoning = m.get("reasoning_content")
    if isinstance(reasoning, str) and reasoning:
        lines.append("> *reasoning:* " + " ".join(reasoning.split()))
    content = m.get("content")
    if isinstance(content, str):
        lines.extend([content] if content else [])
    elif isinstance(content, list):
        lines.extend(_part_md(part) for part in content)
    elif content is not None:
        lines.append(_code(content))
    calls = m.get("tool_calls")
    for call in calls if isinstance(calls, list) else [] if calls is None else [calls]:
        lines.extend(_call_md(call))
    return "\n\n".join(lines)


def _part_md(part: Any) -> str:
    if not isinstance(part, Mapping):
        return _code(part)
    if part.get("type") == "text":
        return str(part.get("text", ""))
    return f"*[{part.get('type', 'part')}]*"


def _call_md(call: Any) -> list[str]:
    fn = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(fn, Mapping):
        return ["**tool call**", _code(call)]
    args = fn.get("arguments", "")
    call_id = call.get("id", "") if isinstance(call, Mapping) else ""
    return [
        f"**tool call** `{fn.get('name', '?')}` ({call_id})",
        _code(args if isinstance(args, str) else dumps_text(args)),
    ]


def _code(value: Any) -> str:
    return "```json\n" + (value if isinstance(value, str) else dumps_text(value)) + "\n```"


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
        parts.append("error " + dumps_text(t["error"])[:120])
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
    ]
    shown = [compression_md(doc, t) for t in turns if t.get("forwarded") is not None]
    if shown:
        out += ["## Compressions", *shown]
    out.append("## Messages")
    for entry in doc["messages"]:
        stamp = _when(entry.get("timestamp"))
        out.append(message_md(entry["message"]) + (f"\n\n<sub>{stamp}</sub>" if stamp else ""))
    return "\n\n".join(out) + "\n"


def compression_md(doc: Mapping[str, Any], t: Mapping[str, Any]) -> str:
    """What one compressed turn did: the messages it dropped, the notes it inserted,
    and what the model was sent instead of the history."""
    history_len = t["history_length"]
    kept: set[int] = set()
    inserted: list[Mapping[str, Any]] = []
    sent = 0
    for op in t["forwarded"]:
        if "keep" in op:
            start, count = op["keep"]
            kept.update(range(start, start + count))
            sent += count
        else:
            inserted.append(op["insert"])
            sent += 1
    dropped = [i for i in range(history_len) if i not in kept]
    history = t.get("history") or [m["message"] for m in doc["messages"][:history_len]]
    d = t.get("decision") or {}
    policies = ", ".join(d.get("policies") or []) or "?"
    tokens = f" ({d['tokens']} → {d.get('forwarded_tokens')} tokens)" if d.get("tokens") else ""
    lines = [
        f"### turn {t['turn']} · {t['model']} · {policies}",
        f"Sent {sent} of {history_len} messages to {t['model']}{tokens}:"
        f" {len(dropped)} dropped, {len(inserted)} inserted.",
    ]
    for i in dropped:
        lines.append(f"- dropped [{i}] {_brief(history[i])}")
    for m in inserted:
        lines.append(f"- inserted ({m.get('role', '?')}): {_brief(m, 400)}")
    return "\n".join(lines)


def _brief(m: Mapping[str, Any], width: int = 100) -> str:
    return f"{m.get('role', '?')}: " + squeeze(message_text(m), width)
