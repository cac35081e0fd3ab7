"""A digest of dropped messages, without an LLM: what a good compaction summary keeps.

From the messages themselves, in order: what the user asked (verbatim when short,
client-injected reminders left out), the files the tools touched and how, the
commands they ran, the errors they saw, and what the assistant said it decided,
found or did. Items already listed in an earlier block of the same note are not
repeated, so the note only grows as the cut moves (a block is never rewritten). When
a block would exceed its size, the least valuable items go first, oldest first: the
files only read, then commands, errors, the files changed, what the assistant said;
the user's own requests last.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import orjson

from policies.base import Message
from policies.trim import text_of
from policies.units import HANDOFF_MARK, TOOL_ROLES, called_function, is_handoff

ASK_CHARS = 300
LINE_CHARS = 200
PATH_KEYS = frozenset(
    {
        "path", "file_path", "filepath", "filePath", "file", "filename", "absolute_path",
        "target_file", "notebook_path", "paths", "files", "directory", "dir_path",
    }
)  # fmt: skip
COMMAND_KEYS = ("command", "cmd", "script")
_INJECTED = re.compile(
    r"<(system-reminder|environment_details|system_reminder|context)>.*?</\1>", re.S | re.I
)
_ERROR = re.compile(r"\w*(?:error|exception)\b|\btraceback\b|\bpanic", re.I)
_FAILURE = re.compile(
    r"\b(failed|failure|fatal|denied|not found|no such file|segmentation fault|"
    r"exit (?:code|status) [1-9])\b",
    re.I,
)
_STATED = re.compile(
    r"\b(decided|decision|i'll|i will|we'll|we will|let's use|plan is|instead|because|"
    r"root cause|the cause|the fix|fixed|works now|implemented|created|added|changed|"
    r"updated|removed|renamed|concluded|conclusion|found that|turns out|therefore|"
    r"chose|choose|use \w+ for|agreed)\b",
    re.I,
)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")
_VERBS = (
    ("read", ("read", "view", "cat", "open", "get_file", "fetch")),
    ("wrote", ("write", "create", "save", "new_file")),
    ("edited", ("edit", "replace", "patch", "apply", "update", "modify", "insert")),
    ("searched", ("list", "ls", "glob", "find", "search", "grep")),
    ("deleted", ("delete", "remove", "rm")),
)
KINDS = (
    ("asked", "asked"),
    ("said", "said"),
    ("changed", "changed"),
    ("error", "error"),
    ("ran", "ran"),
    ("read", "read"),
)
"""Item kinds and their labels, most valuable first: a block over its size gives up the
last kind first (its oldest items first), and the user's requests last of all."""
INLINE = frozenset({"changed", "ran", "read"})
"""Kinds listed on one line, separated by semicolons."""
_LOOKED = frozenset({"read", "searched"})


@dataclass(frozen=True, slots=True)
class Item:
    kind: str  # asked | said | changed | error | ran | read
    text: str

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.text}"


def _line(text: str, limit: int = LINE_CHARS) -> str:
    one = " ".join(text.split())
    return one if len(one) <= limit else one[: limit - 1] + "…"


def _arguments(call: object) -> dict[str, object]:
    args = called_function(call).get("arguments")
    if isinstance(args, dict):
        return args
    if not isinstance(args, str):
        return {}
    try:
        parsed = orjson.loads(args)
    except orjson.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _verb(tool: str) -> str:
    low = tool.lower()
    for verb, stems in _VERBS:
        if any(s in low for s in stems):
            return verb
    return tool or "used"


def _asked(message: Message) -> Item | None:
    text = _INJECTED.sub("", text_of(message.get("content"))).strip()
    if not text:
        return None
    if len(text) <= ASK_CHARS:
        return Item("asked", _line(text, ASK_CHARS))
    lines = text.count("\n") + 1
    return Item("asked", f"{_line(text, 240)} ({len(text):,} characters, {lines:,} lines)")


