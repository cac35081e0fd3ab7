"""Recall: a new conversation that starts over gets its workspace's session memories.

On the first request of a conversation (no assistant message yet, one user message)
whose user message starts with a start-over phrase (``recall.phrases``), or that
carries ``x-handoff-recall: last|auto|<session id>``, one marked message goes in after
the system prompt with what the injected :data:`RecallSource` finds, within a token
cap. The engine keeps the message it inserted and puts the very same object back on
every later turn of that conversation, so the forwarded prefix stays byte-identical
(provider prompt caches); after a restart it takes it from the store's record of the
conversation's first turn. A conversation is known by its opening (system prompt and
first user message) within its workspace: two that open alike share the newest recall.
Memories live in the store, a later stage: the server injects the source, as it
injects the summarizer.
"""

from __future__ import annotations

import dataclasses
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
from proxy.decide.plan import Plan
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
    opening: tuple[Message, ...] = ()
    """For ``replay``: the conversation's messages up to its first user message, whose
    recorded first turn holds the message to insert again (after a restart)."""


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


def token_cap(settings: RecallSettings, budget: int | None) -> int:
    """The recalled message's token cap: ``recall.max_tokens``, and never more than
    ``recall.max_share`` of the model's prompt budget (None: the model is unknown)."""
    if budget is None:
        return settings.max_tokens
    return min(settings.max_tokens, int(budget * settings.max_share))


def recalled_plan(plan: Plan, recall: Recall) -> Plan:
    """``plan`` for the request with its recalled message: recorded like a compression
    step, and said in ``x-handoff-recalled``."""
    if plan.forwarded is None:
        plan.forwarded = [dict(m) for m in recall.request.messages]
    d = plan.decision
    if d is not None:  # (a copy: the fast path's decision is shared)
        plan.decision = dataclasses.replace(
            d, policies=(*d.policies, "recall"), steps=(*d.steps, recall.step())
        )
    headers = {**plan.response_headers, RECALLED_HEADER: ",".join(recall.sessions)}
    applied = headers.get("x-handoff-policy")
    headers["x-handoff-policy"] = f"{applied},recall" if applied else "recall"
    plan.headers = headers
    return plan


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
        self._looked: OrderedDict[str, None] = OrderedDict()  # replays looked for in vain
        self._prints: set[tuple[object, ...]] = set()  # cheap marks of the kept openings

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
        if (
            not first
            and _print(req.messages) not in self._prints
            and not self._opens_as_recall(req, headers)
        ):
            return None  # (nothing to replay: a later turn costs no hashing)
        opening = opening_key(req.messages)
        if opening is None:
            return None
        key = f"{workspace}\x00{opening}"  # (never replayed into another workspace)
        if not first:  # never recalled mid-conversation: what the first turn got, again
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
                return _with(req, *kept, replayed=True)
            return await self._replay(req, workspace, headers, key, cap)
        # A first request recalls afresh (a new conversation may open as an earlier one
        # did; the newest recall is the one its later turns replay).
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
        self._keep(req, key, (message, found.sessions, tokens))
        return _with(req, message, found.sessions, tokens, replayed=False)

    def _opens_as_recall(self, req: ChatRequest, headers: Mapping[str, str]) -> bool:
        """Did this conversation open as a recall would (the header, or its first user
        message starting with a phrase)?"""
        at = insert_at(req.messages)
        if at >= len(req.messages) or req.messages[at].get("role") != "user":
            return False
        text = text_of(req.messages[at].get("content"))
        return (
            bool(headers.get(HEADER)) or starts_with_phrase(text, self.settings.phrases) is not None
        )

    def _keep(self, req: ChatRequest, key: str, kept: tuple[Message, tuple[str, ...], int]) -> None:
        self._kept[key] = kept
        if len(self._prints) >= 2 * CAPACITY:
            self._prints.clear()  # (a lost mark costs a replay lookup, once)
        self._prints.add(_print(req.messages))
        if len(self._kept) > CAPACITY:
            self._kept.popitem(last=False)

    async def _replay(
        self,
        req: ChatRequest,
        workspace: str,
        headers: Mapping[str, str],
        key: str,
        cap: Callable[[], Awaitable[tuple[int, Callable[[str], int]]]],
    ) -> Recall | None:
        """A later turn of a conversation this process did not see begin (a restart): if
        it opened as a recall would, the store's record of its first turn gives the very
        message inserted then. Looked up once per conversation."""
        if key in self._looked or not self._opens_as_recall(req, headers):
            return None
        opening = req.messages[: insert_at(req.messages) + 1]
        self._looked[key] = None
        if len(self._looked) > CAPACITY:
            self._looked.popitem(last=False)
        _, count = await cap()
        found = await self.source(RecallAsk(workspace, "replay", "", 0, count, 0, opening))
        if found is None:
            return None
        kept = ({"role": "system", "content": found.text}, found.sessions, count(found.text))
        self._keep(req, key, kept)
        return _with(req, *kept, replayed=True)


def _print(messages: Sequence[Message]) -> tuple[object, ...]:
    """A cheap mark of a conversation's opening (its texts' lengths, the start of its first
    user message), so that only a conversation that may have been recalled is hashed."""
    at = insert_at(messages)
    texts = [m.get("content") for m in messages[: at + 1]]
    lengths = tuple(len(t) if isinstance(t, str) else -1 for t in texts)
    head = texts[-1][:64] if texts and isinstance(texts[-1], str) else None
    return (*lengths, head)


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
