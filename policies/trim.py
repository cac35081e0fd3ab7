"""Cutting a text in its middle, keeping its head and tail, with a marker that says so.

The head usually holds the question or the file's start and the tail the conclusion
or the error. How much is kept is decided from the text and a size fixed by the
caller, never from a token count, so the same text is always cut the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from policies.base import Message
from policies.units import HANDOFF_MARK

HEAD_SHARE = 0.6


def head_tail(text: str, keep: int, what: str = "characters") -> str:
    """``text`` with its middle cut so that about ``keep`` characters remain (60% head,
    40% tail, at line breaks where one is near), or ``text`` if it is short enough."""
    if keep < 0 or len(text) <= keep + 80:
        return text
    head_n = int(keep * HEAD_SHARE)
    tail_n = keep - head_n
    head = _to_break(text[:head_n], from_end=True)
    tail = _to_break(text[len(text) - tail_n :], from_end=False) if tail_n > 0 else ""
    removed = len(text) - len(head) - len(tail)
    marker = f"\n{HANDOFF_MARK}{removed:,} {what} cut from the middle of this message]\n"
    return head + marker + tail


def _to_break(piece: str, *, from_end: bool) -> str:
    """Shorten ``piece`` to the nearest line break within its last (or first) fifth."""
    window = max(1, len(piece) // 5)
    if from_end:
        j = piece.rfind("\n", len(piece) - window)
        return piece[: j + 1] if j > 0 else piece
    j = piece.find("\n", 0, window)
    return piece[j + 1 :] if j >= 0 else piece


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    return ""


def map_text(message: Message, cut: Callable[[str], str]) -> dict[str, Any] | None:
    """``message`` with ``cut`` applied to its string content or to each text part; None
    when nothing changed. Other parts (images, thinking, unknown kinds) are kept."""
    content = message.get("content")
    if isinstance(content, str):
        new = cut(content)
        return None if new == content else {**message, "content": new}
    if not isinstance(content, list):
        return None
    parts, changed = [], False
    for p in content:
        if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str):
            new = cut(p["text"])
            if new != p["text"]:
                p, changed = {**p, "text": new}, True
        parts.append(p)
    return {**message, "content": parts} if changed else None
