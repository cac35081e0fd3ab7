"""A Messages request's own ``context_management`` clearing, approximated in the view
handoff counts, so handoff compresses only what the server's edit leaves too large.

Anthropic applies ``clear_tool_uses_*`` edits server-side: once the prompt passes the
trigger (default 100,000 input tokens), the oldest tool results (all but the newest
``keep``, default 3, and none of ``exclude_tools``) are replaced by a placeholder, and
their inputs too with ``clear_tool_inputs``. Here the trigger is judged on the body's
size in bytes over four (Claude's tokenizer is not public), and the cleared results
are counted as the placeholder. What is sent is still the client's own block: the
server clears it itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

PLACEHOLDER = "[tool result cleared by context_management]"
DEFAULT_TRIGGER = 100_000
DEFAULT_KEEP = 3


def clearing_edits(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    cm = body.get("context_management")
    edits = cm.get("edits") if isinstance(cm, dict) else None
    if not isinstance(edits, list):
        return []
    return [
        e
        for e in edits
        if isinstance(e, dict) and str(e.get("type", "")).startswith("clear_tool_uses")
    ]


def cleared_view(
    body: Mapping[str, Any], messages: list[dict[str, Any]], estimate: int
) -> list[dict[str, Any]]:
    """``messages`` as the server's clearing edits would leave them (new dicts only for
    the messages an edit changes)."""
    for edit in clearing_edits(body):
        messages = _apply(edit, messages, estimate)
    return messages


def _value(spec: Any, default: int) -> tuple[str, int]:
    if isinstance(spec, dict) and isinstance(spec.get("value"), int):
        return str(spec.get("type", "")), int(spec["value"])
    return "", default


def _apply(
    edit: Mapping[str, Any], messages: list[dict[str, Any]], estimate: int
) -> list[dict[str, Any]]:
    names = _tool_names(messages)
    excluded = edit.get("exclude_tools")
    skip = set(excluded) if isinstance(excluded, list) else set()
    results = [
        i
        for i, m in enumerate(messages)
        if m.get("role") == "tool" and names.get(m.get("tool_call_id")) not in skip
    ]
    kind, trigger = _value(edit.get("trigger"), DEFAULT_TRIGGER)
    size = len(results) if kind == "tool_uses" else estimate
    if size <= trigger:
        return messages
    _, keep = _value(edit.get("keep"), DEFAULT_KEEP)
    clear = results[: max(0, len(results) - keep)]
    if not clear:
        return messages
    out = list(messages)
    ids = set()
    for i in clear:
        out[i] = {**out[i], "content": PLACEHOLDER}
        ids.add(out[i].get("tool_call_id"))
    if edit.get("clear_tool_inputs") is True:
        for i, m in enumerate(out):
            calls = m.get("tool_calls")
            if isinstance(calls, list) and any(c.get("id") in ids for c in calls):
                out[i] = {**m, "tool_calls": [_emptied(c, ids) for c in calls]}
    return out


def _emptied(call: dict[str, Any], ids: set[Any]) -> dict[str, Any]:
    if call.get("id") not in ids:
        return call
    return {**call, "function": {**call["function"], "arguments": "{}"}}


def _tool_names(messages: list[dict[str, Any]]) -> dict[Any, str]:
    names: dict[Any, str] = {}
    for m in messages:
        for c in m.get("tool_calls") or ():
            names[c.get("id")] = c["function"]["name"]
    return names
