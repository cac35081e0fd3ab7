"""Waiting for the memory keeper, which writes off the request path."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from proxy.store.read import SqliteReader


async def until(check: Callable[[], Any], timeout: float = 8.0) -> Any:
    """``check()``'s first true answer, polled (a liveness bound, not a timing check)."""
    async with asyncio.timeout(timeout):
        while not (found := check()):
            await asyncio.sleep(0.05)
    return found


def memories_in(db: Path) -> list[dict[str, Any]]:
    """Every session's memory in the store at ``db`` (none while it cannot be read yet)."""
    try:
        reader = SqliteReader(db)
        return [m for s in reader.list_sessions() if (m := reader.memory(s["id"])) is not None]
    except Exception:
        return []
