"""``handoff sessions …``: browse, compare, export, import and prune snapshots.

Each subcommand takes ``--store PATH`` (default: the configured store) and
``--json``. Sessions are named by id, a unique start or end of it, or the client's name.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from proxy.cli import memory_commands, message_view, sessions_import, sessions_resume
from proxy.cli.progress import Progress
from proxy.cli.session_table import session_table
from proxy.config import load_settings
from proxy.store import admin
from proxy.store.durations import parse_count, parse_duration, parse_since
from proxy.store.errors import InvalidDocument, StoreError
from proxy.store.export import FORMATS, export
from proxy.store.jsonout import dumps_text
from proxy.store.read import SqliteReader


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``sessions`` and its subcommands."""
    parser = subparsers.add_parser("sessions", help="browse and export recorded conversations")
    parser.set_defaults(func=run)
    sub = parser.add_subparsers(dest="sessions_command", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", metavar="PATH", help="the store file (default: from config)")
    common.add_argument("--json", action="store_true", help="print JSON instead of tables")

    p = sub.add_parser("list", parents=[common], help="list sessions, latest first")
    p.add_argument("--model", help="only sessions that used this model")
    p.add_argument("--since", type=parse_since, help="active since: 7d, 12h or an ISO date")
    p.add_argument("--search", metavar="TEXT", help="full-text search over message content")
    p.add_argument("--workspace", help="only this workspace")
    p.add_argument("--limit", type=parse_count, default=100)
    p.add_argument(
        "--errors", action="store_true", help="only sessions with a turn that ended in an error"
    )
    p = sub.add_parser("show", parents=[common], help="a session's timeline, or one turn")
    p.add_argument("id")
    p.add_argument("--turn", type=parse_count, metavar="N", help="show turn N in full")
    cut = "with --turn: cut each message at N characters"
    p.add_argument("--max-chars", type=parse_count, metavar="N", help=cut)
    p = sub.add_parser("diff", parents=[common], help="original history vs what was sent")
    p.add_argument("id")
    p.add_argument("--turn", type=parse_count, metavar="N", required=True)
    p = sub.add_parser("export", parents=[common], help="export a session")
    p.add_argument("id")
    p.add_argument("--turn", type=parse_count, metavar="N", help="export up to turn N")
    how = (
        "portable JSON, Markdown, a request body for that API, or native: the body in"
        " the format the session was recorded in"
    )
    p.add_argument("--format", choices=FORMATS, default="portable", help=how)
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    p.add_argument("--progress", action="store_true", help="report turns read on stderr")
    p.add_argument("--sent", action="store_true", help="what the turn sent, not the history")
    sessions_import.register(sub, common)
    sessions_resume.register(sub, common)
    p = sub.add_parser("prune", parents=[common], help="delete old sessions")
    p.add_argument("--older-than", type=parse_duration, required=True, metavar="AGE")
    memory_commands.register(sub, common)


def _store_path(args: argparse.Namespace) -> Path:
    if args.store:
        return Path(args.store).expanduser()
    return load_settings(getattr(args, "config", None)).store_path()


def _console() -> Console:
    """A console that prints text as it is: no markup, emoji codes or highlighting (what
    it prints was written by clients and upstreams; ``[/b]`` in it once crashed it)."""
    plain: dict[str, Any] = {"highlight": False, "markup": False, "emoji": False}
    console = Console(**plain)
    if not console.is_terminal and "COLUMNS" not in os.environ:  # (a pipe: as wide as it takes)
        console = Console(**plain, width=200, soft_wrap=True)
    return console


_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0)) if c not in (9, 10)}


def _shown(value: Any) -> str:
    """``value`` as text for the terminal, its control characters (escape sequences
    among them) written out as ``\\xNN`` rather than obeyed."""
    return str(value).translate(_CONTROLS)


def _print_json(obj: Any) -> None:
    sys.stdout.write(dumps_text(obj, indent=True) + "\n")


def run(args: argparse.Namespace) -> int:
    """Dispatch a ``sessions`` subcommand; exit 1 on lookup errors, 2 on bad input."""
    path = _store_path(args)
    try:
        return _COMMANDS[args.sessions_command](args, path)
    except InvalidDocument as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except StoreError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def _when(ts: float | None) -> str:
    if ts is None:
        return ""
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%d %H:%M")


def _list(args: argparse.Namespace, path: Path) -> int:
    reader = SqliteReader(path)
    rows = reader.list_sessions(
        model=args.model,
        since=args.since,
        search=args.search,
        workspace=args.workspace,
        limit=args.limit,
        errors=args.errors,
    )
    if args.json:
        _print_json(rows)
        return 0
    console = _console()
    console.print(session_table(rows, reader.session_ids(), console.width, _shown))
    return 0


def _n(v: Any) -> str:
    return "" if v is None else str(v)


def _tokens(t: Mapping[str, Any]) -> str:
    """handoff's count, else the upstream's (the byte bound settled it uncounted)."""
    if t["tokens"] is not None:
        return str(t["tokens"])
    return f"{t['prompt_tokens']} (upstream)" if t.get("prompt_tokens") is not None else ""


