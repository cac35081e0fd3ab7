"""handoff's tools for MCP clients, on the official SDK's :class:`MCPServer`.

The same server runs over stdio (``handoff mcp``) and over streamable HTTP at ``/mcp``
on the running proxy (``mcp_http``). Each tool is a typed method; what a client did
wrong (an unknown model, session or format, messages that are not chat messages)
raises :class:`ToolError`, which the SDK returns as an error result. The rooms:
:mod:`~proxy.server.mcp_world` (what the tools work with, and the workspace a caller
may read), :mod:`~proxy.server.mcp_model_tools` (windows, counts, fitting) and
:mod:`~proxy.server.mcp_session_tools` (sessions, export, recall, memories).
"""

from __future__ import annotations

import logging

from mcp.server.mcpserver import MCPServer

from proxy.server.mcp_model_tools import ModelTools
from proxy.server.mcp_session_tools import SessionTools
from proxy.server.mcp_world import HOME_STATE, WORKSPACE_STATE, McpWorld

__all__ = ["HOME_STATE", "WORKSPACE_STATE", "McpWorld", "build_mcp"]


def build_mcp(world: McpWorld) -> MCPServer:
    """The MCP server with every handoff tool, in the order clients list them."""
    mcp = _server()
    models, sessions = ModelTools(world), SessionTools(world)
    for tool in (
        models.model_context_window,
        models.list_known_models,
        models.count_tokens,
        models.migrate_session,
        sessions.list_sessions,
        sessions.show_session,
        sessions.export_session,
        sessions.recall,
        sessions.remember,
    ):
        mcp.tool()(tool)
    return mcp


def _server() -> MCPServer:
    # MCPServer calls logging.basicConfig, which would put a handler of its own on the
    # root logger of the proxy's process (and print aiohttp's access log): a handler
    # already there makes that call do nothing.
    root, hold = logging.getLogger(), logging.NullHandler()
    root.addHandler(hold)
    try:
        return MCPServer(
            "handoff",
            instructions="Context windows, token counts, fitting a conversation to a model, "
            "and the sessions and memories handoff recorded.",
            log_level="WARNING",
        )
    finally:
        root.removeHandler(hold)
