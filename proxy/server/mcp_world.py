"""What handoff's MCP tools work with, and which part of the store a caller may read.

Over HTTP a client sees only its own workspace: the bridge puts it in the request's
state, and every store read goes through ``reader.within(workspace)``. Over stdio the
user runs it on their own file, as the CLI does, optionally limited with ``--workspace``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from proxy.config import Settings
from proxy.decide.engine import Engine
from proxy.store.base import MemoryRecord, StoreReader
from proxy.store.errors import StoreError
from proxy.upstream.routing import Router

WORKSPACE_STATE = "handoff_workspace"
"""The key the HTTP bridge sets in the ASGI scope's state: the client's workspace."""
HOME_STATE = "handoff_home"
"""And the workspace its key owns, sub-workspaces included: what it may read."""


@dataclass(slots=True)
class McpWorld:
    """What the tools work with: the proxy's own engine and router, and the store."""

    settings: Settings
    engine: Engine
    router: Router
    reader: StoreReader | None
    save_memory: Callable[[MemoryRecord], None] | None
    """Writes a memory into the store (blocking); None when there is no store."""
    workspace: str | None = None  # stdio: limit to this workspace (None: every one)

    def scope(self, ctx: Context | None) -> tuple[StoreReader, str | None]:
        """The reader this caller may use, and its workspace (None: the whole store)."""
        if self.reader is None:
            raise ToolError("handoff has no store here (store.enabled = false)")
        request = _http_request(ctx)
        if request is None:
            ws = self.workspace
            return (self.reader if ws is None else self.reader.within(ws)), ws
        state = request.scope.get("state", {})
        home, workspace = state.get(HOME_STATE), state.get(WORKSPACE_STATE)
        if home is None or workspace is None:  # (the bridge always sets them: refuse)
            raise ToolError("no workspace for this request")
        return self.reader.within(home), workspace


def _http_request(ctx: Context | None) -> Any:
    if ctx is None:
        return None
    try:
        return ctx.request_context.request
    except ValueError:
        return None


def guarded(fn: Callable[[], Any]) -> Any:
    """Run a store read, its expected failures as the client's error."""
    try:
        return fn()
    except StoreError as e:
        raise ToolError(str(e)) from None
    except sqlite3.Error as e:
        raise ToolError(f"the store cannot be read: {e}") from None
