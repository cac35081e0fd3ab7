"""``GET /v1/responses``: Codex's Responses WebSocket, refused so that it falls back at once.

Codex opens a WebSocket to the Responses endpoint before it posts (when its provider
says ``supports_websockets``); a handshake answered with anything but 101 makes it
send the turn over HTTP (``POST /v1/responses``, streamed as SSE) instead, where
handoff fits and records it. A plain GET is relayed like any other path.
"""

from __future__ import annotations

from aiohttp import web

from proxy.errors import WebSocketRefused
from proxy.server.relay import passthrough


async def responses_get(request: web.Request) -> web.StreamResponse:
    if "websocket" in request.headers.get("Upgrade", "").lower():
        raise WebSocketRefused(
            "handoff does not speak the Responses API over WebSocket: send the request as "
            "POST /v1/responses (set supports_websockets = false on the model provider in "
            "~/.codex/config.toml to skip this attempt)."
        )
    return await passthrough(request)
