"""One writer per SQLite store: an exclusive ``flock`` on ``<db>.lock``, held for its life.

Two proxies on one store corrupt nothing, but a conversation whose turns alternate
between them forks at nearly every turn: each writer threads a turn by what it has
written itself. Until a shared store exists, a second writer is refused, and told who
holds the store. The lock belongs to the open file, so it ends when its holder exits,
however it exits: a file left behind never blocks, and the pid written in it only names
the holder. A writer process inherits the descriptor: the lock lasts while an orphaned
writer finishes what a killed proxy had handed it, and a proxy started meanwhile waits
for that (``DRAIN_WAIT_S`` at most). Readers take no lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

import structlog

from proxy.store.errors import StoreInUse
from proxy.store.files import make_dirs, open_private, tighten

log = structlog.get_logger("handoff.store")

DRAIN_WAIT_S = 30.0
"""How long a proxy waits for the writer of a proxy that died to finish and let go."""


class WriterLock:
    """The lock on one store, taken by :func:`claim`."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def release(self) -> None:
        """Let go (closing the descriptor; a writer process holding it keeps it)."""
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


def lock_path(db: Path) -> Path:
    return Path(f"{db}.lock")


def claim(db: Path, drain_wait_s: float = DRAIN_WAIT_S) -> WriterLock:
    """Make the store's directory (private), take the store's lock, and check what others
    may read (``tighten``): :class:`StoreInUse` if another live process holds the lock;
    ``OSError`` if the lock file cannot be made (then the store cannot be written
    either, and the caller reports that)."""
    make_dirs(db.parent)
    fd = open_private(lock_path(db), os.O_RDWR)
    try:
        _lock(fd, db, drain_wait_s)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    tighten(db)  # (once ours: a refused second writer says only that)
    return WriterLock(fd)


def _lock(fd: int, db: Path, drain_wait_s: float) -> None:
    deadline = time.monotonic() + drain_wait_s
    logged = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        pid = _holder(fd)
        if pid is not None and _alive(pid):
            raise StoreInUse(
                f"the store {db} is in use by another handoff (pid {pid}): stop that one, "
                "or give this one a store of its own (--store PATH)"
            )
        if time.monotonic() >= deadline:
            raise StoreInUse(
                f"the store {db} is still locked by the writer of a handoff that has exited"
                f"{f' (pid {pid})' if pid else ''}; try again once it has finished"
            )
        if not logged and pid is not None:  # its proxy is gone: its writer is finishing
            log.warning("store_waiting_for_previous_writer", path=str(db), pid=pid)
            logged = True
        time.sleep(0.05)


def _holder(fd: int) -> int | None:
    """The pid the holder wrote in the lock file, if it did."""
    try:
        return int(os.pread(fd, 32, 0).split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's process
    return True
