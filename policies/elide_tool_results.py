"""``elide-tool-results``: old tool output becomes a one-line stub saying what it was.

The cheapest loss in an agent's session: the call, its id and its pairing stay; only
the output's bulk goes. The stub says how big the output was and how it began, both
read from the output itself, so it is the same every turn.
"""

from __future__ import annotations

from typing import Any

from policies.base import Mark, Message
from policies.fitting import Fitting, dumps
from policies.rewriting import RewriteLevel
from policies.trim import text_of
from policies.units import HANDOFF_MARK, TOOL_ROLES

PREVIEW_CHARS = 100


def tool_stub(message: Message) -> dict[str, Any] | None:
    """The tool message with its content replaced by a stub (other fields kept), or
    None when the stub would not be shorter."""
    content = message.get("content")
    text = text_of(content) if not isinstance(content, str) else content
    if isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") != "text" for p in content
    ):
        text = text or "[non-text output]"
    first = " ".join(text.strip().split("\n", 1)[0].split())
    if len(first) > PREVIEW_CHARS:
        first = first[: PREVIEW_CHARS - 1] + "…"
    lines = text.count("\n") + 1 if text else 0
    call = message.get("tool_call_id") or message.get("name") or "?"
    stub = (
        f"{HANDOFF_MARK}output of call {call} left out: {len(text):,} characters, "
        f"{lines:,} lines; it began: {first!r}]"
    )
    if len(stub) >= len(content if isinstance(content, str) else dumps(content)):
        return None
    return {**message, "content": stub}


class ElideToolResults(RewriteLevel):
    """Stub old tool results, oldest first, up to the recent part."""

    name = "elide-tool-results"
    verb = "stubbed the output of"

    def applies(self, fit: Fitting, i: int, mark: Mark) -> bool:
        return fit.msgs[i].get("role") in TOOL_ROLES

    def rewrite(self, message: Message, mark: Mark, fit: Fitting) -> dict[str, Any] | None:
        if str(message.get("content", "")).startswith(HANDOFF_MARK):
            return None
        return tool_stub(message)
