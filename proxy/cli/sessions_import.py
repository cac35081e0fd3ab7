"""``handoff sessions import PATH [--from KIND]``: other tools' saved conversations in.

A file or a folder (walked for ``.json`` / ``.jsonl``); each file's kind is detected
unless ``--from`` names it. Imports are idempotent (a conversation already in the
store is skipped, by its source id or content digest; one whose source has grown since,
a session continued, gets its new turns added). Imported sessions go to the
workspace of a local client without an API key (``default``) unless ``--workspace``
or ``--key-env`` says otherwise. Exit 0 when something was imported (or was already
there), 2 when nothing could be.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from proxy.config import load_settings
from proxy.server.workspace import home_workspace
from proxy.store.importers import registry
from proxy.store.importers.base import Problem, Reading
from proxy.store.importers.load import Outcome, load
from proxy.store.jsonout import dumps_text

PROGRESS_EVERY = 10
"""With more files than this, a progress line (stderr) every tenth of them."""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "import",
        parents=[common],
        help="import conversations: codex, claude-code, chatgpt, openai, anthropic, portable",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("file", metavar="PATH", help="a file, or a folder to walk")
    p.add_argument(
        "--from", dest="kind", choices=registry.KINDS, help="the format (default: detect)"
    )
    p.add_argument("--workspace", help="import into this workspace (default: 'default')")
    p.add_argument(
        "--key-env",
        metavar="VAR",
        help="import into the workspace of the API key in environment variable VAR",
    )


def workspace(args: argparse.Namespace) -> str:
    """The workspace the CLI writes to: ``--workspace``, else the one the proxy gives
    the key in ``--key-env`` (computed, never stored), else a keyless client's."""
    if args.workspace:
        return str(args.workspace).strip("/")
    key = os.environ.get(args.key_env, "") if args.key_env else ""
    return home_workspace({"Authorization": f"Bearer {key}"} if key else {})


def run(args: argparse.Namespace, store: Path) -> int:
    root = Path(args.file).expanduser()
    if not root.exists():
        print(f"error: {root}: no such file or folder", file=sys.stderr)
        return 2
    files = registry.candidates(root)
    kinds = (args.kind,) if args.kind else registry.KINDS
    ws = workspace(args)
    keep = not (args.workspace or args.key_env)
    redact = load_settings(getattr(args, "config", None)).store.redact
    outcomes: list[Outcome] = []
    problems: list[Problem] = []
    for i, path in enumerate(files, 1):
        _progress(i, len(files))
        reading = _read(path, kinds, forced=bool(args.kind) and root.is_file())
        problems.extend(reading.problems)
        outcomes.extend(load(store, reading, str(path), ws, keep, redact))
    return _report(outcomes, problems, args.json)


def _read(path: Path, kinds: tuple[str, ...], forced: bool) -> Reading:
    importer = registry.IMPORTERS[kinds[0]] if forced else registry.detect(path, kinds)
    if importer is None:
        what = kinds[0] if len(kinds) == 1 else "a format handoff imports"
        return Reading(problems=[Problem(str(path), f"skipped: not {what}")])
    try:
        reading = importer.read(path)
    except OSError as e:
        return Reading(problems=[Problem(str(path), f"cannot read: {e.strerror}")])
    if not (reading.conversations or reading.documents or reading.problems):
        why = f"skipped: no {importer.kind} conversation in it (a sub-agent's only, or empty)"
        reading.problems.append(Problem(str(path), why))
    return reading


def _progress(i: int, n: int) -> None:
    if n > PROGRESS_EVERY and (i % max(1, n // 10) == 0 or i == n):
        print(f"progress: {i}/{n} files", file=sys.stderr)


def _report(outcomes: list[Outcome], problems: list[Problem], as_json: bool) -> int:
    imported = [o for o in outcomes if o.imported]
    present = [o for o in outcomes if not o.imported and o.session_id]
    failed = [o for o in outcomes if not o.imported and not o.session_id]
    if as_json:
        sys.stdout.write(
            dumps_text(
                {
                    "imported": [_row(o) for o in imported],
                    "skipped": [_row(o) for o in (*present, *failed)],
                    "problems": [{"where": p.where, "reason": p.reason} for p in problems],
                },
                indent=True,
            )
            + "\n"
        )
    else:
        for o in imported:
            print(
                f"imported {o.session_id} from {o.source}" + (f": {o.reason}" if o.reason else "")
            )
            for note in o.notes:
                print(f"  note: {note}")
        for o in present:
            print(f"skipped {o.source}: {o.reason} ({o.session_id})", file=sys.stderr)
        for o in failed:
            print(f"skipped {o.source}: {o.reason}", file=sys.stderr)
        for p in problems:
            print(f"{p.where}: {p.reason}", file=sys.stderr)
        print(
            f"{len(imported)} imported, {len(present)} already in the store, "
            f"{len(failed) + len(problems)} problem(s)",
            file=sys.stderr,
        )
    return 0 if imported or present else 2


def _row(o: Outcome) -> dict[str, Any]:
    return {"source": o.source, "session_id": o.session_id, "reason": o.reason, "notes": o.notes}
