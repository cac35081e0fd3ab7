"""The benchmark harness: its pure parts, and a ``--quick`` run end to end (no timings)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from bench import bench_writer_replay, chart, litellm_peer
from bench.clients import parse_wrk
from bench.loadgen import percentile, read_response, replay
from bench.measure import Row
from bench.run import chat_body
from bench.upstream import SSE_HEAD, chunk_delay, http_chunk, json_response, sse_events

ROOT = Path(__file__).resolve().parents[2]
ROW_KEYS = {"what", "compared_with", "handoff", "baseline", "unit", "figure", "kind", "target"}


@given(st.integers(min_value=0, max_value=70_000), st.booleans())
@example(0, False)
@example(1024, True)
def test_chat_body_has_the_asked_size(size: int, stream: bool) -> None:
    """A generated body is a valid chat request of exactly the asked size (or the minimum)."""
    body = chat_body(size, stream)
    parsed = json.loads(body)
    assert parsed["model"] and parsed["messages"][1]["role"] == "user"
    assert parsed.get("stream", False) is stream
    assert len(body) == max(size, len(chat_body(0, stream)))


async def _read(raw: bytes) -> tuple[int, bytes]:
    reader = asyncio.StreamReader()
    reader.feed_data(raw)
    reader.feed_eof()
    parts: list[bytes] = []
    status = await read_response(reader, parts.append)
    return status, b"".join(parts)


async def test_loadgen_reads_a_chunked_sse_answer() -> None:
    """The load generator's reader reassembles the upstream's chunked SSE body exactly."""
    events = sse_events(3)
    raw = SSE_HEAD + b"".join(http_chunk(e) for e in events) + b"0\r\n\r\n"
    status, body = await _read(raw)
    assert status == 200
    assert body == b"".join(events)
    assert body.endswith(b"data: [DONE]\n\n")


async def test_loadgen_reads_a_content_length_answer() -> None:
    """A Content-Length answer is read whole and no further."""
    status, body = await _read(json_response() + b"HTTP/1.1 trailing garbage")
    assert status == 200
    assert json.loads(body)["object"] == "chat.completion"


def test_chunk_delay_comes_from_the_query() -> None:
    """``?chunk_delay_ms=`` overrides the upstream's default delay; absent, the default holds."""
    assert chunk_delay(b"POST /v1/chat/completions?chunk_delay_ms=5 HTTP/1.1\r\n", 0.0) == 0.005
    assert chunk_delay(b"POST /v1/chat/completions HTTP/1.1\r\n", 0.25) == 0.25


def test_percentile_is_nearest_rank() -> None:
    """p50 and p95 pick actual samples by nearest rank; no samples gives 0."""
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 95) == 95.0
    assert percentile([], 50) == 0.0


def test_parse_wrk_counts_errors() -> None:
    """Only successful answers count towards requests/s; non-2xx plus socket errors are
    errors (wrk's own Requests/sec, which counts a 401 like a 200, is not used)."""
    out = (
        "  12000 requests in 2.00s, 3.1MB read\n"
        "  Socket errors: connect 0, read 1, write 0, timeout 2\n"
        "  Non-2xx or 3xx responses: 4\nRequests/sec:   6000.50\n"
    )
    assert parse_wrk(out) == {"rps": 5998.0, "ok": 11996, "errors": 7}
    refused = "  619 requests in 5.01s, 198.27KB read\n  Non-2xx or 3xx responses: 619\n"
    assert parse_wrk(refused)["rps"] == 0.0
    assert parse_wrk("  300 requests in 500.00ms, 1KB read\n")["rps"] == 600.0


def test_chart_puts_litellm_on_its_own_axis() -> None:
    """Ratios against LiteLLM (tens) get their own panel; on one axis with the ~1x
    ratios against the forwarder, those bars would be slivers."""

    def row(what: str, compared: str, figure: float, target: str) -> Row:
        return Row(what, compared, 1.0, 1.0, "req/s", figure, "ratio", target, True)

    svg = chart.render(
        [
            row("throughput at concurrency 16", "bare forwarder", 0.9, "≥ 0.8×"),
            row("throughput at concurrency 16, vs LiteLLM", "litellm", 45.0, "≥ 20.0×"),
        ],
        "test machine",
    )
    tree = ET.fromstring(svg)
    ns = "{http://www.w3.org/2000/svg}"
    titles = [t.text for t in tree.iter(f"{ns}text") if t.get("class") == "title"]
    assert "handoff ÷ LiteLLM's proxy (| marks the target)" in titles
    bars = [float(r.get("width", 0)) for r in tree.iter(f"{ns}rect") if r.get("x") == "350"]
    assert len(bars) == 2 and min(bars) > 100, bars  # each scaled on its own axis


