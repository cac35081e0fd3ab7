"""Where a conversation may be cut: atomic units, the pinned tail, droppable regions.

A *unit* is a message plus the ``tool``/``function`` results that directly follow
it, so an assistant ``tool_calls`` message and its results are dropped or kept
together and no tool result is ever orphaned. The *tail* starts at the newest user
message and runs to the end (an agent's in-flight tool calls included); it is
pinned, as are all system and developer messages wherever they stand.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from policies.base import Message

TOOL_ROLES = frozenset({"tool", "function"})
PINNED_ROLES = frozenset({"system", "developer"})
HANDOFF_MARK = "[handoff: "
"""Every message or stub handoff writes starts with this, so it is recognisable."""


def called_function(call: Any) -> dict[str, Any]:
    """A tool call's ``function`` object, or ``{}`` when the call or it is not an
    object: clients send anything, and the upstream, not a policy, should refuse it."""
    fn = call.get("function") if isinstance(call, dict) else None
    return fn if isinstance(fn, dict) else {}


def as_dicts(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The messages as a new list of dicts; dicts are shared, never copied or mutated."""
    return [m if isinstance(m, dict) else dict(m) for m in messages]


def units(messages: Sequence[Message]) -> list[range]:
    """Split into units: each non-tool message opens one; tool results join the open one."""
    out: list[range] = []
    start = 0
    for i, m in enumerate(messages):
        if i > 0 and m.get("role") not in TOOL_ROLES:
            out.append(range(start, i))
            start = i
    if messages:
        out.append(range(start, len(messages)))
    return out


def tail_start(messages: Sequence[Message]) -> int:
    """Index of the newest user message; without one, of the last unit."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    us = units(messages)
    return us[-1].start if us else 0


def is_pinned(messages: Sequence[Message], i: int, tail: int) -> bool:
    return i >= tail or messages[i].get("role") in PINNED_ROLES


def pinned(messages: Sequence[Message]) -> list[Message]:
    """System and developer messages plus the tail: what must always be forwarded."""
    tail = tail_start(messages)
    return [m for i, m in enumerate(messages) if is_pinned(messages, i, tail)]


def is_handoff(message: Message) -> bool:
    """True for a note or summary message that handoff wrote itself."""
    content = message.get("content")
    return isinstance(content, str) and content.startswith(HANDOFF_MARK)


@dataclass(frozen=True, slots=True)
class Region:
    """The droppable units from ``start`` to the tail, oldest first.

    A cut ``k`` drops the first ``k`` droppable messages; only unit boundaries
    (``points``) are valid cuts, so tool-call pairs stay whole.
    """

    units: tuple[range, ...]

    @property
    def points(self) -> list[int]:
        total, out = 0, [0]
        for u in self.units:
            total += len(u)
            out.append(total)
        return out

    def dropped(self, k: int) -> list[int]:
        """Indices of the first ``k`` droppable messages (``k`` must be a point)."""
        out: list[int] = []
        for u in self.units:
            if len(out) >= k:
                break
            out.extend(u)
        return out

    def end(self, k: int) -> int:
        """Index just after the last dropped message (0 for no cut)."""
        dropped = self.dropped(k)
        return dropped[-1] + 1 if dropped else 0


def region(messages: Sequence[Message], start: int = 0) -> Region:
    """Droppable units at or after ``start`` and before the tail."""
    tail = tail_start(messages)
    picked = [
        u
        for u in units(messages)
        if u.start >= start and u.stop <= tail and messages[u.start].get("role") not in PINNED_ROLES
    ]
    return Region(tuple(picked))


def assemble(
    messages: Sequence[dict[str, Any]], dropped: Sequence[int], note: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """``messages`` without ``dropped``, with ``note`` standing where the first one was."""
    gone = set(dropped)
    first = min(gone) if gone else -1
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        if i == first and note is not None:
            out.append(note)
        if i not in gone:
            out.append(m)
    return out
