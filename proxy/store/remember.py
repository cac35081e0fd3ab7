"""A session's memory record: built from its messages, refined by an LLM when one is given.

Used by the proxy's memory keeper (after a turn), ``handoff sessions remember`` and the
MCP ``remember`` tool alike, so every path writes the same memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

import structlog

from policies.digest import Item
from policies.memory import build_memory
from proxy.decide.memory_llm import sections
from proxy.store.base import MemoryRecord, StoreReader

log = structlog.get_logger("handoff.memory")

Refine = Callable[[Sequence[Mapping[str, Any]], str], Awaitable[str]]
"""Writes the LLM memory of the messages, given the deterministic one as a draft."""


def user_turns(messages: Sequence[Mapping[str, Any]]) -> int:
    return sum(m.get("role") == "user" for m in messages)


async def remembered(
    workspace: str,
    session_id: str,
    messages: Sequence[Mapping[str, Any]],
    reason: str,
    *,
    skip: Sequence[str] = (),
    refine: Refine | None = None,
    found: Sequence[Item] | None = None,
) -> MemoryRecord:
    """The memory of ``messages``: the LLM's when ``refine`` answers with every section,
    else the deterministic one (a failure is logged, never raised). ``found``: the digest
    items of ``messages``, when the caller folded them as the session grew."""
    # A long session's extraction takes milliseconds: off the event loop.
    memory = await asyncio.to_thread(build_memory, messages, skip, found)
    text = memory.render()
    record = MemoryRecord(
        workspace, session_id, memory.as_dict(), text, "digest", reason, user_turns(messages)
    )
    if refine is None:
        return record
    try:
        refined = await refine(messages, text)
        parts = sections(refined)
    except Exception as e:  # any failure of the LLM keeps the digest
        log.warning("memory_llm_failed", session=session_id, error=str(e)[:300])
        return record
    return MemoryRecord(
        workspace,
        session_id,
        {**memory.as_dict(), "llm": parts},
        refined.strip(),
        "llm",
        reason,
        record.turns,
    )


def session_messages(reader: StoreReader, ref: str) -> tuple[dict[str, Any], list[Any]]:
    """A stored session's summary and its final history (last history and reply)."""
    info, turns = reader.turns(ref)
    last = turns[-1]
    return info, [*last["history"], *([last["reply"]] if last["reply"] is not None else [])]
