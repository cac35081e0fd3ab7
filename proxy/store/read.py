"""Queries over a store, safe to run in another process while the proxy writes.

Every method opens its own short-lived connection (WAL readers never block the
writer), so one reader can serve several threads. Results are plain JSON-ready
dicts: the CLI prints them, the HTTP API returns them. A reader sees every workspace
(the CLI: it holds the file) or, made by :meth:`SqliteReader.within`, one workspace and
its sub-workspaces, to which any other session does not exist (the HTTP API's clients).
"""

from __future__ import annotations

import itertools
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from proxy.store import forwarded as fwd
from proxy.store import memories
from proxy.store.canonical import unpack_body
from proxy.store.db import connect
from proxy.store.errors import AmbiguousSession, SessionNotFound, TurnNotFound
from proxy.store.history import Memo, history_ids, load_messages
from proxy.store.messages import message_text
from proxy.store.migrations import has_fts
from proxy.upstream.anthropic_stream import prompt_tokens

_SESSION_COLS = """s.id, s.workspace, s.hint, s.title, s.created_at, s.updated_at,
    s.parent_session, s.parent_turn,
    (SELECT COUNT(*) FROM turns WHERE session_id = s.id),
    (SELECT GROUP_CONCAT(model, ',')
     FROM (SELECT DISTINCT model FROM turns WHERE session_id = s.id)),
    (SELECT COUNT(*) FROM turns WHERE session_id = s.id AND handoff_from IS NOT NULL),
    (SELECT COALESCE(json_extract(decision, '$.tokens'), json_extract(usage, '$.prompt_tokens'))
     FROM turns WHERE id = s.head_turn)"""
# The latest history's tokens: handoff's count, or (when the byte bound settled the
# decision uncounted, so the history went upstream unchanged) the upstream's own.


def _session_row(r: tuple[Any, ...]) -> dict[str, Any]:
    return {
        "id": r[0],
        "workspace": r[1],
        "name": r[2],
        "title": r[3],
        "started_at": r[4],
        "last_turn_at": r[5],
        "parent_session": r[6],
        "parent_turn": r[7],
        "turns": r[8],
        "models": sorted((r[9] or "").split(",")) if r[9] else [],
        "handoffs": r[10],
        "tokens": r[11],
    }


def _loads(v: str | bytes | None) -> Any:
    return None if v is None else orjson.loads(v)


def _search_sessions(db: sqlite3.Connection, text: str) -> list[str]:
    """Sessions holding a message whose text contains ``text`` (case-insensitive).

    FTS5 narrows the candidates by word; the phrase itself is checked on the
    decoded text (bodies are compressed, so SQL cannot look inside them). Messages
    the writer has not indexed yet (see ``indexer``) are all candidates.
    """
    terms = search_terms(text)
    cands: Iterable[tuple[int, bytes]]
    if has_fts(db) and terms:
        match = " ".join('"' + t + '"' for t in terms)
        cands = itertools.chain(
            db.execute(
                "SELECT m.id, m.body FROM messages m WHERE m.id IN"
                " (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?)",
                (match,),
            ).fetchall(),
            db.execute(
                "SELECT id, body FROM messages WHERE id > (SELECT upto FROM index_state)"
            ).fetchall(),
        )
    else:
        cands = db.execute("SELECT id, body FROM messages")
    needle = text.casefold()
    ids = [
        mid
        for mid, body in cands
        if body[:1] != b"[" and needle in message_text(orjson.loads(unpack_body(body))).casefold()
    ]
    sessions: set[str] = set()
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        sessions.update(
            r[0]
            for r in db.execute(
                f"SELECT session_id FROM session_messages WHERE message_id IN"
                f" ({','.join('?' * len(chunk))})",
                chunk,
            )
        )
    return sorted(sessions)


def search_terms(text: str) -> list[str]:
    """The words of a search, as FTS5 tokenizes them (letters and digits)."""
    return re.findall(r"[^\W_]+", text)


