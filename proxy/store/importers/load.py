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
    store: Path,
    reading: Reading,
    where: str,
    workspace: str,
    keep_workspace: bool,
    redact: bool = False,
) -> list[Outcome]:
    """Import ``reading``'s conversations into ``workspace`` (a portable document keeps
    its own when ``keep_workspace``); ``redact`` as the store is configured."""
    now = time.time()
    out: list[Outcome] = []
    for conv in reading.conversations:
        doc = document(conv, workspace, now)
        out.append(_one(store, doc, f"{where} ({conv.key})", tuple(conv.notes), redact))
    for doc in reading.documents:
        doc = doc if keep_workspace else {**doc, "workspace": workspace}
        out.append(_one(store, doc, f"{where} ({doc['conversation_id']})", (), redact))
    return out


def _one(
    store: Path, doc: dict[str, Any], source: str, notes: tuple[str, ...], redact: bool
) -> Outcome:
    held = _already(store, doc)
    try:
        if held is not None:
            return _grown(store, held, doc, source, notes, redact)
        sid = admin.import_document(store, doc, redact=redact)
    except InvalidDocument as e:
        return Outcome(source, None, False, str(e), notes)
    return Outcome(source, sid, True, "", notes)


def _grown(
    store: Path, held: str, doc: dict[str, Any], source: str, notes: tuple[str, ...], redact: bool
) -> Outcome:
    """``doc`` is in the store already: if its source has grown since (a Codex or Claude
    Code session continued), its new turns are added to the session."""
    _, turns = SqliteReader(store).turns(held)
    last = turns[-1]
    stored = [*last["history"], *([last["reply"]] if last["reply"] is not None else [])]
    messages = [m["message"] for m in doc["messages"]]
    if messages == stored:
        return Outcome(source, held, False, "already in this store", notes)
    grown = len(messages) > len(stored) and messages[: len(stored)] == stored
    if not grown or any("history" in t for t in doc["turns"]):
        why = "already in this store, and its source has changed since, not only grown"
        return Outcome(source, held, False, why, notes)
    new = [t for t in doc["turns"] if t["history_length"] + (t["reply"] is not None) > len(stored)]
    admin.append_turns(store, doc, held, new, redact=redact)
    return Outcome(source, held, True, f"{len(new)} new turn(s) added", notes)


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
