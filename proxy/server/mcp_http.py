"""``/mcp`` on the running proxy: the MCP tools over streamable HTTP, inside aiohttp.

The SDK's transport is an ASGI application, so the cleanest mount is a bridge, not a
second server: the SDK's own :class:`StreamableHTTPSessionManager` (stateless, JSON
answers: every POST is one JSON-RPC exchange, nothing to resume) runs for the app's
lifetime in a cleanup context, and the route hands it each aiohttp request as an ASGI
scope, its body as the one ``http.request`` message, and writes what the SDK sends back
as an aiohttp streamed response. The protocol, its validation and its errors stay the
SDK's; only the bytes cross. The route is wrapped like every other (browser guard,
access key) and answers loopback clients or ``x-handoff-key`` holders, like
``/handoff/v1``; the caller's workspace rides in the scope's state and the tools read
only it (:mod:`proxy.server.mcp_tools`). DNS-rebinding checks are the browser guard's,
so the SDK's own are off. (Writing the transport's JSON-RPC POST path on aiohttp by hand
was the other way: it would repeat the SDK's version negotiation and validation, and drift
from it.)
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from proxy.errors import Forbidden
from proxy.server.endpoint import holds_key
from proxy.server.mcp_tools import HOME_STATE, WORKSPACE_STATE, McpWorld, build_mcp
from proxy.server.workspace import home_workspace, workspace_for

PATH = "/mcp"
MANAGER = web.AppKey("mcp_manager", StreamableHTTPSessionManager)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def add_mcp_route(
    app: web.Application, world: McpWorld, access_key: str, wrap: Callable[[Handler], Handler]
) -> None:
    server = build_mcp(world)
    server.streamable_http_app(
        streamable_http_path=PATH,
        json_response=True,
        stateless_http=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    app[MANAGER] = server.session_manager

    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        # The manager's task group must be entered and left in one task, and aiohttp may
        # run a cleanup context's two halves in two: it gets an owned task of its own.
        started, stop = asyncio.Event(), asyncio.Event()

        async def hold() -> None:
            async with app[MANAGER].run():
                started.set()
                await stop.wait()

        task = asyncio.create_task(hold(), name="handoff-mcp")
        waiter = asyncio.create_task(started.wait())
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done():
            task.result()  # (it failed to start: say why)
        yield
        stop.set()
        await task

    async def endpoint(request: web.Request) -> web.StreamResponse:
        if not (
            is_loopback(request.remote) or (access_key and holds_key(request, access_key.encode()))
        ):
            raise Forbidden(
                "/mcp answers loopback clients or holders of handoff's access key (x-handoff-key)"
            )
        return await bridge(request, request.app[MANAGER])

    app.cleanup_ctx.append(lifetime)
    app.router.add_route("*", PATH, wrap(endpoint))


async def bridge(request: web.Request, manager: StreamableHTTPSessionManager) -> web.StreamResponse:
    """Serve ``request`` with the SDK's ASGI handler."""
    body = await request.read()
    done = asyncio.Event()
    sent = False
    response: web.StreamResponse | None = None

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        await done.wait()
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            response = web.StreamResponse(status=message["status"])
            for k, v in message.get("headers", []):
                response.headers.add(k.decode("latin-1"), v.decode("latin-1"))
            await response.prepare(request)
        elif message["type"] == "http.response.body" and response is not None:
            await response.write(message.get("body", b""))
            if not message.get("more_body", False):
                await response.write_eof()

    try:
        await manager.handle_request(_scope(request), receive, send)
    finally:
        done.set()
    if response is None:
        return web.Response(status=500, text="the MCP handler sent no response")
    return response


def is_loopback(remote: str | None) -> bool:
    try:
        return remote is not None and ipaddress.ip_address(remote).is_loopback
    except ValueError:
        return False


def _scope(request: web.Request) -> dict[str, Any]:
    host, port = (
        (request.transport.get_extra_info("sockname") or ("127.0.0.1", 0))[:2]
        if request.transport
        else ("127.0.0.1", 0)
    )
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": "http",
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1"),
        "query_string": request.query_string.encode("latin-1"),
        "root_path": "",
        "headers": [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in request.headers.items()
        ],
        "client": (request.remote or "", 0),
        "server": (host, port),
        "state": {
            WORKSPACE_STATE: workspace_for(request.headers),
            HOME_STATE: home_workspace(request.headers),
        },
    }
