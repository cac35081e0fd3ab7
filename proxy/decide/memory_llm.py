"""The LLM's session memory: the summarizer's call, asked for the memory's sections.

The deterministic memory goes along as a draft; the answer must hold every section
heading (:data:`policies.memory.SECTIONS`), else :class:`SummarizerError` and the
deterministic memory is kept.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from policies.memory import SECTIONS
from proxy.decide.summarizer import ChatCall, Message, SummarizerError, render_transcript

PROMPT = (
    "You write the memory of a working session between a user and an AI assistant, so "
    "that a new session tomorrow can carry the work on. Write 200 to 500 words of Markdown "
    "with exactly these sections, as '## ' headings, in this order:\n\n"
    + "\n".join(f"## {s}" for s in SECTIONS)
    + "\n\nKeep file paths, identifiers, commands, numbers and decisions with their reasons. "
    "Write in the language the user writes in. Do not invent anything."
)


class MemoryWriter(ChatCall):
    """The summarizer's model and upstream, asked for a session memory in one call."""

    async def __call__(self, messages: Sequence[Message], draft: str) -> str:
        return await self.ask(self.request_body(messages, draft))

    def request_body(self, messages: Sequence[Message], previous_summary: str | None) -> bytes:
        task = "The session:"
        if previous_summary:
            task = f"A draft memory, built mechanically:\n\n{previous_summary}\n\nThe session:"
        return self.chat_body(PROMPT, f"{task}\n\n{render_transcript(messages)}")


_HEADING = re.compile(r"^#{1,3}\s*(.+?)\s*$", re.M)


def sections(text: str) -> dict[str, str]:
    """The memory's sections by title; :class:`SummarizerError` if one is missing."""
    found: dict[str, str] = {}
    marks = list(_HEADING.finditer(text))
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        found[m.group(1).strip().lower()] = text[m.end() : end].strip()
    missing = [s for s in SECTIONS if s.lower() not in found]
    if missing:
        raise SummarizerError(f"the memory lacks the sections {', '.join(missing)}")
    return {s: found[s.lower()] for s in SECTIONS}