async def test_a_peer_that_refuses_is_reported_not_measured() -> None:
    """LiteLLM is checked with one chat request before any round: a 401 (a wrong master
    key, say) or a non-completion is named; a chat completion passes."""
    from aiohttp import web

    answers = [
        web.json_response({"error": {"message": "Authentication Error"}}, status=401),
        web.json_response({"object": "list", "data": []}),
        web.json_response({"object": "chat.completion", "choices": []}),
    ]

    async def handle(request: web.Request) -> web.Response:
        assert request.headers["Authorization"] == f"Bearer {litellm_peer.MASTER_KEY}"
        return answers.pop(0)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        body = chat_body(200)
        refused = await asyncio.to_thread(litellm_peer.answer_problem, port, body)
        assert refused is not None and refused.startswith("HTTP 401")
        odd = await asyncio.to_thread(litellm_peer.answer_problem, port, body)
        assert odd is not None and odd.startswith("unexpected answer")
        assert await asyncio.to_thread(litellm_peer.answer_problem, port, body) is None
    finally:
        await runner.cleanup()


@pytest.mark.slow
def test_quick_run_writes_well_formed_results(tmp_path: Path) -> None:
    """``python -m bench.run --quick`` starts and stops its servers and writes all 3 outputs."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "results.json").read_text())
    assert {"cpu", "cores", "python", "aiohttp"} <= set(data["machine"])
    whats = [row["what"] for row in data["rows"]]
    assert all(set(row) >= ROW_KEYS for row in data["rows"])
    for needle in ("CPU per request, 1KB", "CPU per request, 32KB", "1KB Messages body",
                   "concurrency 1, p50",
                   "concurrency 16", "concurrency 64", "time to first chunk",
                   "snapshots on", "500-turn conversation", "peak RSS"):  # fmt: skip
        assert any(needle in w for w in whats), needle
    replay = next(r for r in data["rows"] if "500-turn conversation" in r["what"])
    recorded = re.search(r"([\d,]+) of ([\d,]+) turns recorded", replay["note"])
    assert recorded and recorded.group(1) == recorded.group(2) != "0", replay["note"]
    assert re.search(r"[\d,]+ requests held back for the writer", replay["note"]), replay["note"]
    measured = [r for r in data["rows"] if r["kind"] == "ratio"]
    assert measured and all(r["figure"] > 0 for r in measured)
    md = (tmp_path / "results.md").read_text()
    assert "| what | compared with |" in md and "Machine" in md
    svg = ET.fromstring((tmp_path / "chart.svg").read_text())
    assert svg.tag.endswith("svg") and len(list(svg.iter("{http://www.w3.org/2000/svg}rect"))) > 2


async def test_replay_sends_each_turn_with_its_tag() -> None:
    """loadgen's replay puts exactly the tagged bodies on the wire, in order."""
    got: list[bytes] = []

    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)content-length: (\d+)", head)
                assert length is not None
                got.append(await r.readexactly(int(length.group(1))))
                w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
                await w.drain()
        w.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    bodies = [b'{"system": "ROUND-0000 x", "n": 1}', b'{"no marker": 2}']
    result = await replay(port, "/v1/chat/completions", bodies, b"ROUND-0000", b"ROUND-0042", 5)
    server.close()
    await server.wait_closed()
    assert result["ok"] == 2 and result["errors"] == 0
    assert got == [b'{"system": "ROUND-0042 x", "n": 1}', b'{"no marker": 2}']


@pytest.mark.parametrize(
    "argv",
    [["resends", "--turns", "90"], ["conversation", "--turns", "40", "--replays", "2"]],
)
def test_writer_replay_stores_every_turn(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The writer replay decodes the frames a shipper makes and stores every turn."""
    assert bench_writer_replay.main([*argv, "--batch", "7"]) == 0
    assert re.search(r": (\d+) of \1 turns stored", capsys.readouterr().out)


def test_store_probe_accounts_for_every_turn() -> None:
    """The live probe records every turn it sends and reports each process's share."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.store_probe", "conversation", "--seconds", "1",
         "--turns", "30"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    sent, recorded = re.search(
        r"([\d,]+) turns answered .*, ([\d,]+) recorded", out.stdout
    ).groups()
    assert sent == recorded and int(sent.replace(",", "")) >= 30
    for line in ("proxy, event loop", "writer, main thread", "writer, other threads"):
        assert re.search(rf"{line} +[\d,]+ \+ [\d,]+ µs", out.stdout), out.stdout
    assert re.search(r"writer I/O +[\d,]+ bytes in [\d.]+ writes", out.stdout)
