"""handoff's tools for MCP clients, on the official SDK's :class:`MCPServer`.

The same server runs over stdio (``handoff mcp``) and over streamable HTTP at ``/mcp``
on the running proxy (``mcp_http``). Each tool is a typed function; what a client did
wrong (an unknown model, session or format, messages that are not chat messages)
raises :class:`ToolError`, which the SDK returns as an error result. Over HTTP a client
sees only its own workspace: the bridge puts it in the request's state, and every
store read goes through ``reader.within(workspace)``. Over stdio the user runs it on
their own file, as the CLI does, optionally limited with ``--workspace``.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any, Literal

import orjson
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from proxy.config import Settings
from proxy.decide.engine import Engine
from proxy.decide.recall import RecallAsk, compose
from proxy.errors import HandoffError
from proxy.ingress.chat_completions import parse_chat
from proxy.server.recall_source import memories_for
from proxy.store.base import MemoryRecord, StoreReader
from proxy.store.durations import parse_since
from proxy.store.errors import StoreError
from proxy.store.export import export
from proxy.store.remember import remembered, session_messages
from proxy.upstream.routing import Router, Upstream

WORKSPACE_STATE = "handoff_workspace"
"""The key the HTTP bridge sets in the ASGI scope's state: the client's workspace."""
HOME_STATE = "handoff_home"
"""And the workspace its key owns, sub-workspaces included: what it may read."""

ExportFormat = Literal[
    "portable", "openai", "responses", "anthropic", "ollama", "native", "markdown"
]


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


def _guard(fn: Callable[[], Any]) -> Any:
    """Run a store read, its expected failures as the client's error."""
    try:
        return fn()
    except StoreError as e:
        raise ToolError(str(e)) from None
    except sqlite3.Error as e:
        raise ToolError(f"the store cannot be read: {e}") from None