class SqliteReader:
    """Read-only access to a SQLite store (see :mod:`proxy.store.migrations`), to every
    workspace or, with ``workspace``, to that one and its sub-workspaces (``NAME/…``)."""

    def __init__(self, path: str | Path, workspace: str | None = None) -> None:
        self.path = Path(path)
        self._scope = ""
        self._scope_args: tuple[str, ...] = ()
        if workspace is not None:  # '0' follows '/': the range holds every "workspace/…"
            self._scope = " AND (workspace = ? OR workspace >= ? AND workspace < ?)"
            self._scope_args = (workspace, workspace + "/", workspace + "0")

    def within(self, workspace: str) -> SqliteReader:
        """This store as seen from ``workspace``: its sessions and its sub-workspaces'."""
        return SqliteReader(self.path, workspace)

    @contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        db = connect(self.path, create=False)
        try:
            db.execute("PRAGMA query_only = 1")
            yield db
        finally:
            db.close()

    def resolve(self, ref: str) -> str:
        """The session id that ``ref`` names: an id, its unique start or end, or a client's
        name. Ids start with their creation time (``ids``), so the end tells apart sessions
        begun together."""
        with self._db() as db:
            return self._resolve(db, ref)

    def _resolve(self, db: sqlite3.Connection, ref: str) -> str:
        esc = ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        rows = db.execute(
            "SELECT id FROM sessions WHERE (id LIKE ? ESCAPE '\\' OR id LIKE ? ESCAPE '\\')"
            f"{self._scope} LIMIT 6",
            (esc + "%", "%" + esc, *self._scope_args),
        ).fetchall()
        exact = [r[0] for r in rows if r[0] == ref]
        if exact:
            return str(exact[0])
        if len(rows) > 1:
            ids = ", ".join(r[0] for r in rows[:5]) + (", …" if len(rows) > 5 else "")
            raise AmbiguousSession(f"{ref!r} matches several sessions ({ids}); give more of the id")
        if rows:
            return str(rows[0][0])
        named = (
            db.execute(
                f"SELECT id FROM sessions WHERE hint = ?{self._scope}", (ref, *self._scope_args)
            ).fetchall()
            or db.execute(  # an id the x-handoff-session header gave
                "SELECT id FROM sessions WHERE id IN (SELECT session_id FROM session_aliases"
                f" WHERE alias = ?){self._scope}",
                (ref, *self._scope_args),
            ).fetchall()
        )
        if len(named) == 1:
            return str(named[0][0])
        if named:
            raise AmbiguousSession(f"{ref!r} names sessions in several workspaces; use the id")
        raise SessionNotFound(f"no session {ref!r}")

    def session_ids(self) -> list[str]:
        """Every session's id (in scope), for :func:`proxy.store.short_ids.short_ids`."""
        with self._db() as db:
            rows = db.execute(f"SELECT id FROM sessions WHERE 1{self._scope}", self._scope_args)
            return [str(r[0]) for r in rows]

    def list_sessions(
        self,
        *,
        model: str | None = None,
        since: float | None = None,
        search: str | None = None,
        workspace: str | None = None,
        limit: int = 100,
        errors: bool = False,
    ) -> list[dict[str, Any]]:
        """Sessions, latest first, filtered by model used, last activity and message text;
        with ``errors``, only those with a turn that ended in an error (status ≥ 400)."""
        where: list[str] = ["s.head_turn IS NOT NULL" + self._scope]
        args: list[Any] = [*self._scope_args]
        if errors:
            where.append("s.id IN (SELECT session_id FROM turns WHERE status >= 400)")
        if model:
            where.append("s.id IN (SELECT session_id FROM turns WHERE model = ?)")
            args.append(model)
        if since is not None:
            where.append("s.updated_at >= ?")
            args.append(since)
        if workspace:
            where.append("s.workspace = ?")
            args.append(workspace)
        with self._db() as db:
            if search:
                hits = _search_sessions(db, search)
                where.append(f"s.id IN ({','.join('?' * len(hits))})")
                args.extend(hits)
            rows = db.execute(
                f"SELECT {_SESSION_COLS} FROM sessions s WHERE {' AND '.join(where)}"
                " ORDER BY s.updated_at DESC, s.id LIMIT ?",
                [*args, limit],
            ).fetchall()
        return [_session_row(r) for r in rows]

    def session(self, ref: str) -> dict[str, Any]:
        """A session and its timeline: one row per turn."""
        with self._db() as db:
            sid = self._resolve(db, ref)
            row = db.execute(f"SELECT {_SESSION_COLS} FROM sessions s WHERE s.id = ?", (sid,))
            info = _session_row(row.fetchone())
            rows = db.execute(
                "SELECT seq, started_at, model, upstream, status, latency_ms, streamed, cancelled,"
                " n_messages, decision, forwarded, usage, finish_reason, error, handoff_from"
                " FROM turns WHERE session_id = ? ORDER BY seq",
                (sid,),
            ).fetchall()
        info["timeline"] = [_timeline_row(r) for r in rows]
        with self._db() as db:
            side = {
                r[0]
                for r in db.execute(
                    "SELECT seq FROM turns WHERE session_id = ? AND side_call = 1", (sid,)
                )
            }
        for t in info["timeline"]:
            t["side_call"] = t["turn"] in side  # a client's title or compaction call
        return info

    def turn(self, ref: str, n: int) -> dict[str, Any]:
        """Turn ``n`` (1-based) in full: history, forwarded messages, reply, decision."""
        with self._db() as db:
            sid = self._resolve(db, ref)
            return self._turn(db, sid, n, {})

    def turns(
        self, ref: str, upto: int | None = None, progress: Callable[[int, int], None] | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The session summary and its turns in full (up to turn ``upto``), for export;
        ``progress(done, total)`` after each turn read."""
        with self._db() as db:
            sid = self._resolve(db, ref)
            info = _session_row(
                db.execute(
                    f"SELECT {_SESSION_COLS} FROM sessions s WHERE s.id = ?", (sid,)
                ).fetchone()
            )
            count = info["turns"] if upto is None else upto
            if upto is not None and not 1 <= upto <= info["turns"]:
                raise TurnNotFound(f"session {sid} has turns 1..{info['turns']}, not {upto}")
            memo: Memo = {}
            turns = []
            for n in range(1, count + 1):
                turns.append(self._turn(db, sid, n, memo))
                if progress is not None:
                    progress(n, count)
            return info, turns

    def _turn(self, db: sqlite3.Connection, sid: str, n: int, memo: Memo) -> dict[str, Any]:
        row = db.execute(
            "SELECT id, seq, started_at, model, upstream, status, latency_ms, streamed, cancelled,"
            " n_messages, decision, forwarded, usage, finish_reason, error, handoff_from,"
            " reply_msg, params_msg, raw_response, wire, choices FROM turns"
            " WHERE session_id = ? AND seq = ?",
            (sid, n),
        ).fetchone()
        if row is None:
            raise TurnNotFound(f"session {sid} has no turn {n}")
        ids = history_ids(db, row[0], memo)
        ops = _loads(row[11])
        extra = [x for x in (row[16], row[17]) if x is not None]
        inserts = [op for op in ops or () if isinstance(op, int)]
        bodies = load_messages(db, [*ids, *extra, *inserts])
        history = [orjson.loads(bodies[i]) for i in ids]
        out = _timeline_row(row[1:16])
        out["session_id"] = sid
        out["history"] = history
        out["forwarded"] = (
            None if ops is None else fwd.decode(ops, history, lambda i: orjson.loads(bodies[i]))
        )
        out["forwarded_ops"] = ops
        out["wire"] = row[19]
        out["reply"] = orjson.loads(bodies[row[16]]) if row[16] is not None else None
        out["request_params"] = orjson.loads(bodies[row[17]]) if row[17] is not None else {}
        out["raw_response"] = None if row[18] is None else bytes(row[18]).decode("utf-8", "replace")
        out["choices"] = _loads(row[20])  # every choice of an n > 1 request; reply is choice 0
        return out

    def diff(self, ref: str, n: int) -> dict[str, Any]:
        """Original history against what the model was sent: keep/drop/insert entries."""
        t = self.turn(ref, n)
        history, ops = t["history"], t["forwarded_ops"]
        if ops is None:
            entries = [{"op": "keep", "index": i, "message": m} for i, m in enumerate(history)]
        else:
            inserted = iter(m for m, op in zip(t["forwarded"], _expand(ops), strict=True) if op)
            entries = []
            for e in fwd.diff(ops, len(history)):
                if e["op"] == "insert":
                    entries.append({"op": "insert", "index": None, "message": next(inserted)})
                else:
                    entries.append({**e, "message": history[e["index"]]})
        return {
            "session_id": t["session_id"],
            "turn": n,
            "model": t["model"],
            "unchanged": ops is None,
            "entries": entries,
        }

    def memory(self, ref: str) -> dict[str, Any] | None:
        with self._db() as db:
            return memories.of_session(db, self._resolve(db, ref))

    def memories(self, workspace: str, *, query: str = "", limit: int = 5) -> list[dict[str, Any]]:
        if self._scope and not self._sees(workspace):
            return []
        with self._db() as db:
            return memories.ranked(db, workspace, search_terms(query), limit)

    def recalled(
        self, workspace: str, opening: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], list[str]] | None:
        """The message recall inserted into the first turn of ``workspace``'s conversation
        that opened with ``opening``, and the sessions it named; None if none did."""
        if self._scope and not self._sees(workspace):
            return None
        with self._db() as db:
            for sid in memories.recalled_openings(db, workspace, len(opening)):
                turn = self._turn(db, sid, 1, {})
                if turn["history"] != opening:
                    continue
                for step in (turn["decision"] or {}).get("steps", ()):
                    if step.get("policy") == "recall" and turn["forwarded"]:
                        inserted = next((m for m in turn["forwarded"] if m not in opening), None)
                        if inserted is not None:
                            return inserted, list(step.get("sessions", ()))
        return None

    def _sees(self, workspace: str) -> bool:
        own, sub, end = self._scope_args
        return workspace == own or sub <= workspace < end

    def load_calibration(self) -> dict[str, Any]:
        with self._db() as db:
            rows = db.execute("SELECT key, value FROM calibration WHERE key NOT LIKE 'summary:%'")
            return {k: orjson.loads(v) for k, v in rows}


def _expand(ops: list[fwd.Op]) -> list[bool]:
    """One flag per forwarded message: True where it is an insert."""
    out: list[bool] = []
    for op in ops:
        out.extend([False] * op[1] if isinstance(op, list) else [True])
    return out


def _prompt_tokens(usage: Any) -> int | None:
    """The prompt's size in a usage: OpenAI's ``prompt_tokens``, else input tokens
    (Anthropic's with its cache read and creation, Responses' as given)."""
    if not isinstance(usage, dict):
        return None
    named = usage.get("prompt_tokens")
    return named if isinstance(named, int) else prompt_tokens(usage)


def _timeline_row(r: tuple[Any, ...]) -> dict[str, Any]:
    (
        seq,
        started,
        model,
        upstream,
        status,
        latency,
        streamed,
        cancelled,
        n_messages,
        decision,
        forwarded,
        usage,
        finish,
        error,
        handoff_from,
    ) = r
    d = _loads(decision) or {}
    ops = _loads(forwarded)
    entries = fwd.diff(ops, n_messages) if ops is not None else []
    return {
        "turn": seq,
        "started_at": started,
        "model": model,
        "upstream": upstream,
        "status": status,
        "latency_ms": latency,
        "streamed": bool(streamed),
        "cancelled": bool(cancelled),
        "messages": n_messages,
        "action": d.get("action"),
        "window": d.get("window"),
        "budget": d.get("budget"),
        "tokens": d.get("tokens"),
        "forwarded_tokens": d.get("forwarded_tokens"),
        "exact": d.get("exact"),
        "policies": d.get("policies", []),
        "decision": d or None,
        "dropped": sum(e["op"] == "drop" for e in entries),
        "inserted": sum(e["op"] == "insert" for e in entries),
        "usage": (u := _loads(usage)),
        "prompt_tokens": _prompt_tokens(u),
        "finish_reason": finish,
        "error": _loads(error),
        "handoff": {"from": handoff_from, "to": model} if handoff_from else None,
    }
