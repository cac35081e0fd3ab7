"""Claude Code transcripts (``~/.claude/projects/<project>/<session>.jsonl``).

Each line is a record: ``user`` / ``assistant`` (an Anthropic message under
``message``, linked by ``uuid`` → ``parentUuid``), ``summary`` (a title for the
branch ending at ``leafUuid``), ``system`` (a ``compact_boundary`` links on through
``logicalParentUuid``), ``file-history-snapshot`` and ``queue-operation``. Records with
``isSidechain`` are a sub-agent's and are left out. The conversation is the chain from
the last main-line record back to its root; an assistant reply written as several
records (one per content block, same ``message.id``) becomes one message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from proxy.store.anthropic_messages import message_to_openai
from proxy.store.importers.base import (
    Conversation,
    Problem,
    Reading,
    first_asked,
    first_json_line,
    json_lines,
    when,
)

KIND = "claude-code"
_TYPES = {"user", "assistant", "summary", "system", "file-history-snapshot", "queue-operation"}


def detect(path: Path, head: bytes) -> bool:
    line = first_json_line(head)
    return (
        line is not None
        and line.get("type") in _TYPES
        and ("sessionId" in line or "leafUuid" in line or "messageId" in line)
    )


def read(path: Path) -> Reading:
    reading = Reading()
    records: dict[str, dict[str, Any]] = {}
    summaries: dict[str, str] = {}
    leaf: str | None = None
    session = path.stem
    for n, r in json_lines(path, reading):
        kind = r.get("type")
        if kind == "summary" and isinstance(r.get("leafUuid"), str):
            summaries[r["leafUuid"]] = str(r.get("summary", ""))
        if kind not in ("user", "assistant", "system") or not isinstance(r.get("uuid"), str):
            continue
        if kind != "system" and not isinstance(r.get("message"), dict):
            reading.problems.append(Problem(f"{path}:{n}", f"{kind} record without a message"))
            continue
        records[r["uuid"]] = r
        if not r.get("isSidechain"):
            session = str(r.get("sessionId") or session)
            if kind != "system":
                leaf = r["uuid"]
    if leaf is None:
        return reading
    conv = Conversation(KIND, session)
    chain = _chain(records, leaf)
    meta = _messages(conv, [records[u] for u in chain])
    summary = next((summaries[u] for u in reversed(chain) if u in summaries), "")
    conv.title = summary or first_asked(conv, meta)
    reading.conversations.append(conv)
    return reading


def _chain(records: dict[str, dict[str, Any]], leaf: str) -> list[str]:
    """The uuids from the root to ``leaf`` (a missing parent ends it)."""
    out: list[str] = []
    seen: set[str] = set()
    at: str | None = leaf
    while at is not None and at in records and at not in seen:
        seen.add(at)
        out.append(at)
        r = records[at]
        at = r.get("parentUuid") or r.get("logicalParentUuid")
    return out[::-1]


def _messages(conv: Conversation, chain: list[dict[str, Any]]) -> set[int]:
    """Add the chain's messages; return the indices of those Claude Code marked
    ``isMeta`` (caveats and command echoes it wrote in)."""
    meta: set[int] = set()
    last_id: str | None = None
    for r in chain:
        if r.get("type") == "system":
            if r.get("subtype") == "compact_boundary":
                conv.notes.append("Claude Code compacted the history here")
            continue
        msg = r["message"]
        stamp = when(r.get("timestamp"))
        model = msg.get("model") if r["type"] == "assistant" else None
        msg_id = msg.get("id") if r["type"] == "assistant" else None
        if msg_id is not None and msg_id == last_id:  # another block of the same reply
            _merge(conv.messages[-1], message_to_openai(msg)[0])
            continue
        last_id = msg_id
        for m in message_to_openai(msg):
            if r.get("isMeta"):
                meta.add(len(conv.messages))
            conv.add(m, stamp, model)
    return meta


def _merge(into: dict[str, Any], more: dict[str, Any]) -> None:
    text = "\n\n".join(t for t in (into.get("content"), more.get("content")) if t)
    into["content"] = text or None
    if more.get("tool_calls"):
        into.setdefault("tool_calls", []).extend(more["tool_calls"])
    if more.get("reasoning_content"):
        joined = [into.get("reasoning_content"), more["reasoning_content"]]
        into["reasoning_content"] = "\n\n".join(t for t in joined if t)
