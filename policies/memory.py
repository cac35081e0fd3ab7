"""A session's memory, without an LLM: what a new conversation needs to carry the work on.

Built from the messages alone with the digest's extraction (:mod:`policies.digest`):
the goal is the user's first real request, what was done and decided is what the
assistant said it did or chose, the files are those the tools changed, the state and
next steps come from the end of the conversation. A pure function: the same messages
give the same memory, byte for byte, and nothing is invented.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from policies.base import Message
from policies.digest import Item, items
from policies.trim import text_of

MAX_ITEMS = 12
"""Items kept per list section (the newest)."""
STATE_CHARS = 400
_DECIDED = re.compile(
    r"\b(decided|decision|let's use|plan is|instead|chose|choose|agreed|we'll|we will|"
    r"i'll|i will|use \w+ for|because|root cause|the fix)\b",
    re.I,
)
_NEXT = re.compile(r"\b(next|todo|to do|then|remaining|still need|left to|follow[- ]up)\b", re.I)
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{3,}|[\u4e00-\u9fff]{2,}")
_STOP_WORDS = (
    "this that with from have what when where which would could should there their "
    "about into please make just like some then than also them they your want need "
    "file files code does done will shall more most very only over such each because "
    "continue step keep going again still"
)
_STOP = frozenset(_STOP_WORDS.split())
SECTIONS = (
    "Task goal",
    "What was done",
    "Key decisions",
    "Current state",
    "Next steps",
    "Files modified",
    "Tags",
)


@dataclass(frozen=True, slots=True)
class SessionMemory:
    """The structured memory of one session (the same sections an LLM refines)."""

    goal: str
    done: tuple[str, ...]
    decisions: tuple[str, ...]
    state: str
    next_steps: tuple[str, ...]
    files: tuple[str, ...]
    tags: tuple[str, ...]

    def render(self) -> str:
        """The memory as Markdown, one heading per section."""
        parts: list[str] = []
        for title, value in zip(SECTIONS, self._values(), strict=True):
            if isinstance(value, str):
                body = value or "(none)"
            else:
                body = "\n".join(f"- {v}" for v in value) if value else "(none)"
            parts.append(f"## {title}\n{body}")
        return "\n\n".join(parts)

    def _values(self) -> tuple[str | tuple[str, ...], ...]:
        return (
            self.goal, self.done, self.decisions, self.state,
            self.next_steps, self.files, self.tags,
        )  # fmt: skip

    def as_dict(self) -> dict[str, object]:
        return {
            "goal": self.goal,
            "done": list(self.done),
            "decisions": list(self.decisions),
            "state": self.state,
            "next_steps": list(self.next_steps),
            "files": list(self.files),
            "tags": list(self.tags),
        }


def _newest(values: Sequence[str], n: int = MAX_ITEMS) -> tuple[str, ...]:
    return tuple(values[-n:])


def _last_text(messages: Sequence[Message], role: str) -> str:
    for m in reversed(messages):
        if m.get("role") == role:
            text = " ".join(text_of(m.get("content")).split())
            if text:
                return text
    return ""


def _tags(asked: Sequence[str], files: Sequence[str]) -> tuple[str, ...]:
    words: Counter[str] = Counter()
    for text in asked:
        for w in _WORD.findall(text):
            low = w.lower().strip(".-")
            if low not in _STOP and len(low) > 3:
                words[low] += 1
    exts = sorted({f.rsplit(".", 1)[1].lower() for f in files if "." in f.rsplit("/", 1)[-1]})
    ranked = [w for w, _ in sorted(words.items(), key=lambda kv: (-kv[1], kv[0]))[:6]]
    return tuple(dict.fromkeys([*ranked, *exts]))[:10]


def build_memory(
    messages: Sequence[Message], skip: Sequence[str] = (), found: Sequence[Item] | None = None
) -> SessionMemory:
    """The deterministic memory of ``messages`` (a session's history and reply).

    ``skip``: user messages that are commands to handoff, not requests (start-over and
    remember phrases), left out of the goal when another request exists. ``found``:
    ``items(messages)`` when the caller has it already (folded as the history grew).
    """
    if found is None:
        found = items(messages)
    skipped = {s.strip().lower() for s in skip}
    asked = [i.text for i in found if i.kind == "asked"]
    real = [a for a in asked if a.strip().lower() not in skipped] or asked
    said = [i.text for i in found if i.kind == "said"]
    changed = [i.text for i in found if i.kind == "changed"]
    files = list(dict.fromkeys(c.rsplit(" (", 1)[0] for c in changed))
    decisions = [*(a for a in real if _DECIDED.search(a)), *(s for s in said if _DECIDED.search(s))]
    done = [*(s for s in said if not _DECIDED.search(s)), *changed]
    last = _last_text(messages, "assistant")
    state = last if len(last) <= STATE_CHARS else last[: STATE_CHARS - 1] + "…"
    errors = [i.text for i in found if i.kind == "error"]
    if errors and not state:
        state = f"last error: {errors[-1]}"
    steps = [s.strip() for s in re.split(r"(?<=[.!?])\s+", last) if _NEXT.search(s)]
    if real and messages and messages[-1].get("role") == "user" and real[-1] not in real[:-1]:
        steps.append(f"answer the user's last request: {real[-1]}")
    return SessionMemory(
        goal=real[0] if real else "",
        done=_newest(done),
        decisions=_newest(decisions),
        state=state,
        next_steps=_newest(steps, 5),
        files=_newest(files, 40),
        tags=_tags(real, files),
    )


HEAD_CHARS = 600


def starts_with_phrase(text: str, phrases: Sequence[str]) -> str | None:
    """What follows the phrase ``text`` starts with (``""`` for the phrase alone), or None.

    Case and surrounding space are ignored; a phrase of letters must end at a word's end
    ("save" is not "saved"), one of CJK characters may run straight on. Only the first
    :data:`HEAD_CHARS` are read: a message may be a pasted megabyte, and its start decides.
    """
    text = text[:HEAD_CHARS]
    low = " ".join(text.split()).lower()
    for phrase in sorted(phrases, key=len, reverse=True):
        p = " ".join(phrase.split()).lower()
        if not p or not low.startswith(p):
            continue
        rest = low[len(p) :]
        if rest and p[-1].isascii() and p[-1].isalnum() and rest[0].isalnum():
            continue
        return " ".join(text.split())[len(p) :].lstrip(" ,.:;!?-—，。：！？")
    return None
