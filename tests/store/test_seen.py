"""The writer's filter of stored chain hashes: never a false "absent"."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from proxy.store.db import connect
from proxy.store.read import SqliteReader
from proxy.store.seen import SeenHashes
from proxy.store.sqlite import SqliteStore
from proxy.store.write import write_turn
from tests.store.test_fixtures import turn

SYS = {"role": "system", "content": "You are terse."}
U1 = {"role": "user", "content": "hello there"}
A1 = {"role": "assistant", "content": "hi"}
U2 = {"role": "user", "content": "and then?"}


@given(st.lists(st.binary(min_size=1, max_size=64), max_size=50))
@example([b"\x00" * 32, b"\xff" * 32])
def test_every_added_hash_may_be_stored(keys: list[bytes]) -> None:
    """A hash added to a loaded filter is never reported absent."""
    seen = SeenHashes(bits_log2=10)
    seen._bits = bytearray(1 << 7)  # loaded, empty
    hashes = [hashlib.sha256(k).digest() for k in keys]
    for h in hashes:
        seen.add(h)
    assert all(seen.may_have(h) for h in hashes)


def test_filter_is_loaded_from_the_database_and_rules_out_new_hashes(tmp_path: Path) -> None:
    """Loading reads every stored history and reply hash; a fresh hash is (here) absent."""
    db = connect(tmp_path / "h.db")
    db.execute("BEGIN")
    write_turn(db, turn([SYS, U1], A1), redact=False)
    db.execute("COMMIT")
    hashes = db.execute("SELECT history_hash, ext_hash FROM turns").fetchone()
    seen = SeenHashes()
    assert seen.may_have(b"\x01" * 32) and not seen.loaded  # unloaded: everything may be
    seen.load(db)
    assert seen.may_have(hashes[0]) and seen.may_have(hashes[1])
    assert not seen.may_have(hashlib.sha256(b"never stored").digest())


def test_writer_threads_onto_turns_another_connection_added(tmp_path: Path) -> None:
    """A turn imported by another connection is found by the running writer's next turn."""
    path = tmp_path / "h.db"
    store = SqliteStore(path)
    store.open()
    store.record(turn([{"role": "user", "content": "warm up"}], A1))
    while store.health().queue_depth:
        time.sleep(0.01)
    other = connect(path)
    other.execute("BEGIN")
    write_turn(other, turn([SYS, U1], A1), redact=False)
    other.execute("COMMIT")
    other.close()
    store.record(turn([SYS, U1, A1, U2], A1))
    store.shutdown()
    turns = sorted(s["turns"] for s in SqliteReader(path).list_sessions())
    assert turns == [1, 2]
