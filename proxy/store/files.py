"""The store's files on disk: private whatever the umask, and a warning for what is not.

What handoff creates is made 0700 (directories, each missing parent included) or 0600
(the database, its lock), and set so explicitly: ``mkdir(parents=True)`` gives the
parents ``0777 & ~umask``. SQLite makes the -wal and -shm files with the database's own
mode. What handoff finds already there and open to others is warned about, once, when
the writer claims the store; the database and its -wal/-shm are tightened to 0600 when
this user owns them, a directory it did not create is left as it is.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

import structlog

log = structlog.get_logger("handoff.store")

DIR_MODE = 0o700
FILE_MODE = 0o600
SIDE_FILES = ("-wal", "-shm")
"""SQLite's companions of a WAL database, named after it."""


def make_dirs(path: Path) -> None:
    """Create ``path`` and any missing parents, each 0700."""
    missing: list[Path] = []
    at = path
    while not at.exists():
        missing.append(at)
        if at.parent == at:
            break
        at = at.parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):  # (made meanwhile by another process)
            d.mkdir(mode=DIR_MODE)
            os.chmod(d, DIR_MODE)
    if not path.is_dir():
        raise FileExistsError(errno.EEXIST, "File exists: not a directory", str(path))


def open_private(path: Path, flags: int = os.O_WRONLY) -> int:
    """A descriptor on ``path``; created 0600 if it does not exist yet."""
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        return os.open(path, flags | os.O_CLOEXEC)
    try:
        os.fchmod(fd, FILE_MODE)
    except OSError:
        os.close(fd)
        raise
    return fd


def tighten(db: Path) -> None:
    """Warn (one event) about the store's directory and files that others may read;
    make the database and its -wal/-shm 0600 where this user owns them."""
    loose: list[str] = []
    tightened: list[str] = []
    with contextlib.suppress(OSError):
        mode = db.parent.stat().st_mode
        # A shared sticky directory (/tmp) is as meant: others can list it, not touch ours.
        if stat.S_ISDIR(mode) and mode & 0o077 and not mode & stat.S_ISVTX:
            loose.append(f"{db.parent} {mode & 0o777:04o}")
    for p in (db, *(Path(f"{db}{s}") for s in SIDE_FILES)):
        try:
            st = p.stat()
        except OSError:
            continue
        if not st.st_mode & 0o077:
            continue
        loose.append(f"{p} {st.st_mode & 0o777:04o}")
        if st.st_uid == os.geteuid():
            with contextlib.suppress(OSError):
                os.chmod(p, FILE_MODE)
                tightened.append(str(p))
    if loose:
        log.warning(
            "store_permissions_loose",
            found=loose,
            tightened_to_0600=tightened,
            hint="others on this machine may read or list the snapshots",
        )
