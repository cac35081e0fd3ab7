"""The SQLite schema, built by an ordered list of named migrations.

Tables (see ``m001_initial``):

``messages``
    Every message (and every request's other parameters) exactly once:
    ``hash`` is sha256 of the canonical JSON ``body``. ``id`` is the compact
    handle the other tables use.
``sessions``
    A conversation: ``id`` (hex), ``workspace``, ``hint`` (an id the client chose,
    unique per workspace), ``title``, ``parent_session``/``parent_turn`` when it
    was forked off another conversation (an edited or regenerated turn), and
    ``head_turn``, its latest turn.
``turns``
    One chat request. The history is stored incrementally: the first ``base_len``
    messages of the *extended history* (history + reply) of turn ``base_turn``,
    followed by ``tail``, a blob of 8-byte little-endian message ids. So a
    500-turn conversation stores each message once plus a few ids per turn.
    ``history_hash``/``ext_hash`` are the chain hashes (see ``canonical``) of the
    history and of history + reply: threading looks them up. ``forwarded`` is
    NULL when the request went upstream unchanged, else JSON ops over the history
    (see ``forwarded``). ``decision``, ``usage``, ``error`` are JSON;
    ``handoff_from`` is the previous turn's model when it differs; ``wire`` the wire
    format the client spoke (``chat``, ``responses``, ``anthropic``).
``session_messages``
    Which sessions hold which message in a history or reply (a fork also holds
    the messages it shares with its parent): full-text search maps hits to sessions.
``messages_fts``
    FTS5 over message text (contentless, ``detail=none``: small); absent when
    this SQLite lacks FTS5, and search falls back to LIKE.
``index_state``
    ``upto``: the highest message id whose text is in ``messages_fts`` and whose
    body is packed. Messages above it are new: the writer indexes them in
    batches, and search scans them directly (see ``indexer``).
``calibration``
    Token-count calibration, key → JSON.
``writer_progress``
    How many turns the current writer process (``writer``: an id its proxy gave it) has
    committed, counted in the same transactions (see ``progress``).
``memories``
    One structured memory per session (``session_id``, its ``workspace``): the sections
    as JSON ``body``, the Markdown ``text`` recall inserts, ``source`` (``digest`` or
    ``llm``), the ``reason`` it was written and the user ``turns`` it covers.
``turns.choices`` (m010) holds every choice of an ``n`` > 1 request as JSON;
``turns.side_call`` (m011) marks a client's side call (title, compaction) in its session.
``session_aliases``
    ``alias`` → ``session_id``: an id the proxy announced in ``x-handoff-session`` for a
    turn the writer threaded into a session it knew by another id.
``_migrations``
    The names of the migrations applied, in order.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable

from proxy.store.history import history_ids

Migration = Callable[[sqlite3.Connection], None]


def _script(db: sqlite3.Connection, sql: str) -> None:
    """Run ``;``-separated statements inside the caller's transaction (unlike executescript)."""
    for stmt in sql.split(";"):
        if stmt.strip():
            db.execute(stmt)


def m001_initial(db: sqlite3.Connection) -> None:
    _script(
        db,
        """
        CREATE TABLE messages (
            id INTEGER PRIMARY KEY,
            hash BLOB NOT NULL UNIQUE,
            body BLOB NOT NULL
        );
        CREATE TABLE sessions (
            id TEXT PRIMARY KEY,
            workspace TEXT NOT NULL,
            hint TEXT,
            title TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            parent_session TEXT,
            parent_turn INTEGER,
            head_turn INTEGER
        );
        CREATE UNIQUE INDEX sessions_hint ON sessions(workspace, hint) WHERE hint IS NOT NULL;
        CREATE INDEX sessions_updated ON sessions(updated_at);
        CREATE TABLE turns (
            id INTEGER PRIMARY KEY,
            session_id TEXT NOT NULL,
            seq INTEGER NOT NULL,
            workspace TEXT NOT NULL,
            started_at REAL NOT NULL,
            model TEXT NOT NULL,
            upstream TEXT NOT NULL,
            status INTEGER NOT NULL,
            latency_ms REAL NOT NULL,
            streamed INTEGER NOT NULL,
            cancelled INTEGER NOT NULL,
            base_turn INTEGER,
            base_len INTEGER NOT NULL,
            tail BLOB NOT NULL,
            n_messages INTEGER NOT NULL,
            history_hash BLOB NOT NULL,
            ext_hash BLOB,
            reply_msg INTEGER,
            params_msg INTEGER,
            forwarded BLOB,
            decision BLOB,
            usage BLOB,
            finish_reason TEXT,
            error BLOB,
            raw_response BLOB,
            handoff_from TEXT
        );
        CREATE INDEX turns_session ON turns(session_id, seq);
        CREATE INDEX turns_history ON turns(workspace, history_hash);
        CREATE INDEX turns_ext ON turns(workspace, ext_hash) WHERE ext_hash IS NOT NULL;
        CREATE TABLE session_messages (
            message_id INTEGER NOT NULL,
            session_id TEXT NOT NULL,
            PRIMARY KEY (message_id, session_id)
        ) WITHOUT ROWID;
        CREATE TABLE calibration (key TEXT PRIMARY KEY, value BLOB NOT NULL);
        """,
    )


