"""What a compression policy is, and what it is given.

A policy is a small object with one async method, ``apply``: it takes the messages
and a :class:`PolicyContext` and returns a :class:`PolicyResult` with a *new* list.
It never mutates its input. Side effects (token counting, the summarizer LLM) come
in through the context, so unit tests pass simple fakes and the proxy the real ones.
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
"""Writes a structured summary of ``messages``; the second argument is an earlier
summary to extend, or None. Raises on timeout or upstream error."""


@dataclass(frozen=True, slots=True)
class CutState:
    """A conversation's previous compression, reused so the forwarded prefix stays
    byte-identical from turn to turn (provider prompt caches survive)."""

    cut: int
    """How many leading non-pinned messages of the original history were replaced."""
    summary: str | None = None
    """The summary that replaced them, if the summarize policy wrote one."""
    prefix_hash: str = ""
    """Hash of the replaced original messages, to check the history still starts so."""
    policy: str = ""
    """Name of the policy that made the cut, so only it reuses the cut next turn."""
    elided_upto: int = 0
    """Tool results (and arguments) before this message index were elided, if big enough."""
    elided_hash: str = ""
    """Hash of the messages before ``elided_upto``, to check the history still starts so."""


@dataclass(frozen=True, slots=True)
class PolicyContext:
    budget: int
    """Prompt tokens the forwarded request may use."""
    count: CountTokens
    summarize: Summarize | None = None
    previous: CutState | None = None
    step_tokens: int = 0
    """When a cut must move, move it by at least this many tokens (cache stability)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    memo: Memo = field(default_factory=lambda: Memo())
    """What the policies derived from messages, by object identity (see ``Memo``).
    Outputs never depend on it."""


@dataclass(frozen=True, slots=True)
class Memo:
    """Derived values by object identity: each message's prefix digest, each tool
    output's content digest, each tool message's elision stub. The repeated prefix
    checks of one compression hash a message once; and since a resent history's
    messages are last turn's objects, the engine hands a conversation's next turn
    ``next()``, so a turn derives values for its new messages only."""

    digests: IdentityMemo = field(default_factory=IdentityMemo)
    contents: IdentityMemo = field(default_factory=IdentityMemo)
    stubs: IdentityMemo = field(default_factory=IdentityMemo)

    def next(self) -> Memo:
        return Memo(self.digests.next(), self.contents.next(), self.stubs.next())


@dataclass(frozen=True, slots=True)
class PolicyResult:
    messages: list[dict[str, Any]]
    changed: bool
    removed_messages: int = 0
    removed_tokens: int = 0
    note: str = ""
    cut: CutState | None = None
    """Set by policies that cut the history, so the next turn can reuse the cut."""


class Policy(Protocol):
    name: str

    async def apply(self, messages: Sequence[Message], ctx: PolicyContext) -> PolicyResult: ...
