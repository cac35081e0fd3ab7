"""What a compression level is, what it is given, and what it remembers.

A conversation is compressed by *levels*, cheapest loss first (old tool output
stubbed, bulky arguments, pasted blobs, long old prose, then the oldest units
dropped behind a digest). Each level reaches into the history up to a boundary, its
:class:`Mark`, counted in the client's own messages: whatever a level writes is fixed
when the mark moves and rebuilt byte for byte from the same messages while the mark
stays, so the forwarded prefix does not change from turn to turn. Marks move only
forward, and only when the prompt no longer fits; then as far as the low-water
target (``PolicyContext.target``), so the turns after it append without moving it.

Nothing here mutates a message. Side effects (token counting, the summarizer LLM)
come in through the context, so unit tests pass simple fakes and the proxy the
real ones.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from policies.identity_memo import IdentityMemo

Message = Mapping[str, Any]

CountTokens = Callable[[Sequence[Message]], int]
"""Counts a messages list exactly as the decision does: the whole prompt that a
request with these messages (and the request's tools, response_format…) would cost."""

Summarize = Callable[[Sequence[Message], "str | None"], Awaitable[str]]
"""Writes a structured summary of ``messages``; the second argument is the summary of
what was dropped before them (context, not to repeat), or None. Raises on timeout or
error."""

Merge = Callable[[Sequence[str], int], Awaitable[str]]
"""Merges summaries, oldest first, into one of at most about the given number of
characters (the same LLM as :data:`Summarize`). Raises on timeout or error."""


@dataclass(frozen=True, slots=True)
class Mark:
    """How far one level reaches: it acts on the messages before ``upto``.

    ``hash`` is the prefix hash of the first ``upto`` messages: the mark holds while
    the history still starts with them. ``blocks`` are the texts a dropping level
    wrote (its note, one block per move, appended), ``seen`` the digest items they
    already list, ``keep`` the characters a trim keeps (for the note: the room a last
    resort shrank it to, 0 when it was not). ``spare`` is the user message
    that was the newest when the mark was set (-1: none): it stays pinned under this
    mark, so a replay shows what the mark showed even after a newer user message.
    """

    upto: int
    hash: str
    blocks: tuple[str, ...] = ()
    seen: tuple[str, ...] = ()
    keep: int = 0
    spare: int = -1

    def as_dict(self) -> dict[str, Any]:
        return {
            "upto": self.upto,
            "hash": self.hash,
            "blocks": list(self.blocks),
            "seen": list(self.seen),
            "keep": self.keep,
            "spare": self.spare,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Mark:
        return cls(
            int(d["upto"]),
            str(d["hash"]),
            tuple(str(b) for b in d.get("blocks", ())),
            tuple(str(s) for s in d.get("seen", ())),
            int(d.get("keep", 0)),
            int(d.get("spare", -1)),
        )


@dataclass(frozen=True, slots=True)
class CutState:
    """A conversation's compression for one window: each level's mark, by level name."""

    marks: Mapping[str, Mark] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {name: mark.as_dict() for name, mark in self.marks.items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CutState:
        return cls({str(k): Mark.from_dict(v) for k, v in d.items()})


@dataclass(frozen=True, slots=True)
class Memo:
    """Derived values by object identity: each message's prefix digest and each
    message's rewritten forms. A resent history's messages are last turn's objects, so
    the engine hands a conversation's next turn ``next()`` and a turn derives values
    for its new messages only. Outputs never depend on it."""

    digests: IdentityMemo = field(default_factory=IdentityMemo)
    contents: IdentityMemo = field(default_factory=IdentityMemo)
    stubs: IdentityMemo = field(default_factory=IdentityMemo)

    def next(self) -> Memo:
        return Memo(self.digests.next(), self.contents.next(), self.stubs.next())


@dataclass(frozen=True, slots=True)
class PolicyContext:
    budget: int
    """Prompt tokens the forwarded request may use."""
    count: CountTokens
    target: int | None = None
    """Where a mark that must move aims (the low-water mark, at most ``budget``), so that
    the turns after it fit without moving it again. None: the budget itself."""
    summarize: Summarize | None = None
    merge: Merge | None = None
    """Rewrites a summary note that has no room for another block as one block."""
    previous: CutState | None = None
    memo: Memo = field(default_factory=Memo)

    @property
    def aim(self) -> int:
        return self.budget if self.target is None else min(self.target, self.budget)


@dataclass(frozen=True, slots=True)
class Step:
    """What one level did to this request (for the decision record and headers)."""

    policy: str
    removed_messages: int
    removed_tokens: int
    note: str


class Level(Protocol):
    """One level of the chain: extends its mark until the prompt fits ``ctx.aim``."""

    name: str

    async def extend(self, fit: Any, ctx: PolicyContext) -> str:
        """Move this level's mark in ``fit`` (a :class:`policies.fitting.Fitting`) as far
        as the prompt needs; returns a note on what it did, "" for nothing."""
        ...
