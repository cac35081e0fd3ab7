"""The engine's recall source: a workspace's memories, read from the store off the loop."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import structlog

from proxy.decide.recall import RecallAsk, Recalled, RecallSource, compose
from proxy.store.base import StoreReader
from proxy.store.errors import StoreError

log = structlog.get_logger("handoff.recall")


def store_recall(reader: StoreReader) -> RecallSource:
    async def source(ask: RecallAsk) -> Recalled | None:
        return await asyncio.to_thread(find, reader, ask)

    return source


def memories_for(reader: StoreReader, ask: RecallAsk) -> list[dict[str, Any]]:
    """The memories ``ask`` names, of its workspace only, best first."""
    if ask.mode == "last":
        return reader.memories(ask.workspace, limit=1)
    if ask.mode == "auto":
        return reader.memories(ask.workspace, query=ask.query, limit=ask.limit)
    mem = reader.within(ask.workspace).memory(ask.mode)
    return [mem] if mem is not None and mem["workspace"] == ask.workspace else []


def find(reader: StoreReader, ask: RecallAsk) -> Recalled | None:
    """What to recall for ``ask``; None when nothing (or the store cannot be read)."""
    try:
        if ask.mode == "replay":
            hit = reader.recalled(ask.workspace, [dict(m) for m in ask.opening])
            content = hit[0].get("content") if hit is not None else None
            return (
                None
                if hit is None or not isinstance(content, str)
                else (Recalled(content, tuple(hit[1])))
            )
        return compose(memories_for(reader, ask), ask.max_tokens, ask.count)
    except (StoreError, sqlite3.Error) as e:  # (an unknown session id is a StoreError too)
        log.info("recall_found_nothing", error=str(e))
        return None
