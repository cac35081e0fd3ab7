"""Serving a fake outside pytest: a free port, ``running()``, and ``python -m tests.fake_upstream``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable, Sequence

from aiohttp import web

from tests.fake_upstream.server import FakeUpstream


def free_port(host: str = "127.0.0.1") -> int:
    """A port with nothing listening on it (for connection-refused tests)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def running(
    fake: FakeUpstream, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[FakeUpstream]:
    """Serve ``fake`` on ``host:port`` (0: any free port) for the ``async with`` body."""
    runner = web.AppRunner(fake.app(), handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    fake.attach(f"http://{bound_host}:{bound_port}/v1", runner.cleanup)
    try:
        yield fake
    finally:
        await fake.stop()


async def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    fake: FakeUpstream | None = None,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve a fake until cancelled; ``ready`` gets its base URL once it listens."""
    async with running(fake or FakeUpstream(), host, port) as served:
        if ready is not None:
            ready(served.url)
        await asyncio.Event().wait()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m tests.fake_upstream --port N``: prints its base URL, serves until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--chunk-delay", type=float, default=0.0)
    parser.add_argument("--stream-chunks", type=int, default=4)
    parser.add_argument("--accept-unknown-models", action="store_true")
    args = parser.parse_args(argv)
    fake = FakeUpstream(
        chunk_delay=args.chunk_delay,
        stream_chunks=args.stream_chunks,
        accept_unknown_models=args.accept_unknown_models,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, fake, lambda url: print(url, flush=True)))


if __name__ == "__main__":
    main()
