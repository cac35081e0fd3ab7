"""Export a session (up to a turn) as portable JSON, an OpenAI request, or Markdown."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Literal

from proxy.store import markdown, portable
from proxy.store.base import StoreReader

Format = Literal["portable", "openai", "markdown"]
FORMATS: tuple[Format, ...] = ("portable", "openai", "markdown")


def export(
    reader: StoreReader,
    ref: str,
    fmt: Format,
    turn: int | None = None,
    now: float | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any] | str:
    """A dict (portable, openai) or a string (markdown); ``progress(done, total)`` is told
    of each turn read."""
    info, turns = reader.turns(ref, turn, progress)
    doc = portable.build(info, turns, time.time() if now is None else now)
    if fmt == "portable":
        return doc
    if fmt == "openai":
        return {"model": turns[-1]["model"], "messages": [m["message"] for m in doc["messages"]]}
    return markdown.render(doc)
