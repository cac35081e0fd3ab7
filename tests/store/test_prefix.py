"""The writer's prefix cache: same stored result as hashing everything, hit or miss."""

from __future__ import annotations

import copy
import sqlite3
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from proxy.store.base import TurnRecord
from proxy.store.db import connect
from proxy.store.known import Known
from proxy.store.prefix import PrefixCache, hash_all, is_plain
from proxy.store.read import SqliteReader
from proxy.store.redact import redact_json
from proxy.store.write import write_turn
from tests.store.test_fixtures import Msg, conversation, turn, write

SYS = {"role": "system", "content": "You are terse."}
U1 = {"role": "user", "content": "hello"}
A1 = {"role": "assistant", "content": "hi"}
U2 = {"role": "user", "content": "how are you"}
A2 = {"role": "assistant", "content": "fine"}
SECRET = "sk-proj-" + "a1B2" * 10

# Values == confuses: 1 == 1.0 == True and 0.0 == -0.0, yet each serialises differently.
TWINS: dict[Any, list[Any]] = {
    "one": [1, 1.0, True],
    "zero": [0, 0.0, -0.0, False],
}
number = st.sampled_from([*TWINS["one"], *TWINS["zero"]])
part = st.fixed_dictionaries({"type": st.just("text"), "text": st.sampled_from(["a", "b"])})
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "assistant", "tool"]),
        "content": st.one_of(
            st.none(), st.sampled_from(["hi", "yo", SECRET]), st.lists(part, max_size=2)
        ),
    },
    optional={"n": number, "tool_calls": st.lists(st.fixed_dictionaries({"index": number}))},
)


def _twin(value: Any, pick: int) -> Any:
    """An ==-equal copy of ``value`` whose numbers may be swapped for their twins."""
    if isinstance(value, dict):
        return {k: _twin(v, pick) for k, v in value.items()}
    if isinstance(value, list):
        return [_twin(v, pick) for v in value]
    for group in TWINS.values():
        if not isinstance(value, str) and value in group:
            return group[pick % len(group)]
    return value


@st.composite
def scripts(draw: st.DrawFn) -> list[TurnRecord]:
    """Turns that continue, edit, regenerate and retry earlier turns, resent as fresh copies."""
    turns: list[TurnRecord] = []
    extended: list[list[Msg]] = []
    for i in range(draw(st.integers(1, 8))):
        base: list[Msg] = []
        go_back: bool = draw(st.booleans())
        if extended and go_back:
            k = draw(st.sampled_from([len(extended) - 1, draw(st.integers(0, len(extended) - 1))]))
            cut = draw(st.integers(0, len(extended[k])))
            pick = draw(st.integers(0, 3))
            twin = draw(st.booleans())
            base = [_twin(m, pick) if twin else copy.deepcopy(m) for m in extended[k][:cut]]
        history = base + draw(st.lists(message, min_size=0 if base else 1, max_size=3))
        reply = draw(st.none() | message)
        forwarded = None
        if draw(st.booleans()):
            kept = draw(st.lists(st.sampled_from(history), max_size=len(history)))
            forwarded = [*kept, {"role": "system", "content": "note"}]
        turns.append(
            turn(
                history,
                reply,
                started_at=1000.0 + i,
                workspace=draw(st.sampled_from(["w1", "w2"])),
                session_hint=draw(st.none() | st.just("named")),
                forwarded=forwarded,
            )
        )
        extended.append([*history, *([reply] if reply is not None else [])])
    return turns


def _store(
    path: Path,
    turns: Sequence[TurnRecord],
    cache: PrefixCache | None,
    redact: bool,
    known: Known | None = None,
) -> None:
    db = connect(path)
    try:
        for t in turns:
            db.execute("BEGIN")
            write_turn(db, t, redact=redact, cache=cache, known=known)
            db.execute("COMMIT")
    finally:
        db.close()


