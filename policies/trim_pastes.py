"""``trim-pastes``: a long paste in an old user message (a file, a log) keeps its head
and tail; old images, audio and files become a one-line marker. The user's short
requests are never touched here: they are the last thing to go."""

from __future__ import annotations

from typing import Any

from policies.base import Mark, Message, PolicyContext
from policies.fitting import Fitting
from policies.rewriting import RewriteLevel
from policies.trim import head_tail, map_text
from policies.units import HANDOFF_MARK, is_handoff


def is_paste(text: str, keep: int) -> bool:
    """A paste rather than prose: long, and shaped like a file or a log."""
    return len(text) > 2 * keep and (text.count("\n") >= 10 or "```" in text)


def _drop_media(message: Message) -> Message:
    """``message`` with media parts as markers; the same object when it has none."""
    content = message.get("content")
    if not isinstance(content, list):
        return message
    parts, changed = [], False
    for p in content:
        kind = p.get("type") if isinstance(p, dict) else None
        if kind in ("image_url", "input_audio", "file", "image", "input_image", "input_file"):
            p, changed = {"type": "text", "text": f"{HANDOFF_MARK}{kind} left out]"}, True
        parts.append(p)
    return {**message, "content": parts} if changed else message


class TrimPastes(RewriteLevel):
    """Cut the middle of long pastes and drop media in old user messages."""

    name = "trim-pastes"
    verb = "trimmed pasted text or media in"

    def keep_for(self, ctx: PolicyContext) -> int:
        return max(400, min(4000, ctx.budget // 4))

    def applies(self, fit: Fitting, i: int, mark: Mark) -> bool:
        return fit.msgs[i].get("role") == "user" and i != mark.spare

    def rewrite(self, message: Message, mark: Mark, fit: Fitting) -> dict[str, Any] | None:
        if is_handoff(message):
            return None
        keep = mark.keep

        def cut(text: str) -> str:
            return (
                head_tail(text, keep, "characters of pasted text") if is_paste(text, keep) else text
            )

        trimmed = map_text(message, cut)
        out = _drop_media(trimmed if trimmed is not None else message)
        return None if out is message else dict(out)
