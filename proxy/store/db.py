"""Opening the SQLite file: private permissions, WAL, migrations applied."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from proxy.store.errors import StoreMissingError, StoreUnreadable
from proxy.store.files import make_dirs, open_private
from proxy.store.migrations import migrate

# Python 3.11's sqlite3 binds only exact ints, floats, strs and bytearrays as they are. Any
# other value (None, bytes, a bool) is first offered for adapting, and the failed look-up of
# ``__adapt__`` on its protocol type formats an AttributeError each time, a visible share
# of the store writer's work a turn. Adapters
# that give the value back as it is take the registry's path instead; what is stored is
# unchanged (a bool was bound as an integer before too).
sqlite3.register_adapter(bytes, bytes)
sqlite3.register_adapter(bool, int)
sqlite3.register_adapter(type(None), {}.get)  # type: ignore[arg-type]  # (C: None in, None out)


def connect(
    path: str | Path, *, create: bool = True, busy_timeout_ms: int = 5000
) -> sqlite3.Connection:
    """An autocommit connection to ``path`` with WAL on and the schema up to date.

    With ``create`` the directories are made 0700 and the file 0600 before SQLite
    touches it, whatever the umask (``files``; its -wal and -shm files take the file's
    mode). Without it, a missing file raises :class:`StoreMissingError` instead of
    creating one.
    """
    path = Path(path)
    if not path.exists():
        if not create:
            raise StoreMissingError(f"no store at {path}")
        make_dirs(path.parent)
        os.close(open_private(path))
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute("PRAGMA temp_store = MEMORY")  # no temp file for a query's sort
        migrate(db)
    except sqlite3.DatabaseError as e:
        db.close()
        raise StoreUnreadable(
            f"{path} is not a handoff store that can be read ({e}); check the path, or move "
            "the file away to start a new store"
        ) from None
    except BaseException:
        db.close()
        raise
    return db
