"""Put what importers read into the store, once: a conversation already there (by its
source key, or a document by its id) is skipped and said so."""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from proxy.store import admin, portable
from proxy.store.db import connect
from proxy.store.errors import InvalidDocument
from proxy.store.importers.base import Reading
from proxy.store.importers.document import document
from proxy.store.read import SqliteReader


@dataclass(frozen=True, slots=True)
class Outcome:
    source: str  # the file, and the conversation's key in it
    session_id: str | None  # the new session, or the one already holding it
    imported: bool
    reason: str = ""
    notes: tuple[str, ...] = ()


def load(
    store: Path, reading: Reading, where: str, workspace: str, keep_workspace: bool
) -> list[Outcome]:
    """Import ``reading``'s conversations into ``workspace`` (a portable document keeps
    its own when ``keep_workspace``)."""
    now = time.time()
    out: list[Outcome] = []
    for conv in reading.conversations:
        doc = document(conv, workspace, now)
        out.append(_one(store, doc, f"{where} ({conv.key})", tuple(conv.notes)))
    for doc in reading.documents:
        doc = doc if keep_workspace else {**doc, "workspace": workspace}
        out.append(_one(store, doc, f"{where} ({doc['conversation_id']})", ()))
    return out


def _one(store: Path, doc: dict[str, Any], source: str, notes: tuple[str, ...]) -> Outcome:
    held = _already(store, doc)
    if held is not None:
        return Outcome(source, held, False, _held_reason(store, held, doc), notes)
    try:
        sid = admin.import_document(store, doc)
    except InvalidDocument as e:
        return Outcome(source, None, False, str(e), notes)
    return Outcome(source, sid, True, "", notes)


def _held_reason(store: Path, held: str, doc: dict[str, Any]) -> str:
    """Why ``doc`` is skipped; says so when its source has grown since it was imported
    (a Codex or Claude Code session continued): that is not merged in."""
    _, turns = SqliteReader(store).turns(held)
    last = turns[-1]
    stored = len(last["history"]) + (last["reply"] is not None)
    more = len(doc["messages"]) - stored
    if more > 0:
        return f"already in this store; the source has {more} message(s) more, not merged in"
    return "already in this store"


def _already(store: Path, doc: dict[str, Any]) -> str | None:
    """The session that already holds ``doc``: the same id, or the same imported source."""
    if not store.exists():
        return None
    db = connect(store)
    try:
        row = db.execute("SELECT id FROM sessions WHERE id = ?", (doc["conversation_id"],))
        found = row.fetchone()
        name = doc.get("name")
        if found is None and isinstance(name, str) and name.startswith(portable.IMPORTED):
            found = db.execute(
                "SELECT id FROM sessions WHERE workspace = ? AND hint = ?", (doc["workspace"], name)
            ).fetchone()
        return None if found is None else str(found[0])
    except sqlite3.Error:
        return None
    finally:
        db.close()
