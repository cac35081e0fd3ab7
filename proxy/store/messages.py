"""Messages as the store keeps them: once each, addressed by digest, searchable as text."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from proxy.store.canonical import pack_body
from proxy.store.known import Known


def message_text(msg: Mapping[str, Any]) -> str:
    """The searchable text of a message: content parts, names, tool-call arguments."""
    parts: list[str] = []
    content = msg.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        parts.extend(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    calls = msg.get("tool_calls")
    for call in calls if isinstance(calls, list) else ():
        if isinstance(call, Mapping) and isinstance(call.get("function"), Mapping):
            parts.append(str(call["function"].get("name", "")))
            parts.append(str(call["function"].get("arguments", "")))
    return "\n".join(p for p in parts if p)


def squeeze(text: str, width: int = 80) -> str:
    """``" ".join(text.split())[:width]``, reading only as much of ``text`` as it needs.

    Squeezing a prefix of ``text`` gives a prefix of squeezing all of it (a word cut
    short is a prefix of the word), so a long enough one is the answer.
    """
    head = " ".join(text[: 4 * width].split())
    if len(head) >= width:
        return head[:width]
    return " ".join(text.split())[:width]


def put_message(
    db: sqlite3.Connection, body: bytes | Callable[[], bytes], h: bytes, known: Known
) -> int:
    """The id of the message with digest ``h``, inserting its canonical ``body`` if new.

    A new body is stored packed (zlib when smaller) and the indexer indexes it later:
    packing later, by UPDATE, shrank rows in place and left the pages half empty until
    a VACUUM. ``body`` may be a callable, so a message the writer knows is not serialised.
    """
    mid = known.message_ids.get(h)
    if mid is not None:
        return mid
    raw = pack_body(body() if callable(body) else body)
    cur = db.execute("INSERT OR IGNORE INTO messages (hash, body) VALUES (?, ?)", (h, raw))
    if cur.rowcount == 1:
        assert cur.lastrowid is not None
        mid = cur.lastrowid
        known.inserted += 1
    else:
        mid = int(db.execute("SELECT id FROM messages WHERE hash = ?", (h,)).fetchone()[0])
    known.message_ids[h] = mid
    return mid
