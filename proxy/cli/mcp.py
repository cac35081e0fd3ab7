"""``handoff mcp``: handoff's tools for MCP clients (Claude Code, Cursor, Codex …) over stdio.

The client starts it as a subprocess and speaks JSON-RPC on its stdin and stdout (logs
go to stderr). It reads the configured store as the CLI does; ``--workspace`` limits it
to one workspace. The running proxy serves the same tools at ``/mcp``.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from proxy.config import load_settings
from proxy.server.build import build_engine
from proxy.server.mcp_tools import McpWorld, build_mcp
from proxy.store import memories
from proxy.store.base import MemoryRecord
from proxy.store.read import SqliteReader
from proxy.upstream.routing import Router, build_upstreams


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("mcp", help="serve handoff's tools to an MCP client over stdio")
    p.add_argument("--store", metavar="PATH", help="the store file (default: from config)")
    p.add_argument("--workspace", help="show only this workspace's sessions and memories")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings(getattr(args, "config", None))
    store = getattr(args, "store", None)
    path = Path(store).expanduser() if store else settings.store_path()
    router = Router(build_upstreams(settings))
    engine = build_engine(settings, router)
    reader = SqliteReader(path) if settings.store.enabled or store else None
    if reader is not None and path.is_file():
        engine.calibration.load(reader.load_calibration())
    redact = settings.store.redact

    def save(rec: MemoryRecord) -> None:
        memories.save(path, rec, redact=redact)

    world = McpWorld(settings, engine, router, reader, save if reader else None, args.workspace)
    try:
        asyncio.run(build_mcp(world).run_stdio_async())
    finally:
        engine.close()
    return 0