def _show(args: argparse.Namespace, path: Path) -> int:
    reader = SqliteReader(path)
    if args.turn is not None:
        return _show_turn(reader.turn(args.id, args.turn), args.json, args.max_chars)
    info = reader.session(args.id)
    if args.json:
        _print_json(info)
        return 0
    console = _console()
    parent = f" · forked from {info['parent_session']}" if info["parent_session"] else ""
    console.print(_shown(f"session {info['id']} · {info['workspace']} · {info['title']}{parent}"))
    table = Table(
        "turn",
        "time",
        "model",
        "decision",
        "tokens",
        "sent",
        "window",
        "dropped",
        "inserted",
        "policies",
        "status",
        "handoff",
    )
    for t in info["timeline"]:
        status = "cancelled" if t["cancelled"] else _n(t["status"])
        handoff = f"⇄ {t['handoff']['from']} → {t['handoff']['to']}" if t["handoff"] else ""
        if t.get("side_call"):  # a client's title or compaction call, not the conversation
            handoff = ("side call " + handoff).strip()
        cells = (
            t["turn"],
            _when(t["started_at"]),
            t["model"],
            _n(t["action"]),
            _tokens(t),
            _n(t["forwarded_tokens"]),
            _n(t["window"]),
            t["dropped"],
            t["inserted"],
            ", ".join(t["policies"]),
            status,
            handoff,
        )
        table.add_row(*map(_shown, cells))
    console.print(table)
    return 0


def _brief(m: Mapping[str, Any], width: int = 160) -> str:
    return _shown(message_view.brief(m, width))


def _full(m: Mapping[str, Any], max_chars: int | None) -> str:
    return _shown(message_view.full(m, max_chars))


def _show_turn(t: dict[str, Any], as_json: bool, max_chars: int | None = None) -> int:
    if as_json:
        _print_json(t)
        return 0
    console = _console()
    console.print(
        _shown(
            f"session {t['session_id']} · turn {t['turn']} · {t['model']} via "
            f"{t['upstream']} · status {t['status']} · {t['latency_ms']:.0f} ms"
        )
    )
    if t["handoff"]:
        console.print(_shown(f"handoff: {t['handoff']['from']} → {t['handoff']['to']}"))
    if t["decision"]:
        console.print("decision: " + dumps_text(t["decision"]))
    console.print(f"\noriginal history ({len(t['history'])} messages):")
    for i, m in enumerate(t["history"]):
        console.print(f"  [{i}] {_full(m, max_chars)}")
    if t["forwarded"] is None:
        console.print("\nforwarded: unchanged")
    else:
        console.print(f"\nforwarded ({len(t['forwarded'])} messages):")
        for i, m in enumerate(t["forwarded"]):
            console.print(f"  [{i}] {_full(m, max_chars)}")
    reply = t["reply"]
    console.print("\nreply: " + (_full(reply, max_chars) if reply else "(none)"))
    for c in (t.get("choices") or [])[1:]:  # n > 1: choice 0 is the reply above
        message = c.get("message")
        shown = _full(message, max_chars) if isinstance(message, dict) else "(none)"
        console.print(f"choice {c.get('index')}: {shown}")
    if t["error"]:
        console.print("error: " + dumps_text(t["error"]))
    return 0


def _diff(args: argparse.Namespace, path: Path) -> int:
    d = SqliteReader(path).diff(args.id, args.turn)
    if args.json:
        _print_json(d)
        return 0
    console = _console()
    note = " (sent unchanged)" if d["unchanged"] else ""
    console.print(_shown(f"session {d['session_id']} · turn {d['turn']} · {d['model']}{note}"))
    marks = {"keep": (" ", ""), "drop": ("-", "red"), "insert": ("+", "green")}
    for e in d["entries"]:
        sign, style = marks[e["op"]]
        where = f"[{e['index']}]" if e["index"] is not None else "[new]"
        console.print(f"{sign} {where} {_brief(e['message'])}", style=style or None)
    return 0


def _export(args: argparse.Namespace, path: Path) -> int:
    progress = Progress("export", "turns", forced=args.progress)
    try:
        out = export(
            SqliteReader(path), args.id, args.format, args.turn, sent=args.sent, progress=progress
        )
    finally:
        progress.close()
    text = out if isinstance(out, str) else dumps_text(out, indent=True)
    if args.output:
        Path(args.output).write_text(text + ("" if text.endswith("\n") else "\n"))
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text + ("" if text.endswith("\n") else "\n"))
    return 0


def _prune(args: argparse.Namespace, path: Path) -> int:
    count = admin.prune(path, args.older_than)
    if args.json:
        _print_json({"deleted_sessions": count})
    else:
        print(f"deleted {count} session(s)")
    return 0


_COMMANDS = {
    "list": _list,
    "show": _show,
    "diff": _diff,
    "export": _export,
    "import": sessions_import.run,
    "resume": sessions_resume.run,
    "prune": _prune,
    "remember": memory_commands.remember,
    "recall": memory_commands.recall,
}
