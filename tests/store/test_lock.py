"""One writer per SQLite store: a second ``handoff serve`` on the same file is refused,
readers are not, and the lock ends with its holder."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import pytest

from proxy.store.errors import StoreInUse
from proxy.store.lock import claim, lock_path
from proxy.store.process import ProcessStore
from proxy.store.read import SqliteReader
from proxy.store.sqlite import SqliteStore
from tests.fake_upstream import FakeUpstream, free_port
from tests.server.test_faults import BOUND, stored_turns, until
from tests.server.test_shutdown import ROOT, handoff_serve, read_stream


def _cli(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """``handoff ARGS`` to completion (bounded), its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "proxy.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "HANDOFF_CONFIG": ""},
    )


@pytest.mark.slow
async def test_a_second_server_on_the_same_store_is_refused(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """While one ``handoff serve`` writes a store, a second on the same file exits non-zero
    with one line naming the holder's pid (no traceback); ``sessions list`` still reads;
    once the first has stopped, the file's stale pid does not block the next."""
    db = tmp_path / "h.db"
    args = ["--upstream", fake_upstream.url, "--store", str(db)]
    async with handoff_serve(tmp_path, args) as first:
        async with aiohttp.ClientSession(timeout=BOUND) as s:
            await read_stream(s, first.url, "from the first")
        await until(lambda: len(stored_turns(db)) == 1)
        second = await asyncio.to_thread(_cli, "serve", "--port", str(free_port()), *args)
        assert second.returncode not in (0, None)
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in second.stderr, second.stderr
        assert str(first.proc.pid) in lines[0] and str(db) in lines[0]
        assert "listening" not in second.stdout
        listed = await asyncio.to_thread(_cli, "sessions", "list", "--store", str(db), "--json")
        assert listed.returncode == 0 and "from the first" in listed.stdout
        first.proc.send_signal(signal.SIGTERM)
        assert await first.wait() == 0
    assert Path(f"{db}.lock").read_text().split()[0] == str(first.proc.pid)  # stale now
    async with handoff_serve(tmp_path, args) as again:
        async with aiohttp.ClientSession(timeout=BOUND) as s:
            await read_stream(s, again.url, "from the next")
        again.proc.send_signal(signal.SIGTERM)
        assert await again.wait() == 0
    assert {s["title"] for s in SqliteReader(db).list_sessions()} == {
        "from the first",
        "from the next",
    }


@pytest.mark.parametrize("kind", [SqliteStore, ProcessStore])
def test_a_second_writer_in_one_process_is_refused_until_the_first_closes(
    tmp_path: Path, kind: type[SqliteStore] | type[ProcessStore]
) -> None:
    """The lock is the store's own: a second store of either kind on the same file
    refuses to open, naming the holder; after the first shuts down it opens."""
    first = kind(tmp_path / "h.db")
    first.open()
    try:
        for other in (SqliteStore(tmp_path / "h.db"), ProcessStore(tmp_path / "h.db")):
            with pytest.raises(StoreInUse, match=rf"in use .*pid {os.getpid()}"):
                other.open()
    finally:
        first.shutdown()
    again = kind(tmp_path / "h.db")
    again.open()
    again.shutdown()
    assert again.health().write_failures == 0


def test_a_lock_held_by_the_writer_of_a_dead_proxy_is_waited_for(tmp_path: Path) -> None:
    """The pid in the lock file is dead but its writer process still holds the lock
    (draining what the killed proxy handed it): the next writer waits for it to exit,
    then takes the store; had the pid been alive, it would have been refused."""
    db = tmp_path / "h.db"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    fd = os.open(lock_path(db), os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    os.write(fd, f"{dead.pid}\n".encode())
    drain = "import sys; sys.stdin.read()"  # an orphaned writer: holds on until told
    orphan = subprocess.Popen([sys.executable, "-c", drain], stdin=subprocess.PIPE, pass_fds=(fd,))
    os.close(fd)
    assert orphan.stdin is not None
    t0 = time.monotonic()
    threading.Timer(0.3, orphan.stdin.close).start()
    lock = claim(db, drain_wait_s=20)
    try:
        assert time.monotonic() - t0 >= 0.3  # not before the orphan let go
        assert orphan.wait(5) == 0
        assert lock_path(db).read_text().split() == [str(os.getpid())]
    finally:
        lock.release()
