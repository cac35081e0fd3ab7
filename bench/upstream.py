"""A canned OpenAI upstream on raw asyncio streams, so the upstream is never the bottleneck.

``tests/fake_upstream/`` validates and records every request, which is right for
tests but would make the upstream, not the proxy, what a benchmark measures. This one
reads each request whole (keep-alive, Content-Length bodies), ignores what it says
except for ``"stream": true``, and answers at once: a fixed chat completion, or a
fixed SSE stream of ``chunks`` events ``chunk_delay`` seconds apart.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Sequence

COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello from the bench upstream."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16},
    }
).encode()


def json_response() -> bytes:
    """The whole HTTP/1.1 answer to a non-streaming chat request."""
    head = (
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(COMPLETION)}\r\nConnection: keep-alive\r\n\r\n"
    )
    return head.encode() + COMPLETION


SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
)


def sse_events(chunks: int) -> list[bytes]:
    """``chunks`` chat.completion.chunk events with one word each, then ``[DONE]``."""
    events = []
    for i in range(chunks):
        delta = {"role": "assistant", "content": "w "} if i == 0 else {"content": f"w{i} "}
        finish = "stop" if i == chunks - 1 else None
        event = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        events.append(b"data: " + json.dumps(event).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def http_chunk(data: bytes) -> bytes:
    """One chunk of a chunked transfer-encoded body."""
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def wants_stream(body: bytes) -> bool:
    return b'"stream": true' in body or b'"stream":true' in body


def chunk_delay(head: bytes, default: float) -> float:
    """``?chunk_delay_ms=N`` on the request line overrides the server's delay."""
    line = head.split(b"\r\n", 1)[0]
    _, found, rest = line.partition(b"chunk_delay_ms=")
    if not found:
        return default
    digits = rest.split(b"&")[0].split(b" ")[0]
    return float(digits) / 1000


def content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


class Upstream:
    """Answers every request on a connection in turn until the client closes it."""

    def __init__(self, chunks: int, chunk_delay: float) -> None:
        self.json = json_response()
        self.events = [http_chunk(e) for e in sse_events(chunks)]
        self.chunk_delay = chunk_delay

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                body = await reader.readexactly(content_length(head))
                if wants_stream(body):
                    await self._stream(writer, chunk_delay(head, self.chunk_delay))
                else:
                    writer.write(self.json)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _stream(self, writer: asyncio.StreamWriter, delay: float) -> None:
        writer.write(SSE_HEAD)
        for i, event in enumerate(self.events):
            if i and delay:
                await asyncio.sleep(delay)
            writer.write(event)
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()


async def serve(port: int, chunks: int, chunk_delay: float) -> None:
    upstream = Upstream(chunks, chunk_delay)
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", port, limit=1 << 20)
    print(f"listening on http://127.0.0.1:{port}/v1", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m bench.upstream --port N [--chunks K] [--chunk-delay S]``."""
    parser = argparse.ArgumentParser(description="canned OpenAI upstream for benchmarks")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--chunk-delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    asyncio.run(serve(args.port, args.chunks, args.chunk_delay))


if __name__ == "__main__":
    main()
