"""Where a conversation may be cut: atomic units, what is pinned, what is recent.

A *unit* is a message plus the ``tool``/``function`` results that directly follow
it, so an assistant ``tool_calls`` message and its results are rewritten, kept or
dropped together and no tool result is ever orphaned. *Pinned* are every system and
developer message wherever it stands and the newest user message: never dropped.
*Recent* is everything from the unit holding the newest ``keep`` tool results (as
many of them as fit half the budget with their calls, the newest always; or the last
unit, if that starts later) to the end: an agent's tool loop after the newest user message is
ordinary units, and only its recent part is spared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from policies.base import Message

TOOL_ROLES = frozenset({"tool", "function"})
PINNED_ROLES = frozenset({"system", "developer"})
HANDOFF_MARK = "[handoff: "
"""Every message, stub or marker handoff writes starts with this, so it is recognisable."""


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


def newest_user(messages: Sequence[Message]) -> int:
    """Index of the newest user message, -1 if there is none."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return -1


def is_handoff(message: Message) -> bool:
    """True for a note or summary message that handoff wrote itself."""
    content = message.get("content")
    return isinstance(content, str) and content.startswith(HANDOFF_MARK)


@dataclass(frozen=True, slots=True)
class Shape:
    """The structure compression works within, derived once per request."""

    units: tuple[range, ...]
    newest_user: int
    """Index of the pinned newest user message, -1 without one."""
    recent: int
    """Index where the recent part starts: nothing at or after it is rewritten or
    dropped except as a last resort."""
    pinned: frozenset[int]
    """System and developer messages (and the opening, for middle-out); the newest
    user message is pinned too, as ``newest_user``."""

    def droppable(self, *, reach_recent: bool = False, spare: int | None = None) -> list[range]:
        """Units that may be dropped, oldest first: no pinned message in them, before
        ``recent`` (or, as a last resort, anything but the last unit). ``spare`` is the
        user message to keep pinned (default: the newest)."""
        stop = self.units[-1].start if reach_recent and self.units else self.recent
        kept = self.newest_user if spare is None else spare
        return [
            u
            for u in self.units
            if u.stop <= stop and kept not in u and not self.pinned.intersection(u)
        ]


def shape(
    messages: Sequence[Message],
    keep: int = 3,
    pin_opening: bool = False,
    room: Callable[[Sequence[int]], bool] | None = None,
) -> Shape:
    """Units, the pinned messages and where the recent part starts. ``pin_opening``
    pins everything up to and including the first user message too (middle-out).
    ``room`` says whether the messages at some indices (the units holding the newest
    results: calls and their results) fit the share of the budget the recent part may
    take; the newest results are kept while it does (at most ``keep``, the newest one
    always)."""
    us = units(messages)
    user = newest_user(messages)
    pinned = {i for i, m in enumerate(messages) if m.get("role") in PINNED_ROLES}
    if pin_opening:
        first = next((i for i, m in enumerate(messages) if m.get("role") == "user"), -1)
        pinned.update(range(first + 1))
    recent = us[-1].start if us else 0
    tools = [i for i, m in enumerate(messages) if m.get("role") in TOOL_ROLES]
    if keep > 0 and tools:
        kept = tools[-keep:]
        while room is not None and len(kept) > 1 and not room(_whole(kept, us)):
            kept = kept[1:]
        oldest_kept = kept[0]
        for u in us:
            if oldest_kept in u:
                recent = min(recent, u.start)
                break
    return Shape(tuple(us), user, recent, frozenset(pinned))


def _whole(results: Sequence[int], us: Sequence[range]) -> list[int]:
    """The messages of the units that hold these tool results (in order, oldest first):
    a call's arguments (a file written) weigh on the recent part as its output does."""
    wanted = set(results)
    out: list[int] = []
    for u in reversed(us):
        if u.stop <= results[0]:
            break
        if wanted.intersection(u):
            out[:0] = u
    return out


def pinned(messages: Sequence[Message]) -> list[Message]:
    """System and developer messages plus the newest user message: always forwarded."""
    s = shape(messages, keep=0)
    return [m for i, m in enumerate(messages) if i in s.pinned or i == s.newest_user]