def _dump(path: Path) -> dict[str, Any]:
    """Every stored row, session ids replaced by their order of creation."""
    db = sqlite3.connect(path)
    order = [r[0] for r in db.execute("SELECT id FROM sessions ORDER BY rowid")]
    sid: dict[str | None, int | None] = {s: i for i, s in enumerate(order)}
    sid[None] = None
    turns = [
        (r[0], sid[r[1]], *r[2:]) for r in db.execute("SELECT * FROM turns ORDER BY id").fetchall()
    ]
    sessions = [
        (sid[r[0]], r[1], r[2], r[3], sid[r[4]], r[5], r[6])
        for r in db.execute(
            "SELECT id, workspace, hint, title, parent_session, parent_turn, head_turn"
            " FROM sessions ORDER BY rowid"
        )
    ]
    return {
        "messages": db.execute("SELECT * FROM messages ORDER BY id").fetchall(),
        "turns": turns,
        "sessions": sessions,
        "session_messages": sorted(
            (m, sid[s]) for m, s in db.execute("SELECT * FROM session_messages")
        ),
    }


def _read(path: Path) -> list[dict[str, Any]]:
    """Every session's turns as the reader returns them, minus the random session ids."""
    reader = SqliteReader(path)
    out = []
    for s in reader.list_sessions(limit=1000):
        for t in reader.turns(s["id"])[1]:
            out.append({k: v for k, v in t.items() if k != "session_id"})
    return out


@settings(max_examples=60, deadline=None)
@given(scripts(), st.booleans())
@example(
    [
        turn([{"role": "user", "content": None, "n": 1}], A1, started_at=1000.0),
        turn([{"role": "user", "content": None, "n": True}, A1, U2], A2, started_at=1001.0),
    ],
    False,
)
def test_cached_writer_stores_exactly_what_the_full_path_stores(
    turns: list[TurnRecord], redact: bool
) -> None:
    """With the prefix cache and remembered rows, the same rows and reads as querying everything."""
    with tempfile.TemporaryDirectory() as tmp:
        fast, slow = Path(tmp) / "fast.db", Path(tmp) / "slow.db"
        _store(fast, turns, PrefixCache(), redact, Known())
        _store(slow, turns, None, redact)
        assert _dump(fast) == _dump(slow)
        assert _read(fast) == _read(slow)


@st.composite
def extending(draw: st.DrawFn) -> list[TurnRecord]:
    """Turns built as the writer's decode builds them: an earlier turn's first messages,
    the very objects, then new ones (the earlier reply's twin among them, maybe), each
    saying so in ``extends``."""
    turns: list[TurnRecord] = []
    for i in range(draw(st.integers(1, 8))):
        history: list[Msg] = []
        extends = None
        if turns and draw(st.booleans()):
            k = draw(st.sampled_from([len(turns) - 1, draw(st.integers(0, len(turns) - 1))]))
            earlier = turns[k]
            cut = draw(st.integers(0, len(earlier.messages)))
            history = earlier.messages[:cut]
            if cut == len(earlier.messages) and earlier.reply is not None and draw(st.booleans()):
                history.append(_twin(earlier.reply, draw(st.integers(0, 3))))
            extends = (earlier.messages, cut)
        history += draw(st.lists(message, min_size=0 if history else 1, max_size=3))
        t = turn(history, draw(st.none() | message), started_at=1000.0 + i, workspace="w")
        t.extends = None if extends is None else (extends[0], min(extends[1], len(t.messages)))
        turns.append(t)
    return turns


@settings(max_examples=80, deadline=None)
@given(extending(), st.booleans())
def test_a_turn_known_to_extend_another_is_stored_as_hashing_everything_stores_it(
    turns: list[TurnRecord], redact: bool
) -> None:
    """Trusting ``extends`` for the remembered history (the reply still compared, by its
    bytes where ``==`` is loose) gives the same rows as hashing everything."""
    with tempfile.TemporaryDirectory() as tmp:
        fast, slow = Path(tmp) / "fast.db", Path(tmp) / "slow.db"
        _store(fast, turns, PrefixCache(), redact, Known())
        _store(slow, turns, None, redact)
        assert _dump(fast) == _dump(slow)


