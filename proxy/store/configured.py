"""The store the settings ask for: SQLite, its writer a thread or a process of its own.

The server asks only for a :class:`~proxy.store.base.Store`; which writer runs, and
the speed machinery behind it, stay the store's own choice.
"""

from __future__ import annotations

import os

from proxy.config import Settings, StoreSettings
from proxy.store.base import Store
from proxy.store.process import ProcessStore
from proxy.store.sqlite import SqliteStore


def store_writer(s: StoreSettings) -> str:
    """``store.writer`` resolved: auto is a process when this process may use >1 CPU."""
    if s.writer == "auto":
        return "process" if len(os.sched_getaffinity(0)) > 1 else "thread"
    return s.writer


def open_store(settings: Settings) -> Store | None:
    """The configured store, not yet started (None when snapshots are off)."""
    if not settings.store.enabled:
        return None
    s = settings.store
    if store_writer(s) == "process":
        return ProcessStore(
            settings.store_path(),
            flush_interval_s=s.flush_interval_s,
            redact=s.redact,
            max_bytes=s.max_bytes,
            log_format=settings.server.log_format,
        )
    return SqliteStore(
        settings.store_path(),
        flush_interval_s=s.flush_interval_s,
        redact=s.redact,
        max_bytes=s.max_bytes,
    )
