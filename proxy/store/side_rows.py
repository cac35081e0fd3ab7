"""What both SQLite stores (writer thread or process) answer the same way: calibration,
learned limits and summaries read from the file and queued through the writer, and a
reader. (Memories are queued to each store's writer too, by its own ``save_memory``.)"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from proxy.store.calibration import (
    limits_row,
    load_calibration,
    load_limits,
    load_summary,
    summary_row,
)
from proxy.store.read import SqliteReader


class SideRows:
    """Mixed into a store that has ``path``, ``redact`` and ``save_calibration``."""

    path: Path
    redact: bool

    def save_calibration(self, data: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def load_calibration(self) -> dict[str, Any]:
        return load_calibration(self.path)

    def save_limits(self, data: Mapping[str, Any]) -> None:
        self.save_calibration(limits_row(data))

    def load_limits(self) -> dict[str, Any]:
        return load_limits(self.path)

    def save_summary(self, key: str, text: str) -> None:
        self.save_calibration(summary_row(key, text))

    def load_summary(self, key: str) -> str | None:
        return load_summary(self.path, key)

    def reader(self) -> SqliteReader:
        return SqliteReader(self.path)