def test_a_turn_known_to_extend_the_remembered_one_is_not_compared() -> None:
    """The remembered history is taken on ``extends``' word: a later turn that says it
    extends the remembered list hits without its history being compared."""
    cache = PrefixCache()
    first = [SYS, U1]
    cache.remember("s", "w", first, cache.hash("w", first, _same), A1, _same)

    class Unequal(dict[str, Any]):
        def __eq__(self, other: object) -> bool:
            raise AssertionError("compared")

        __hash__ = None  # type: ignore[assignment]

    later = [first[0], first[1], dict(A1), U2]
    later[0] = Unequal(SYS)  # (not so, but comparing it would fail the test)
    got = cache.hash("w", later, _same, extends=(first, 2))
    assert (cache.hits, got.reused) == (1, 3)


@given(st.lists(st.lists(message, max_size=4), min_size=1, max_size=6), st.integers(0, 3))
@example([[{"role": "user", "content": None, "n": 0.0}], []], 2)
def test_cache_hash_equals_hashing_everything(lists: list[list[Msg]], pick: int) -> None:
    """Digests and chain hashes from the cache equal those of hashing the whole list."""
    cache = PrefixCache()
    history: list[Msg] = []
    for i, new in enumerate(lists):
        history = [*(_twin(m, pick + i) for m in history), *new]
        got = cache.hash("w", history, redact_json)
        want = hash_all(history, redact_json)
        assert (got.digests, got.hashes) == (want.digests, want.hashes)
        cache.remember(str(i % 2), "w", history, got, None, redact_json)


def test_continuation_hits_and_serialises_only_new_messages() -> None:
    """A turn extending the remembered one reuses its figures; only new messages get bodies."""
    cache = PrefixCache()
    first = cache.hash("w", [SYS, U1], _same)
    cache.remember("s", "w", [SYS, U1], first, A1, _same)
    again = cache.hash("w", copy.deepcopy([SYS, U1, A1, U2]), _same)
    assert (cache.hits, cache.misses) == (1, 1)
    assert again.reused == 3 and sorted(again.bodies) == [3]


def test_a_regenerate_takes_the_entry_over_and_the_original_still_hits() -> None:
    """Regenerates take the remembered entry over (one entry, however many); the
    original conversation's next turn then finds their shared history there."""
    cache = PrefixCache()
    for key in ("s1", "s2", "s3"):
        msgs = copy.deepcopy([SYS, U1])
        cache.remember(key, "w", msgs, cache.hash("w", msgs, _same), A1, _same)
    assert len(cache) == 1 and (cache.hits, cache.misses) == (2, 1)
    cache.remember("s4", "w", [SYS, U1], cache.hash("w", [SYS, U1], _same), U2, _same)
    assert len(cache) == 1  # taken over by the regenerate with another reply
    again = cache.hash("w", [SYS, U1, A1, U2], _same)
    assert again.reused == 2 and sorted(again.bodies) == [2, 3]
    assert again.digests == hash_all([SYS, U1, A1, U2], _same).digests


def test_other_workspace_and_edited_prefix_miss() -> None:
    """Another workspace, or an edited earlier message, is a miss (hashed in full)."""
    cache = PrefixCache()
    cache.remember("s", "w", [SYS, U1], cache.hash("w", [SYS, U1], _same), A1, _same)
    assert cache.hash("other", [SYS, U1, A1, U2], _same).reused == 0
    assert cache.hash("w", [SYS, {**U1, "content": "edited"}, A1], _same).reused == 0
    assert cache.misses == 3


def test_cache_is_bounded_by_sessions_and_bytes() -> None:
    """Old conversations are evicted past max_sessions; one larger than max_bytes is not kept."""
    cache = PrefixCache(max_sessions=2, max_bytes=200)
    for key in "abc":
        msgs = [{"role": "user", "content": key}]
        cache.remember(key, "w", msgs, cache.hash("w", msgs, _same), None, _same)
    assert len(cache) == 2
    assert cache.hash("w", [{"role": "user", "content": "a"}], _same).reused == 0
    big = [{"role": "user", "content": "x" * 500}]
    cache.remember("big", "w", big, cache.hash("w", big, _same), None, _same)
    assert cache.hash("w", big, _same).reused == 0


