"""What knowing a kept-alive connection costs an upstream request: client CPU per POST on
aiohttp's TCPConnector, on handoff's KeptAliveConnector, and with an aiohttp trace that
says the same (the first way tried), interleaved rounds, against an aiohttp server on
loopback in another process. Run: ``python -m bench.bench_reuse_trace``."""

from __future__ import annotations

import asyncio
import multiprocessing
import statistics
import time

import aiohttp
from aiohttp import web

from proxy.upstream.kept_alive import KeptAliveConnector

PORT, N, ROUNDS = 18931, 2000, 8


def _serve() -> None:
    async def ok(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=b'{"ok":true}', content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", ok)
    web.run_app(app, host="127.0.0.1", port=PORT, print=None, access_log=None)


def _trace() -> aiohttp.TraceConfig:
    async def noted(session: object, ctx: object, params: object) -> None:
        pass

    trace = aiohttp.TraceConfig()
    trace.on_connection_reuseconn.append(noted)
    return trace


async def _round(way: str) -> float:
    traces = [_trace()] if way == "trace" else []
    connector = KeptAliveConnector() if way == "kept_alive" else aiohttp.TCPConnector()
    async with aiohttp.ClientSession(connector=connector, trace_configs=traces) as s:
        url = f"http://127.0.0.1:{PORT}/v1/chat/completions"
        body = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'
        for _ in range(50):  # warm the pool
            async with s.post(url, data=body) as r:
                await r.read()
        t0 = time.process_time()
        for _ in range(N):
            async with s.post(url, data=body) as r:
                await r.read()
        return (time.process_time() - t0) / N * 1e6


async def main() -> None:
    server = multiprocessing.Process(target=_serve, daemon=True)
    server.start()
    await asyncio.sleep(1.0)
    try:
        ways = ("plain", "kept_alive", "trace")
        runs: dict[str, list[float]] = {w: [] for w in ways}
        for _ in range(ROUNDS):
            for way in ways:
                runs[way].append(await _round(way))
        base = statistics.median(runs["plain"])
        for way in ways:
            m = statistics.median(runs[way])
            print(f"{way:>10}: {m:6.1f} µs client CPU per request, {m / base:.3f}x plain")
    finally:
        server.terminate()
        server.join()


if __name__ == "__main__":
    asyncio.run(main())
