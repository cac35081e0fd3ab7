"""A closed-loop HTTP/1.1 load generator on raw asyncio streams, run as its own process.

Requests are pre-encoded bytes and answers are read with ``readuntil``/``readexactly``,
so the client costs a few tens of microseconds per request: on a two-core machine it
shares a core with the upstream and must stay far cheaper than the thing measured.

It runs as a worker: one JSON command per line on stdin, one JSON result per line on
stdout (see :func:`execute`). Every loop is bounded by a request count and a deadline.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Result = dict[str, Any]
BENCH_KEY = "sk-bench-not-a-key"
"""The key every bench client sends (and LiteLLM's master key, ``litellm_peer``)."""


def request_head(port: int, path: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nAuthorization: Bearer {BENCH_KEY}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def encode_request(port: int, path: str, body: bytes) -> bytes:
    return request_head(port, path, len(body)) + body


def _header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


async def read_response(reader: asyncio.StreamReader, on_chunk: Any = None) -> int:
    """Read one whole answer; returns its status. ``on_chunk(bytes)`` sees body pieces."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    if (_header(head, b"transfer-encoding") or b"").lower() == b"chunked":
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                return status
            data = await reader.readexactly(size + 2)
            if on_chunk is not None:
                on_chunk(data[:-2])
    length = int(_header(head, b"content-length") or b"0")
    data = await reader.readexactly(length)
    if on_chunk is not None and data:
        on_chunk(data)
    return status


@dataclass
class _Loop:
    """Shared bookkeeping of one closed-loop run."""

    limit: int
    deadline: float
    issued: int = 0
    ok: int = 0
    errors: int = 0
    latencies: list[float] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)

    def fail(self, why: str) -> None:
        self.errors += 1
        self.failures[why] = self.failures.get(why, 0) + 1

    def take(self) -> bool:
        if self.issued >= self.limit or time.perf_counter() >= self.deadline:
            return False
        self.issued += 1
        return True


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port, limit=1 << 22)


async def _worker(port: int, payload: bytes, loop: _Loop) -> None:
    conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    while loop.take():
        t0 = time.perf_counter()
        try:
            if conn is None:
                conn = await _connect(port)
            conn[1].write(payload)
            status = await read_response(conn[0])
        except (OSError, asyncio.IncompleteReadError, ValueError) as e:
            loop.fail(type(e).__name__)
            if conn is not None:
                conn[1].close()
            conn = None
            continue
        loop.latencies.append((time.perf_counter() - t0) * 1000)
        if status == 200:
            loop.ok += 1
        else:
            loop.fail(f"status {status}")
    if conn is not None:
        conn[1].close()


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100); 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


async def closed(
    port: int, path: str, body: bytes, concurrency: int, requests: int, seconds: float
) -> Result:
    """``concurrency`` connections each sending the next request as soon as one answers."""
    payload = encode_request(port, path, body)
    t0 = time.perf_counter()
    loop = _Loop(limit=requests, deadline=t0 + seconds)
    await asyncio.gather(*(_worker(port, payload, loop) for _ in range(concurrency)))
    elapsed = time.perf_counter() - t0
    return {
        "ok": loop.ok,
        "errors": loop.errors,
        "elapsed_s": elapsed,
        "rps": loop.ok / elapsed if elapsed > 0 else 0.0,
        "p50_ms": percentile(loop.latencies, 50),
        "p95_ms": percentile(loop.latencies, 95),
        "failures": loop.failures,
    }


async def stream_once(port: int, payload: bytes) -> list[float]:
    """Ms from sending the request to the arrival of each complete SSE event."""
    reader, writer = await _connect(port)
    times: list[float] = []
    buffer = bytearray()
    t0 = time.perf_counter()

    def on_chunk(data: bytes) -> None:
        now = (time.perf_counter() - t0) * 1000
        buffer.extend(data)
        while (end := buffer.find(b"\n\n")) >= 0:
            del buffer[: end + 2]
            times.append(now)

    try:
        writer.write(payload)
        status = await read_response(reader, on_chunk)
    finally:
        writer.close()
    if status != 200:
        raise ValueError(f"status {status}")
    return times


async def stream(port: int, path: str, body: bytes, requests: int, seconds: float) -> Result:
    """Sequential streamed requests, each on a fresh connection, timed per event."""
    payload = encode_request(port, path, body)
    deadline = time.perf_counter() + seconds
    runs: list[list[float]] = []
    errors = 0
    for _ in range(requests):
        if time.perf_counter() >= deadline:
            break
        try:
            runs.append(await stream_once(port, payload))
        except (OSError, asyncio.IncompleteReadError, ValueError):
            errors += 1
    return {"ok": len(runs), "errors": errors, "events_ms": runs}


def conversation_bodies(spec: Result) -> list[bytes]:
    """Each turn's request body: the history so far, one turn longer each time, as a
    client resends it. ``spec`` holds ``model`` and ``turns`` (the messages each turn
    adds; the last of them is the user's)."""
    history: list[Any] = []
    bodies = []
    for added in spec["turns"]:
        history.extend(added)
        bodies.append(json.dumps({"model": spec["model"], "messages": history}).encode())
    return bodies


async def replay(
    port: int, path: str, bodies: list[bytes], marker: bytes, tag: bytes, seconds: float
) -> Result:
    """Send one conversation's turns in order on one connection, each after the last
    answer, as a chat client does. ``marker`` in the bodies becomes ``tag`` (same
    length), so each replay is a conversation of its own, not a resend of the last."""
    if len(tag) != len(marker):
        raise ValueError("the tag must be as long as the marker")
    # Split once, send the pieces as they are: copying each ~250 KB body twice per turn
    # (tag, then head + body) was client CPU on the core the store's writer shares.
    parts = []
    for body in bodies:
        at = body.find(marker)
        if at < 0:
            parts.append((body[:0], memoryview(body), len(body)))
        else:
            parts.append((body[:at] + tag, memoryview(body)[at + len(marker) :], len(body)))
    deadline = time.perf_counter() + seconds
    loop = _Loop(limit=len(bodies), deadline=deadline)
    t0 = time.perf_counter()
    conn = await _connect(port)
    try:
        for start, rest, length in parts:
            if not loop.take():
                break
            conn[1].writelines((request_head(port, path, length), start, rest))
            status = await read_response(conn[0])
            if status == 200:
                loop.ok += 1
            else:
                loop.fail(f"status {status}")
    finally:
        conn[1].close()
    elapsed = time.perf_counter() - t0
    return {"ok": loop.ok, "errors": loop.errors, "elapsed_s": elapsed,
            "rps": loop.ok / elapsed if elapsed > 0 else 0.0, "failures": loop.failures}  # fmt: skip


_conversations: dict[str, list[bytes]] = {}


def execute(spec: Result, bodies: dict[str, bytes]) -> Result:
    """Run one command: ``{"op": "closed"|"stream"|"replay", "port", "path", "body_file",
    ...}``; for ``replay`` the file is a conversation (see :func:`conversation_bodies`)."""
    file = spec["body_file"]
    if spec["op"] == "replay":
        if file not in _conversations:
            _conversations[file] = conversation_bodies(json.loads(Path(file).read_bytes()))
        return asyncio.run(
            replay(spec["port"], spec.get("path", "/v1/chat/completions"), _conversations[file],
                   spec["marker"].encode(), spec["tag"].encode(), spec["seconds"])
        )  # fmt: skip
    if file not in bodies:
        bodies[file] = Path(file).read_bytes()
    body = bodies[file]
    args = (spec["port"], spec.get("path", "/v1/chat/completions"), body)
    if spec["op"] == "closed":
        return asyncio.run(closed(*args, spec["concurrency"], spec["requests"], spec["seconds"]))
    if spec["op"] == "stream":
        return asyncio.run(stream(*args, spec["requests"], spec["seconds"]))
    raise ValueError(f"unknown op {spec['op']!r}")


def main() -> None:
    """``python -m bench.loadgen``: JSON commands in on stdin, JSON results out on stdout."""
    bodies: dict[str, bytes] = {}
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            result = execute(json.loads(line), bodies)
        except Exception as e:  # report, keep serving: the runner decides what to do
            result = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