@given(st.recursive(
    st.none() | st.text(max_size=3) | st.integers() | st.floats() | st.booleans(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=12,
))  # fmt: skip
def test_is_plain_is_true_for_strings_none_dicts_and_lists_only(value: Any) -> None:
    def plain(v: Any) -> bool:
        if isinstance(v, dict):
            return all(isinstance(k, str) and plain(x) for k, x in v.items())
        if isinstance(v, list):
            return all(plain(x) for x in v)
        return v is None or isinstance(v, str)

    assert is_plain(value) == plain(value)


def test_is_plain_flags_numbers_and_non_json_types() -> None:
    """Only dicts, lists, strings and None are plain."""
    assert is_plain({"a": [None, "x", {"b": "c"}]})
    assert not is_plain({"a": [1]}) and not is_plain({"a": False}) and not is_plain(("x",))


def test_cache_miss_still_threads(tmp_path: Path) -> None:
    """A writer that restarts (empty cache) continues the stored conversation and forks edits."""
    path = tmp_path / "h.db"
    turns = conversation(6)
    write(path, turns[:3])
    write(path, turns[3:])  # a new SqliteStore: a new writer with an empty cache
    edited = [*map(dict, turns[2].messages[:-1]), {"role": "user", "content": "edited"}]
    write(path, [turn(edited, A1, started_at=2e9)])
    reader = SqliteReader(path)
    by_turns = {s["turns"]: s for s in reader.list_sessions()}
    assert sorted(by_turns) == [1, 6]
    assert by_turns[1]["parent_session"] == by_turns[6]["id"]
    assert reader.turn(by_turns[6]["id"], 6)["history"] == list(turns[5].messages)


def test_search_finds_forks_by_shared_messages(tmp_path: Path) -> None:
    """A fork shows up for a message it shares with its parent, not for one it does not."""
    path = tmp_path / "h.db"
    edited = {"role": "user", "content": "edited"}
    write(
        path,
        [
            turn([SYS, U1], A1, started_at=1.0),
            turn([SYS, U1, A1, U2], A2, started_at=2.0),
            turn([SYS, U1, A1, edited], A2, started_at=3.0),
        ],
    )
    reader = SqliteReader(path)
    assert len(reader.list_sessions(search="hello")) == 2
    assert [s["turns"] for s in reader.list_sessions(search="how are you")] == [2]
    assert [s["parent_session"] is not None for s in reader.list_sessions(search="edited")] == [
        True
    ]


def test_migration_backfills_fork_messages(tmp_path: Path) -> None:
    """A store written before forks listed shared messages gets them on upgrade."""
    path = tmp_path / "h.db"
    write(path, [turn([SYS, U1], A1, started_at=1.0), turn([SYS, U1], A2, started_at=2.0)])
    db = connect(path)
    fork = db.execute("SELECT id FROM sessions WHERE parent_session IS NOT NULL").fetchone()[0]
    db.execute(  # what older writers left: only the reply the fork added
        "DELETE FROM session_messages WHERE session_id = ?1"
        " AND message_id NOT IN (SELECT reply_msg FROM turns WHERE session_id = ?1)",
        (fork,),
    )
    db.execute("DELETE FROM _migrations WHERE name = 'm003_fork_messages'")
    assert db.execute(
        "SELECT COUNT(*) FROM session_messages WHERE session_id = ?", (fork,)
    ).fetchone() == (1,)
    db.close()
    reader = SqliteReader(path)  # opening the store applies the missing migration
    assert len(reader.list_sessions(search="hello")) == 2
    assert len(reader.list_sessions(search="you are terse")) == 2


def _same(obj: Any) -> Any:
    return obj
