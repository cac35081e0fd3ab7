"""How many turns a writer process has committed, counted in the transactions themselves.

When a writer process dies, the turns it had been handed and not committed are lost:
what it had read and what still waited in its pipe. Its last report can lag its last
commits, so a count by the report is off by up to a batch; this row is exact. The proxy
reads it once the writer is dead (:func:`committed`): lost = handed over - committed.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path


def begin(db: sqlite3.Connection, writer: str) -> None:
    """Start counting for ``writer`` (the proxy read its predecessors' rows already)."""
    db.execute("DELETE FROM writer_progress WHERE writer != ?", (writer,))
    db.execute("INSERT OR IGNORE INTO writer_progress VALUES (?, 0)", (writer,))


def advance(db: sqlite3.Connection, writer: str, turns: int) -> None:
    """Count ``turns`` more, inside the transaction that writes them."""
    db.execute("UPDATE writer_progress SET turns = turns + ? WHERE writer = ?", (turns, writer))


def committed(path: Path, writer: str) -> int | None:
    """The turns ``writer`` committed to the store at ``path``: 0 if it never counted
    (no store, or never opened), None if the store cannot be read to tell."""
    try:
        uri = path.resolve().as_uri() + "?mode=ro"
        db = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=5.0)
    except sqlite3.Error:
        return 0 if not path.exists() else None
    try:
        row = db.execute("SELECT turns FROM writer_progress WHERE writer = ?", (writer,))
        found = row.fetchone()
    except sqlite3.OperationalError as e:
        return 0 if "no such table" in str(e) else None
    except sqlite3.Error:
        return None
    finally:
        db.close()
    return int(found[0]) if found else 0
