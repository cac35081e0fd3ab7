"""``handoff simulate``: the demo's simulated upstream on its own, to try a client with no
account and no network.

It serves ``sim-large-1m`` (a 1M window) and ``sim-small-8k`` (8k) on loopback, each
window enforced with an exact count, and answers what each model was really sent.
Point handoff at it (``handoff serve --upstream http://127.0.0.1:PORT/v1``), then any
client at handoff.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from typing import Any

from aiohttp import web

from proxy.cli.simulated_upstream import MODELS, SimulatedUpstream


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate", help="run the simulated upstream (no account, no network needed)"
    )
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8788, help="listen port (default 8788)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_serve(args.host, args.port))
    except OSError as e:
        print(f"handoff simulate: cannot listen on {args.host}:{args.port}: {e.strerror}")
        return 1
    return 0


async def _serve(host: str, port: int) -> None:
    runner = web.AppRunner(SimulatedUpstream().app(), handler_cancellation=True)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        url = f"http://{host}:{port}/v1"
        models = ", ".join(f"{m} ({w:,} tokens)" for m, w in MODELS.items())
        print(f"simulated upstream on {url}: {models}", flush=True)
        print(f"next: handoff serve --upstream {url}", flush=True)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
