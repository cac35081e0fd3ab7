"""What opening, reading or importing a store can fail with::

StoreError
 ├── StoreMissingError   no store file at the path given (also a FileNotFoundError)
 ├── StoreUnreadable     the file is not an SQLite database handoff can read or migrate
 ├── SessionNotFound     no session has this id, id start or end, or client name
 ├── AmbiguousSession    the start or end matches several sessions
 ├── TurnNotFound        the session has no turn N
 ├── InvalidDocument     an import file is malformed; ``field`` names where
 └── StoreInUse          another process writes this store (``lock``)
"""

from __future__ import annotations

import sqlite3


class StoreError(Exception):
    """Base of the store's errors."""


class StoreMissingError(StoreError, FileNotFoundError):
    pass


class StoreUnreadable(StoreError, sqlite3.DatabaseError):
    """Also an ``sqlite3.DatabaseError``, so a writer that degrades on those does here."""


class SessionNotFound(StoreError, LookupError):
    pass


class AmbiguousSession(StoreError, LookupError):
    pass


class TurnNotFound(StoreError, LookupError):
    pass


class InvalidDocument(StoreError, ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class StoreInUse(StoreError):
    """Another process holds the store's writer lock; the message names it."""