def _calls(message: Message) -> Iterable[Item]:
    for call in message.get("tool_calls") or ():
        name = str(called_function(call).get("name") or "")
        args = _arguments(call)
        for key, value in args.items():
            if key in PATH_KEYS:
                for path in value if isinstance(value, list) else [value]:
                    if isinstance(path, str) and 0 < len(path) < LINE_CHARS and "\n" not in path:
                        verb = _verb(name)
                        if verb in _LOOKED:
                            yield Item("read", path)
                        else:
                            yield Item("changed", f"{path} ({verb})")
        for key in COMMAND_KEYS:
            command = args.get(key)
            if isinstance(command, list):
                command = " ".join(str(c) for c in command)
            if isinstance(command, str) and command.strip():
                yield Item("ran", _line(command, 160))
                break


def _errors(message: Message) -> Iterable[Item]:
    """A tool output's first line naming an error or exception, else its first line
    saying something failed."""
    lines = [ln for ln in text_of(message.get("content")).splitlines() if ln.strip()]
    for pattern in (_ERROR, _FAILURE):
        for line in lines:
            if pattern.search(line) and not line.lstrip().startswith(HANDOFF_MARK):
                yield Item("error", _line(line.strip()))
                return


def _said(message: Message) -> Iterable[Item]:
    text = text_of(message.get("content"))
    picked = 0
    for sentence in _SENTENCE.split(text):
        if picked < 2 and _STATED.search(sentence) and len(sentence.strip()) > 12:
            yield Item("said", _line(sentence))
            picked += 1


def items(messages: Sequence[Message]) -> list[Item]:
    """Every digest item of ``messages``, in the order they appear, without repeats."""
    out: dict[str, Item] = {}
    add_items(out, messages)
    return list(out.values())


def add_items(out: dict[str, Item], messages: Sequence[Message]) -> None:
    """Fold the items of ``messages`` into ``out`` (by key, the first kept): ``items`` of a
    list is the fold of its parts in order, so a growing history is extracted once."""
    for m in messages:
        if is_handoff(m):
            continue
        role = m.get("role")
        found: Iterable[Item] = ()
        if role == "user":
            ask = _asked(m)
            found = (ask,) if ask else ()
        elif role == "assistant":
            found = [*_calls(m), *_said(m)]
        elif role in TOOL_ROLES:
            found = _errors(m)
        for item in found:
            out.setdefault(item.key, item)


def render(picked: Sequence[Item], count: int) -> str:
    """A block: how many messages it stands for, then its items grouped by kind."""
    lines = [f"\n\n— {count:,} message(s):"]
    for kind, label in KINDS:
        texts = [i.text for i in picked if i.kind == kind]
        if not texts:
            continue
        if kind in INLINE:
            lines.append(f"• {label}: " + "; ".join(texts))
        else:
            lines.extend(f"• {label}: {t}" for t in texts)
    return "\n".join(lines)


def block(
    messages: Sequence[Message], seen: Iterable[str], max_chars: int
) -> tuple[str, tuple[str, ...]]:
    """The next block of a note for newly dropped ``messages``: items not already
    ``seen``, within ``max_chars``; and the keys of the items it lists."""
    known = set(seen)
    picked = [i for i in items(messages) if i.key not in known]
    size = len(render(picked, len(messages)))
    for kind, _ in reversed(KINDS):
        mine = [i for i in picked if i.kind == kind]
        while mine and size > max_chars:
            gone = mine.pop(0)  # the oldest of the least valuable kind
            picked.remove(gone)
            size -= len(gone.text) + (2 if kind in INLINE else len(kind) + 5)
        if size <= max_chars:
            break
    text = render(picked, len(messages))
    while len(text) > max_chars and picked:  # the estimate ran low: give up one more
        least = next(k for k, _ in reversed(KINDS) if any(i.kind == k for i in picked))
        picked.remove(next(i for i in picked if i.kind == least))
        text = render(picked, len(messages))
    if len(text) > max_chars:
        text, picked = render([], len(messages)), []
    return text, tuple(i.key for i in picked)
