"""Memory for one large non-streamed answer through handoff: ``python -m bench.big_answer``.

Serves, from this process, an upstream whose chat completion is ``--mb`` megabytes of
JSON; starts ``handoff serve`` (from ``--tree``, default this checkout) with its store
in a temporary directory (or ``--no-store``); sends one small warm-up request, resets handoff's peak, then
asks for the large answer once, reading it as it comes and dropping it. Prints
handoff's RSS before, its peak while answering and what it still holds a few seconds
after, and the same for the store's writer process. Linux only (``/proc``). Run it
from outside any checkout, so that ``--tree`` decides which code the server runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from bench.procs import Cores, Fleet, Server, free_port, memory_kb, reset_peak, store_writer_pid

SMALL = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}'


def completion(megabytes: int) -> bytes:
    body = {
        "id": "chatcmpl-big",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "x" * (megabytes * 1_000_000)},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    return json.dumps(body).encode()


async def serve_upstream(big: bytes, small: bytes) -> asyncio.Server:
    """Answers ``big`` to a request whose body mentions "big", else ``small``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = big if b"big" in await reader.readexactly(length) else small
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\n\r\n" % len(body)
                )
                for i in range(0, len(body), 1 << 20):
                    writer.write(body[i : i + (1 << 20)])
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, StopIteration):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def start_handoff(
    fleet: Fleet, tree: Path, upstream_port: int, store: Path | None, cpus: frozenset[int]
) -> Server:
    """handoff from ``tree``: first on the path, as long as the working directory (which
    ``python -m`` puts before it) holds no checkout."""
    port = free_port()
    config = fleet.workdir / "empty.toml"
    config.touch()
    argv = [sys.executable, "-m", "proxy.cli", "--config", str(config), "serve",
            "--port", str(port), "--upstream", f"http://127.0.0.1:{upstream_port}/v1",
            *(["--store", str(store)] if store else ["--no-store"]),
            "--log-format", "json"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANDOFF_")}
    return fleet.start("handoff", argv, port, cpus, {**env, "PYTHONPATH": str(tree)})


def mib(kib: int) -> str:
    return f"{kib / 1024:,.0f} MiB"


async def measure(tree: Path, megabytes: int, settle_s: float, store: bool) -> None:
    big = completion(megabytes)
    upstream = await serve_upstream(big, SMALL)
    upstream_port = upstream.sockets[0].getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp, Fleet(Path(tmp)) as fleet:
        db = Path(tmp) / "h.db" if store else None
        server = start_handoff(fleet, tree, upstream_port, db, Cores.detect().server)
        url = f"http://127.0.0.1:{server.port}/v1/chat/completions"
        timeout = aiohttp.ClientTimeout(total=600)
        async with aiohttp.ClientSession(timeout=timeout) as s:
            async with s.post(url, data=SMALL) as r:
                await r.read()
            await asyncio.sleep(1.0)
            writer = store_writer_pid(server.pid)
            pids = {"handoff": server.pid, **({"writer": writer} if writer else {})}
            before = {name: memory_kb(pid)["VmRSS"] for name, pid in pids.items()}
            for pid in pids.values():
                reset_peak(pid)
            t0, got = time.perf_counter(), 0
            big_request = SMALL.replace(b'"hi"', b'"big"')
            async with s.post(url, data=big_request) as r:
                async for chunk in r.content.iter_any():
                    got += len(chunk)
            seconds = time.perf_counter() - t0
        await asyncio.sleep(settle_s)
        print(
            f"answer: {len(big):,} bytes, received {got:,} in {seconds:.1f} s; "
            f"tree {tree}, store {'on' if store else 'off'}"
        )
        for name, pid in pids.items():
            now = memory_kb(pid)
            print(
                f"{name:8} rss before {mib(before[name])}, peak {mib(now['VmHWM'])}, "
                f"after {settle_s:.0f} s {mib(now['VmRSS'])}"
            )
    await asyncio.sleep(0.5)  # its connections close: the upstream's handlers end
    upstream.close()
    await upstream.wait_closed()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1])
    parser.add_argument("--mb", type=int, default=315)
    parser.add_argument("--settle-s", type=float, default=5.0)
    parser.add_argument("--no-store", action="store_true")
    args = parser.parse_args(argv)
    asyncio.run(measure(args.tree.resolve(), args.mb, args.settle_s, not args.no_store))


if __name__ == "__main__":
    main()
