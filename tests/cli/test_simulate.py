"""``handoff simulate``: the simulated upstream on its own, for trying a client offline."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import aiohttp

from tests.fake_upstream import free_port
from tests.server.test_shutdown import ROOT


async def test_simulate_serves_models_and_chat() -> None:
    """It prints where it listens and what to run next, lists its two models with their
    windows, and answers a chat request saying what the model was sent."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "proxy.cli", "simulate", "--port", str(port)],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)
        assert f"http://127.0.0.1:{port}/v1" in first and "sim-small-8k" in first
        assert "handoff serve --upstream" in proc.stdout.readline()
        async with aiohttp.ClientSession() as s:
            async with s.get(f"http://127.0.0.1:{port}/v1/models") as r:
                ids = {m["id"]: m for m in (await r.json())["data"]}
            assert ids["sim-small-8k"]["context_window"] == 8192
            body = {"model": "sim-small-8k", "messages": [{"role": "user", "content": "hi"}]}
            async with s.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body) as r:
                assert r.status == 200
                assert (await r.json())["choices"][0]["message"]["content"]
    finally:
        proc.terminate()
        proc.wait(10)
