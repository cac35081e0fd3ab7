"""Recall: a new conversation that starts over gets its workspace's session memories.

On the first request of a conversation (no assistant message yet, one user message)
whose user message starts with a start-over phrase (``recall.phrases``), or that
carries ``x-handoff-recall: last|auto|<session id>``, one marked message goes in after
the system prompt with what the injected :data:`RecallSource` finds, within a token
cap. The engine keeps the message it inserted and puts the very same object back on
every later turn of that conversation, so the forwarded prefix stays byte-identical
(provider prompt caches). Memories live in the store, a later stage: the server
injects the source, as it injects the summarizer.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from policies.memory import starts_with_phrase
from policies.trim import text_of
from policies.units import HANDOFF_MARK, PINNED_ROLES
from proxy.config import RecallSettings
from proxy.ingress.chat_request import ChatRequest, Message

HEADER = "x-handoff-recall"
RECALLED_HEADER = "x-handoff-recalled"
CAPACITY = 4096
"""Conversations whose recalled message is kept for replay (least recently used go)."""


@dataclass(frozen=True, slots=True)
class RecallAsk:
    """What a recall looks for: ``mode`` is ``auto`` (best match to ``query``), ``last``
    (the newest memory) or a session id; ``count`` gives a text's tokens for the model."""

    workspace: str
    mode: str
    query: str
    max_tokens: int
    count: Callable[[str], int]
    limit: int = 3


@dataclass(frozen=True, slots=True)
class Recalled:
    text: str  # the body of the message to insert (within the cap)
    sessions: tuple[str, ...]


RecallSource = Callable[[RecallAsk], Awaitable[Recalled | None]]
"""Finds the memories to recall (the server's reads the store); None when none fits."""


@dataclass(frozen=True, slots=True)
class Recall:
    """A request with the recalled message in it, and how to say so in its plan."""

    request: ChatRequest
    message: Message
    sessions: tuple[str, ...]
    tokens: int
    replayed: bool

    def step(self) -> dict[str, Any]:
        return {
            "policy": "recall",
            "removed_messages": 0,
            "removed_tokens": 0,
            "note": f"{'replayed' if self.replayed else 'recalled'} the memory of "
            f"{', '.join(self.sessions)} ({self.tokens} tokens)",
            "sessions": list(self.sessions),
            "tokens": self.tokens,
        }


def opening_key(messages: Sequence[Message]) -> str | None:
    """The conversation's address: its messages up to the first user message."""
    h = hashlib.sha256()
    for m in messages:
        h.update(orjson.dumps(m, option=orjson.OPT_SORT_KEYS))
        if m.get("role") == "user":
            return h.hexdigest()
    return None


def insert_at(messages: Sequence[Message]) -> int:
    """After the leading system and developer messages."""
    i = 0
    while i < len(messages) and messages[i].get("role") in PINNED_ROLES:
        i += 1
    return i


def is_first_request(messages: Sequence[Message]) -> bool:
    """A conversation's first request: its system prompt, if any, and one user message.
    (Stops at the first other message, so a long history costs nothing.)"""
    last = len(messages) - 1
    if last < 0 or messages[last].get("role") != "user":
        return False
    i = 0
    while i < last and messages[i].get("role") in PINNED_ROLES:
        i += 1
    return i == last


class Recaller:
    """Decides whether a request recalls, asks the source, and replays what it inserted."""

    def __init__(self, settings: RecallSettings, source: RecallSource) -> None:
        self.settings = settings
        self.source = source
        self._kept: OrderedDict[str, tuple[Message, tuple[str, ...], int]] = OrderedDict()

    def _ask(self, req: ChatRequest, headers: Mapping[str, str]) -> tuple[str, str] | None:
        """(mode, query) if this first request recalls."""
        text = text_of(req.messages[-1].get("content"))
        header = (headers.get(HEADER) or "").strip()
        if header:
            return header, text
        rest = starts_with_phrase(text, self.settings.phrases)
        return None if rest is None else ("auto", rest)

    async def apply(
        self,
        req: ChatRequest,
        workspace: str,
        headers: Mapping[str, str],
        cap: Callable[[], Awaitable[tuple[int, Callable[[str], int]]]],
    ) -> Recall | None:
        """``req`` with its recalled message, or None. ``cap`` gives the token cap and a
        counter for the target model (asked only when a recall is due)."""
        if not self.settings.enabled or req.render is not None or not req.messages:
            return None  # (Chat Completions only: other wire formats place system text apart)
        first = is_first_request(req.messages)
        if not first and not self._kept:
            return None  # (nothing recalled yet: a later turn costs no hashing)
        opening = opening_key(req.messages)
        if opening is None:
            return None
        key = f"{workspace}\x00{opening}"  # (never replayed into another workspace)
        kept = self._kept.get(key)
        if kept is not None:
            self._kept.move_to_end(key)
            return _with(req, *kept, replayed=True)
        if not first:
            return None  # never mid-conversation
        ask = self._ask(req, headers)
        if ask is None:
            return None
        max_tokens, count = await cap()
        found = await self.source(
            RecallAsk(workspace, ask[0], ask[1], max_tokens, count, self.settings.memories)
        )
        if found is None:
            return None
        message = {"role": "system", "content": found.text}
        tokens = count(found.text)
        self._kept[key] = (message, found.sessions, tokens)
        if len(self._kept) > CAPACITY:
            self._kept.popitem(last=False)
        return _with(req, message, found.sessions, tokens, replayed=False)


def _with(
    req: ChatRequest, message: Message, sessions: tuple[str, ...], tokens: int, replayed: bool
) -> Recall:
    at = insert_at(req.messages)
    messages = (*req.messages[:at], message, *req.messages[at:])
    origins = [*range(at), None, *range(at, len(req.messages))]
    body = {**req.body, "messages": list(messages)}
    new = ChatRequest(req.model, messages, body, req.rendered(messages, origins))
    return Recall(new, message, sessions, tokens, replayed)


def marked(text: str) -> str:
    """The recalled message's text, marked as handoff's."""
    return (
        f"{HANDOFF_MARK}recalled memory of earlier sessions in this workspace; they are not "
        f"part of this conversation, use them as background]\n\n{text}"
    )


def compose(
    memories: Sequence[Mapping[str, Any]], max_tokens: int, count: Callable[[str], int]
) -> Recalled | None:
    """The recalled message for ``memories`` (best first): as many whole as fit in
    ``max_tokens``, the first cut short if even it alone does not; None if none fits."""
    picked: list[str] = []
    sessions: list[str] = []
    for m in memories:
        block = f"## Session {m['session_id']} ({m['turns']} turns)\n\n{m['text']}"
        if count(marked("\n\n".join([*picked, block]))) <= max_tokens:
            picked.append(block)
            sessions.append(str(m["session_id"]))
        elif not picked:
            cut = _shortest_over(block, max_tokens, count)
            if cut:
                picked.append(cut)
                sessions.append(str(m["session_id"]))
            break
    if not picked:
        return None
    return Recalled(marked("\n\n".join(picked)), tuple(sessions))


def _shortest_over(block: str, max_tokens: int, count: Callable[[str], int]) -> str:
    """The longest start of ``block`` (with a marker) whose message fits, or ``""``."""
    lo, hi, best = 0, len(block), ""
    while lo <= hi:
        mid = (lo + hi) // 2
        text = block[:mid].rstrip() + " […]"
        if count(marked(text)) <= max_tokens:
            best, lo = text, mid + 1
        else:
            hi = mid - 1
    return best if len(best) > 40 else ""
