"""The token-count calibration's table: written by the writer, read at start-up."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from proxy.store.db import connect


def save_calibration(db: sqlite3.Connection, data: Mapping[str, Any]) -> None:
    db.executemany(
        "INSERT OR REPLACE INTO calibration (key, value) VALUES (?, ?)",
        [(str(k), orjson.dumps(v).decode()) for k, v in data.items()],
    )


LIMITS_KEY = "learned_limits"
"""The row that holds the windows learned from overflow errors (beside calibration's)."""


def limits_row(data: Mapping[str, Any]) -> dict[str, Any]:
    """The learned windows as a calibration save: one row of their own."""
    return {LIMITS_KEY: dict(data)}


SUMMARY_PREFIX = "summary:"
"""Rows ``summary:<hash>`` hold summaries the summarizer wrote, by what they summarize."""


def summary_row(key: str, text: str) -> dict[str, Any]:
    return {SUMMARY_PREFIX + key: text}


def load_summary(path: Path, key: str) -> str | None:
    """One saved summary (None if none or the store is unreadable)."""
    try:
        db = connect(path)
    except (sqlite3.Error, OSError):
        return None
    try:
        row = db.execute(
            "SELECT value FROM calibration WHERE key = ?", (SUMMARY_PREFIX + key,)
        ).fetchone()
    except sqlite3.Error:
        return None
    finally:
        db.close()
    value = orjson.loads(row[0]) if row else None
    return value if isinstance(value, str) else None


def load_limits(path: Path) -> dict[str, Any]:
    """The saved learned windows (empty if none or the store is unreadable)."""
    value = load_calibration(path).get(LIMITS_KEY)
    return value if isinstance(value, dict) else {}


def load_calibration(path: Path) -> dict[str, Any]:
    """The saved calibration (empty if none or the store is unreadable)."""
    try:
        db = connect(path)
    except (sqlite3.Error, OSError):
        return {}
    try:
        rows = db.execute(
            "SELECT key, value FROM calibration WHERE key NOT LIKE 'summary:%'"
        ).fetchall()
        return {k: orjson.loads(v) for k, v in rows}
    finally:
        db.close()