def build_mcp(world: McpWorld) -> MCPServer:
    """The MCP server with every handoff tool."""
    # MCPServer calls logging.basicConfig, which would put a handler of its own on the
    # root logger of the proxy's process (and print aiohttp's access log): a handler
    # already there makes that call do nothing.
    root, hold = logging.getLogger(), logging.NullHandler()
    root.addHandler(hold)
    try:
        mcp: MCPServer = MCPServer(
            "handoff",
            instructions="Context windows, token counts, fitting a conversation to a model, "
            "and the sessions and memories handoff recorded.",
            log_level="WARNING",
        )
    finally:
        root.removeHandler(hold)

    @mcp.tool()
    def model_context_window(model: str) -> dict[str, Any]:
        """A model's context window and max output, where the figure comes from, its
        token-count calibration and any window learned from its upstream."""
        info = world.engine.registry.lookup(model)
        if info is None:
            raise ToolError(world.engine.registry.explain(model))
        learned = info.context_window if info.source.startswith("discovered") else None
        return {
            "model": model,
            "context_window": info.context_window,
            "max_output_tokens": info.max_output_tokens,
            "source": info.source,
            "matched": info.matched,
            "explanation": world.engine.registry.explain(model),
            "calibration": world.engine.calibration.factor(model),
            "learned_limit": learned,
        }

    @mcp.tool()
    def list_known_models(filter: str = "") -> list[dict[str, Any]]:
        """Every model handoff knows a window for; ``filter`` is a substring or glob."""
        pat = filter.strip().lower()
        out = []
        for i in world.engine.registry.entries():
            name = i.name.lower()
            if pat and pat not in name and not fnmatchcase(name, pat):
                continue
            out.append(
                {"model": i.name, "context_window": i.context_window,
                 "max_output_tokens": i.max_output_tokens, "source": i.source}
            )  # fmt: skip
        return out

    def _request(messages: list[dict[str, Any]], model: str) -> Any:
        if not model.strip():
            raise ToolError("model is empty: name the model, e.g. gpt-4o")
        try:
            return parse_chat(orjson.dumps({"model": model, "messages": messages}))
        except HandoffError as e:
            raise ToolError(str(e)) from None

    @mcp.tool()
    async def count_tokens(messages: list[dict[str, Any]], model: str) -> dict[str, Any]:
        """The prompt tokens of ``messages`` for ``model``, and whether the count is exact."""
        req = _request(messages, model)
        info = world.engine.registry.lookup(model)
        counter = await asyncio.to_thread(
            world.engine.tokens.for_model, model, info.tokenizer if info else None
        )
        tokens = await asyncio.to_thread(counter.count_request, req.body)
        return {"model": model, "tokens": tokens, "exact": counter.exact}

    @mcp.tool()
    async def migrate_session(messages: list[dict[str, Any]], target_model: str) -> dict[str, Any]:
        """Fit ``messages`` to ``target_model`` as the proxy would send them: the decision
        (passthrough or compressed), the fitted messages and what was dropped or summarized."""
        req = _request(messages, target_model)
        try:
            up = world.router.route(target_model)
        except HandoffError:  # no route: plan as a route that compresses would
            up = Upstream(name="(plan)", base_url="http://127.0.0.1", patterns=("*",))
        try:
            plan = await world.engine.plan(req, up)
        except HandoffError as e:
            raise ToolError(str(e)) from None
        d = plan.decision
        return {
            "decision": d.action if d else "passthrough",
            "window": d.window if d else None,
            "budget": d.budget if d else None,
            "tokens": d.tokens if d else None,
            "forwarded_tokens": d.forwarded_tokens if d else None,
            "policies": list(d.policies) if d else [],
            "steps": [dict(s) for s in d.steps] if d else [],
            "messages": plan.forwarded if plan.forwarded is not None else messages,
        }

    @mcp.tool()
    def list_sessions(
        query: str = "", since: str = "", model: str = "", ctx: Context | None = None
    ) -> list[dict[str, Any]]:
        """Recorded sessions, newest first: ``query`` searches message text, ``since`` is
        7d, 12h or an ISO date, ``model`` one the session used."""
        reader, _ = world.scope(ctx)
        try:
            when = parse_since(since) if since else None
        except Exception as e:
            raise ToolError(f"since: {e}") from None
        return list(
            _guard(
                lambda: reader.list_sessions(
                    search=query or None, since=when, model=model or None, limit=50
                )
            )
        )

    @mcp.tool()
    def show_session(
        id: str, turn: int | None = None, ctx: Context | None = None
    ) -> dict[str, Any]:
        """A session's timeline, or with ``turn`` that turn in full."""
        reader, _ = world.scope(ctx)
        if turn is None:
            return dict(_guard(lambda: reader.session(id)))
        return dict(_guard(lambda: reader.turn(id, turn)))

    @mcp.tool()
    def export_session(
        id: str, format: ExportFormat = "portable", ctx: Context | None = None
    ) -> dict[str, Any]:
        """A session as a portable document, a request body (OpenAI chat, OpenAI Responses,
        Anthropic Messages, Ollama; ``native``: the format it was recorded in) or Markdown
        (a string)."""
        reader, _ = world.scope(ctx)
        return {"format": format, "document": _guard(lambda: export(reader, id, format))}

    @mcp.tool()
    def recall(query: str = "", ctx: Context | None = None) -> dict[str, Any]:
        """What a new conversation of this workspace that starts over would be given."""
        reader, workspace = world.scope(ctx)
        if workspace is None:
            latest = _guard(lambda: reader.list_sessions(limit=1))
            if not latest:
                raise ToolError("nothing to recall: no sessions recorded")
            workspace = latest[0]["workspace"]
        counter = world.engine.tokens.for_model("gpt-4o")
        cfg = world.settings.recall
        ask = RecallAsk(workspace, "auto", query, cfg.max_tokens, counter.count_text, cfg.memories)
        found = compose(_guard(lambda: memories_for(reader, ask)), ask.max_tokens, ask.count)
        if found is None:
            return {"workspace": workspace, "sessions": [], "message": None}
        return {"workspace": workspace, "sessions": list(found.sessions), "message": found.text}

    @mcp.tool()
    async def remember(session_id: str, ctx: Context | None = None) -> dict[str, Any]:
        """Write the session's memory now, and return it."""
        reader, _ = world.scope(ctx)
        info, msgs = _guard(lambda: session_messages(reader, session_id))
        cfg = world.settings
        skip = [*cfg.memory.remember_phrases, *cfg.recall.phrases]
        rec = await remembered(info["workspace"], info["id"], msgs, "command", skip=skip)
        if world.save_memory is None:
            raise ToolError("handoff has no store here")
        await asyncio.to_thread(world.save_memory, rec)
        return {"session_id": rec.session_id, "source": rec.source, "turns": rec.turns,
                "memory": dict(rec.memory), "text": rec.text}  # fmt: skip

    return mcp