def m002_fts(db: sqlite3.Connection) -> None:
    # Without FTS5 in this SQLite build, search falls back to LIKE.
    with contextlib.suppress(sqlite3.OperationalError):
        db.execute("CREATE VIRTUAL TABLE messages_fts USING fts5(text, content='', detail=none)")


def m003_fork_messages(db: sqlite3.Connection) -> None:
    # Forks used to list only the messages they added, so search missed them
    # for the messages they share with their parent.
    forks = db.execute(
        """SELECT t.id, t.session_id FROM turns t JOIN turns b ON b.id = t.base_turn
           WHERE b.session_id != t.session_id"""
    ).fetchall()
    for tid, sid in forks:
        db.executemany(
            "INSERT OR IGNORE INTO session_messages VALUES (?, ?)",
            [(mid, sid) for mid in history_ids(db, tid)],
        )


def m004_index_state(db: sqlite3.Connection) -> None:
    # Until now every message was indexed as it was written.
    db.execute("CREATE TABLE index_state (upto INTEGER NOT NULL)")
    db.execute("INSERT INTO index_state SELECT COALESCE(MAX(id), 0) FROM messages")


def m005_collapse_bases(db: sqlite3.Connection) -> None:
    # Regenerates used to build on the previous regenerate, so reading one walked
    # every earlier one. A turn now builds on the turn that holds its messages.
    bases: dict[int, tuple[int | None, int]] = {}
    rows = db.execute("SELECT id, base_turn, base_len FROM turns ORDER BY id").fetchall()
    for tid, base, n in rows:
        b = base
        while b is not None and b in bases and n <= bases[b][1] and bases[b][0] is not None:
            b = bases[b][0]
        if b != base:
            db.execute("UPDATE turns SET base_turn = ? WHERE id = ?", (b, tid))
        bases[tid] = (b, n)


def m006_writer_progress(db: sqlite3.Connection) -> None:
    db.execute("CREATE TABLE writer_progress (writer TEXT PRIMARY KEY, turns INTEGER NOT NULL)")


def m007_memories(db: sqlite3.Connection) -> None:
    _script(
        db,
        """
        CREATE TABLE memories (
            session_id TEXT PRIMARY KEY,
            workspace TEXT NOT NULL,
            updated_at REAL NOT NULL,
            turns INTEGER NOT NULL,
            source TEXT NOT NULL,
            reason TEXT NOT NULL,
            body BLOB NOT NULL,
            text TEXT NOT NULL
        );
        CREATE INDEX memories_workspace ON memories(workspace, updated_at)
        """,
    )


def m008_turn_wire(db: sqlite3.Connection) -> None:
    # The wire format the client spoke; turns recorded before it were all chat.
    db.execute("ALTER TABLE turns ADD COLUMN wire TEXT NOT NULL DEFAULT 'chat'")


def m009_session_aliases(db: sqlite3.Connection) -> None:
    """Ids the proxy announced for a session the writer knew by another id."""
    db.execute(
        "CREATE TABLE session_aliases (alias TEXT PRIMARY KEY, session_id TEXT NOT NULL)"
        " WITHOUT ROWID"
    )


def m010_turn_choices(db: sqlite3.Connection) -> None:
    """Every choice of an ``n`` > 1 request, as JSON (NULL for one choice)."""
    db.execute("ALTER TABLE turns ADD COLUMN choices TEXT")


def m011_side_calls(db: sqlite3.Connection) -> None:
    """A turn a client made for its own ends (a title, a compaction) in a named session."""
    db.execute("ALTER TABLE turns ADD COLUMN side_call INTEGER NOT NULL DEFAULT 0")


MIGRATIONS: tuple[Migration, ...] = (
    m001_initial,
    m002_fts,
    m003_fork_messages,
    m004_index_state,
    m005_collapse_bases,
    m006_writer_progress,
    m007_memories,
    m008_turn_wire,
    m009_session_aliases,
    m010_turn_choices,
    m011_side_calls,
)


def migrate(db: sqlite3.Connection, migrations: tuple[Migration, ...] = MIGRATIONS) -> list[str]:
    """Apply the migrations not yet recorded, each in its own transaction; return their names.

    ``db`` must be in autocommit mode (``isolation_level=None``). ``BEGIN IMMEDIATE``
    makes two processes opening a fresh store at once apply each migration once.
    """
    db.execute("CREATE TABLE IF NOT EXISTS _migrations (name TEXT PRIMARY KEY, applied_at REAL)")
    have = {row[0] for row in db.execute("SELECT name FROM _migrations")}
    applied: list[str] = []
    for fn in migrations:
        if fn.__name__ in have:
            continue  # readers reopening an up-to-date store take no write lock
        db.execute("BEGIN IMMEDIATE")
        try:
            done = db.execute("SELECT 1 FROM _migrations WHERE name = ?", (fn.__name__,))
            if done.fetchone() is None:
                fn(db)
                db.execute("INSERT INTO _migrations VALUES (?, ?)", (fn.__name__, time.time()))
                applied.append(fn.__name__)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    return applied


def has_fts(db: sqlite3.Connection) -> bool:
    row = db.execute("SELECT 1 FROM sqlite_master WHERE name = 'messages_fts'").fetchone()
    return row is not None
