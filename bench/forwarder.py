"""A bare aiohttp forwarder: the floor for a proxy built on this stack.

It relays method, path, query, headers and body to one upstream through one pooled
``ClientSession`` and streams the answer back chunk by chunk. It parses nothing,
logs nothing and records nothing, so whatever handoff costs beyond it is handoff's own.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator, Sequence

import aiohttp
from aiohttp import web

UPSTREAM = web.AppKey("upstream", str)
SESSION = web.AppKey("session", aiohttp.ClientSession)
_HOP = frozenset(
    {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade"}
)


async def forward(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
    url = request.app[UPSTREAM] + request.rel_url.path_qs
    async with request.app[SESSION].request(
        request.method, url, headers=headers, data=body, allow_redirects=False
    ) as up:
        out = web.StreamResponse(status=up.status)
        for k, v in up.headers.items():
            if k.lower() not in _HOP:
                out.headers.add(k, v)
        await out.prepare(request)
        async for chunk in up.content.iter_any():
            await out.write(chunk)
        await out.write_eof()
        return out


async def _session(app: web.Application) -> AsyncIterator[None]:
    timeout = aiohttp.ClientTimeout(total=None, sock_read=60)
    connector = aiohttp.TCPConnector(limit=0)
    app[SESSION] = aiohttp.ClientSession(
        connector=connector, timeout=timeout, auto_decompress=False
    )
    yield
    await app[SESSION].close()


def create_app(upstream: str) -> web.Application:
    """``upstream`` is an origin such as ``http://127.0.0.1:9000`` (paths pass as they are)."""
    app = web.Application(client_max_size=64 << 20)
    app[UPSTREAM] = upstream.rstrip("/")
    app.cleanup_ctx.append(_session)
    app.router.add_route("*", "/{tail:.*}", forward)
    return app


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m bench.forwarder --upstream http://127.0.0.1:P --port N``."""
    parser = argparse.ArgumentParser(description="bare aiohttp forwarder (benchmark floor)")
    parser.add_argument("--upstream", required=True, help="origin, e.g. http://127.0.0.1:9000")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    web.run_app(
        create_app(args.upstream), host="127.0.0.1", port=args.port, print=None, access_log=None
    )


if __name__ == "__main__":
    main()
