"""The store's files on disk, private whatever the umask.

What handoff creates is made 0700 (directories, each missing parent included) or 0600
(the database, its lock), and set so explicitly: ``mkdir(parents=True)`` gives the
parents ``0777 & ~umask``. SQLite makes the -wal and -shm files with the database's own
mode.
"""

from __future__ import annotations

import contextlib
import errno
import os
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


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
