"""The memory keeper: writes a session's memory off the request path, when it is due.

After each recorded turn, :meth:`MemoryKeeper.note` decides (cheaply, on the loop)
whether the session's memory is due: at ``memory.every_turns`` user turns and every as
many more, when the conversation is first compressed, when it moves to another model,
or when the user asks (``memory.remember_phrases``). Due turns wait in a small queue
for one background task, owned by the app (started and awaited in its cleanup
context), that builds the memory (refined by the summarizer's LLM when one is
configured) and queues it to the store's writer, after the turn: the writer writes it
into the session it threaded the turn into, in its own transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from policies.digest import Item, add_items
from policies.memory import starts_with_phrase
from policies.trim import text_of
from proxy.config import Settings
from proxy.decide.cut_memory import conversation_key
from proxy.store.base import Store, TurnRecord, settled
from proxy.store.remember import Refine, remembered, user_turns

log = structlog.get_logger("handoff.memory")

QUEUE = 64
"""Due memories waiting; past it the newest is dropped (the next trigger writes it)."""
CLOSE_S = 10.0
"""How long closing waits for the memories due to be built."""
CONVERSATIONS = 4096


DRAFTS = 8
"""Conversations whose digest items the keeper keeps folded, with the history they
cover (to check that a later history starts with the same messages)."""
PHRASE_CHARS = 200
"""Only a message's start is compared with the remember phrases (it may be a long paste)."""


@dataclass(slots=True)
class _Seen:
    model: str
    compressed: bool
    written_at: int  # user turns when its memory was last written (0: never)
    counted: int = 0  # messages counted so far (a resent history is counted once)
    users: int = 0  # user messages among them


@dataclass(frozen=True, slots=True)
class _Due:
    turn: TurnRecord
    reason: str
    refine: Refine | None


@dataclass(slots=True)
class _Draft:
    history: list[Mapping[str, Any]]  # the messages folded so far
    found: dict[str, Item]


class _Drafts:
    """The digest items of the conversations the keeper wrote last, so a session's next
    memory extracts only the messages added since (its memory is the same, to the byte)."""

    def __init__(self) -> None:
        self._d: OrderedDict[int | str, _Draft] = OrderedDict()

    def items(
        self, history: Sequence[Mapping[str, Any]], reply: Mapping[str, Any] | None
    ) -> list[Item]:
        """``items(history + [reply])``, folding only what ``history`` adds to the last
        history of its conversation (all of it if that one is not its start)."""
        key = _opening(history)
        d = self._d.pop(key, None)
        if d is None or len(d.history) > len(history) or not _starts(history, d.history):
            d = _Draft([], {})
        add_items(d.found, history[len(d.history) :])
        d.history = list(history)
        self._d[key] = d
        if len(self._d) > DRAFTS:
            self._d.popitem(last=False)
        found = dict(d.found)
        if reply is not None:
            add_items(found, [reply])
        return list(found.values())


def _starts(history: Sequence[Mapping[str, Any]], start: Sequence[Mapping[str, Any]]) -> bool:
    return all(a is b or a == b for a, b in zip(history, start, strict=False))  # (start: shorter)


RefineFactory = Callable[[TurnRecord, Mapping[str, str]], "Refine | None"]


class MemoryKeeper:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        refine: RefineFactory | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.refine = refine
        self.queue: asyncio.Queue[_Due] = asyncio.Queue(QUEUE)
        self._seen: OrderedDict[int | str, _Seen] = OrderedDict()
        self._task: asyncio.Task[None] | None = None
        self._drafts = _Drafts()  # (touched only by the background task's threads)
        self.written = 0
        self.dropped = 0

    def note(self, turn: TurnRecord, headers: Mapping[str, str]) -> None:
        """Queue the turn's session memory if it is due (never blocks, never raises)."""
        try:
            reason = self._due(turn)
            if reason is None:
                return
            refine = self.refine(turn, headers) if self.refine is not None else None
            self.queue.put_nowait(_Due(turn, reason, refine))
        except asyncio.QueueFull:
            self.dropped += 1
        except Exception as e:  # the keeper must never break the proxy
            log.warning("memory_note_failed", error=repr(e))

    def _due(self, turn: TurnRecord) -> str | None:
        messages = turn.messages
        if not messages or turn.status != 200 or turn.cancelled:
            return None
        key = _opening(messages)
        seen = self._seen.get(key)
        compressed = turn.decision is not None and turn.decision.action == "compressed"
        if seen is None:
            seen = self._seen[key] = _Seen(turn.model, compressed, 0)
            if len(self._seen) > CONVERSATIONS:
                self._seen.popitem(last=False)
        self._seen.move_to_end(key)
        if len(messages) < seen.counted:  # (an edit or regenerate: count afresh)
            seen.counted = seen.users = 0
        seen.users += user_turns(messages[seen.counted :])
        seen.counted = len(messages)
        n = seen.users
        last = messages[-1]
        every = self.settings.memory.every_turns
        reason = None
        head = text_of(last.get("content"))[:PHRASE_CHARS]
        phrases = self.settings.memory.remember_phrases
        if last.get("role") == "user" and starts_with_phrase(head, phrases) is not None:
            reason = "asked"
        elif seen.model != turn.model:
            reason = "handoff"
        elif compressed and not seen.compressed:
            reason = "compressed"
        elif n >= max(every, 2 * seen.written_at):  # at 8 user turns, then each doubling
            reason = "turns"
        seen.model, seen.compressed = turn.model, compressed
        if reason is not None:
            seen.written_at = n
        return reason

    # -- the background task --------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="handoff-memory")

    async def close(self) -> None:
        """Write what is due (a few seconds at most), then stop."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.queue.join(), CLOSE_S)
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._task = None

    async def _run(self) -> None:
        while True:
            due = await self.queue.get()
            try:
                await self._write(due)
            except Exception as e:
                log.warning("memory_write_failed", error=repr(e))
            finally:
                self.queue.task_done()

    async def _write(self, due: _Due) -> None:
        turn = settled(due.turn)  # (a non-streamed answer is read here, off the request path)
        messages: Sequence[Mapping[str, Any]] = list(turn.messages)
        found = await asyncio.to_thread(self._drafts.items, messages, turn.reply)
        if turn.reply is not None:
            messages = [*messages, turn.reply]
        skip = [*self.settings.memory.remember_phrases, *self.settings.recall.phrases]
        record = await remembered(
            turn.workspace, "", messages, due.reason, skip=skip, refine=due.refine, found=found
        )
        # (the session is the writer's to name: the one it threads the turn into)
        self.store.save_memory(dataclasses.replace(record, of_turn=turn.started_at))
        self.written += 1


def _opening(messages: Sequence[Mapping[str, Any]]) -> int | str:
    """A cheap key for the conversation: its first two texts' hash (str hashes are
    cached by Python; a collision only shares a trigger's counts), else the cut memory's."""
    texts = tuple(m.get("content") for m in messages[:2])
    if all(isinstance(t, str) for t in texts):
        return hash(texts)
    return conversation_key(messages)
