"""``handoff sessions remember ID`` and ``handoff sessions recall``: write a session's
memory now, and print what a new conversation that starts over would be given."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from proxy.config import load_settings
from proxy.decide.recall import RecallAsk, compose
from proxy.decide.tokens import TokenCounter
from proxy.server.recall_source import memories_for
from proxy.store import memories
from proxy.store.jsonout import dumps_text
from proxy.store.read import SqliteReader
from proxy.store.remember import remembered, session_messages


def register(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser("remember", parents=[common], help="write a session's memory now")
    p.add_argument("id")
    p = sub.add_parser("recall", parents=[common], help="what a new conversation would recall")
    p.add_argument("--query", default="", metavar="TEXT", help="rank the memories by this text")
    p.add_argument("--workspace", help="whose memories (default: the latest session's)")
    p.add_argument("--model", default="gpt-4o", help="count tokens for this model")


def remember(args: argparse.Namespace, path: Path) -> int:
    reader = SqliteReader(path)
    info, messages = session_messages(reader, args.id)
    settings = load_settings(getattr(args, "config", None))
    skip = [*settings.memory.remember_phrases, *settings.recall.phrases]
    record = asyncio.run(remembered(info["workspace"], info["id"], messages, "command", skip=skip))
    memories.save(path, record, redact=settings.store.redact)
    if args.json:
        sys.stdout.write(dumps_text(reader.memory(info["id"]), indent=True) + "\n")
    else:
        print(f"memory of {info['id']} ({record.turns} user turns, {record.source}):\n")
        print(record.text)
    return 0


def recall(args: argparse.Namespace, path: Path) -> int:
    reader = SqliteReader(path)
    settings = load_settings(getattr(args, "config", None))
    workspace = args.workspace
    if workspace is None:
        latest = reader.list_sessions(limit=1)
        if not latest:
            print("nothing to recall: the store has no sessions", file=sys.stderr)
            return 1
        workspace = latest[0]["workspace"]
    counter = TokenCounter(10_000).for_model(args.model)
    ask = RecallAsk(
        workspace, "auto", args.query, settings.recall.max_tokens, counter.count_text,
        settings.recall.memories,
    )  # fmt: skip
    found = compose(memories_for(reader, ask), ask.max_tokens, ask.count)
    if found is None:
        print(f"nothing to recall in workspace {workspace!r}", file=sys.stderr)
        return 1
    if args.json:
        doc = {"workspace": workspace, "sessions": list(found.sessions), "message": found.text}
        sys.stdout.write(dumps_text(doc, indent=True) + "\n")
    else:
        print(f"workspace {workspace}: recalls {', '.join(found.sessions)}\n")
        print(found.text)
    return 0
