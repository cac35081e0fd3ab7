"""The built-in window table, read from ``proxy/data/models.json``.

The figures live in a data file, not code, so a new model is a one-line change and
each entry names the page its numbers came from (see the file's ``sources``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any


@dataclass(frozen=True, slots=True)
class BuiltinEntry:
    """One model family's published limits, with the names it is also known by."""

    name: str
    context_window: int
    max_output_tokens: int
    tokenizer: str | None
    source_url: str
    aliases: tuple[str, ...] = ()


def load_builtin() -> list[BuiltinEntry]:
    """Parse the packaged table; raises if the file is malformed (a packaging bug)."""
    raw = resources.files("proxy").joinpath("data", "models.json").read_text("utf-8")
    return parse_table(json.loads(raw))


def parse_table(data: dict[str, Any]) -> list[BuiltinEntry]:
    """Turn the JSON table into entries, resolving each ``src`` to its URL."""
    sources: dict[str, str] = data["sources"]
    return [
        BuiltinEntry(
            name=m["name"].lower(),
            context_window=int(m["context_window"]),
            max_output_tokens=int(m["max_output_tokens"]),
            tokenizer=m.get("tokenizer"),
            source_url=sources[m["src"]],
            aliases=tuple(a.lower() for a in m.get("aliases", ())),
        )
        for m in data["models"]
    ]
