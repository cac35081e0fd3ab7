"""A session's title: the first thing the person wrote, not what their client injected.

Agent CLIs put their own text in user messages: reminders and context blocks in
pseudo-XML tags (Claude Code's and Qwen Code's ``<system-reminder>``, Codex's
``<environment_context>`` and ``<user_instructions>``) or whole text parts of it. Those
blocks are cut out before a title is taken; a message with nothing else is skipped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from proxy.store.messages import squeeze

INJECTED_TAGS = (
    "system-reminder",
    "environment_context",
    "user_instructions",
    "system_instructions",
    "command-message",
    "command-name",
    "local-command-stdout",
    "user-prompt-submit-hook",
)
"""Tags whose blocks a client writes into user messages on the person's behalf."""

_BLOCK = re.compile(
    r"<({})(?:\s[^>]*)?>.*?(?:</\1>|\Z)".format("|".join(map(re.escape, INJECTED_TAGS))),
    re.DOTALL | re.IGNORECASE,
)


def person_text(message: Mapping[str, Any]) -> str:
    """The text parts of a user message with the client-injected blocks cut out."""
    content = message.get("content")
    texts: list[str] = []
    if isinstance(content, str):
        texts.append(content)
    elif isinstance(content, list):
        texts.extend(
            p["text"] for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)
        )
    kept = (_BLOCK.sub(" ", t).strip() for t in texts)
    return " ".join(t for t in kept if t)


def title_of(message: Mapping[str, Any]) -> str:
    """A user message's own words, squeezed to a line ("" when it has none)."""
    return squeeze(person_text(message))
