"""The MCP tools about what handoff recorded: sessions, their export, recall and memories.

Every read goes through :meth:`McpWorld.scope`, so a caller sees only its own workspace.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError

from proxy.decide.recall import RecallAsk, compose
from proxy.server.mcp_world import McpWorld, guarded
from proxy.server.recall_source import memories_for
from proxy.store.durations import parse_since
from proxy.store.export import export
from proxy.store.remember import remembered, session_messages

ExportFormat = Literal[
    "portable", "openai", "responses", "anthropic", "ollama", "native", "markdown"
]


@dataclass(frozen=True, slots=True)
class SessionTools:
    """Each method is one tool; its name, typed inputs and docstring are what clients see."""

    world: McpWorld

    def list_sessions(
        self, query: str = "", since: str = "", model: str = "", ctx: Context | None = None
    ) -> list[dict[str, Any]]:
        """Recorded sessions, newest first: ``query`` searches message text, ``since`` is
        7d, 12h or an ISO date, ``model`` one the session used."""
        reader, _ = self.world.scope(ctx)
        try:
            when = parse_since(since) if since else None
        except Exception as e:
            raise ToolError(f"since: {e}") from None
        return list(
            guarded(
                lambda: reader.list_sessions(
                    search=query or None, since=when, model=model or None, limit=50
                )
            )
        )

    def show_session(
        self, id: str, turn: int | None = None, ctx: Context | None = None
    ) -> dict[str, Any]:
        """A session's timeline, or with ``turn`` that turn in full."""
        reader, _ = self.world.scope(ctx)
        if turn is None:
            return dict(guarded(lambda: reader.session(id)))
        return dict(guarded(lambda: reader.turn(id, turn)))

    def export_session(
        self, id: str, format: ExportFormat = "portable", ctx: Context | None = None
    ) -> dict[str, Any]:
        """A session as a portable document, a request body (OpenAI chat, OpenAI Responses,
        Anthropic Messages, Ollama; ``native``: the format it was recorded in) or Markdown
        (a string)."""
        reader, _ = self.world.scope(ctx)
        return {"format": format, "document": guarded(lambda: export(reader, id, format))}

    def recall(self, query: str = "", ctx: Context | None = None) -> dict[str, Any]:
        """What a new conversation of this workspace that starts over would be given."""
        reader, workspace = self.world.scope(ctx)
        if workspace is None:
            latest = guarded(lambda: reader.list_sessions(limit=1))
            if not latest:
                raise ToolError("nothing to recall: no sessions recorded")
            workspace = latest[0]["workspace"]
        counter = self.world.engine.tokens.for_model("gpt-4o")
        cfg = self.world.settings.recall
        ask = RecallAsk(workspace, "auto", query, cfg.max_tokens, counter.count_text, cfg.memories)
        found = compose(guarded(lambda: memories_for(reader, ask)), ask.max_tokens, ask.count)
        if found is None:
            return {"workspace": workspace, "sessions": [], "message": None}
        return {"workspace": workspace, "sessions": list(found.sessions), "message": found.text}

    async def remember(self, session_id: str, ctx: Context | None = None) -> dict[str, Any]:
        """Write the session's memory now, and return it."""
        reader, _ = self.world.scope(ctx)
        info, msgs = guarded(lambda: session_messages(reader, session_id))
        cfg = self.world.settings
        skip = [*cfg.memory.remember_phrases, *cfg.recall.phrases]
        rec = await remembered(info["workspace"], info["id"], msgs, "command", skip=skip)
        if self.world.save_memory is None:
            raise ToolError("handoff has no store here")
        await asyncio.to_thread(self.world.save_memory, rec)
        return {"session_id": rec.session_id, "source": rec.source, "turns": rec.turns,
                "memory": dict(rec.memory), "text": rec.text}  # fmt: skip
