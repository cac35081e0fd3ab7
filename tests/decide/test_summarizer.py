"""The summarizer client against a small aiohttp server on loopback."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.decide.summarizer import SYSTEM_PROMPT, Summarizer, SummarizerError, render_transcript

CONV: list[dict[str, Any]] = [
    {"role": "user", "content": "Fix the parser in src/app.py"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "x" * 50_000},
    {"role": "assistant", "content": [{"type": "text", "text": "Fixed."}]},
]


async def _server(aiohttp_server: Any, handler: Any) -> TestServer:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    server: TestServer = await aiohttp_server(app)
    return server


async def _call(server: TestServer, previous: str | None = None, timeout: float = 5) -> str:
    async with aiohttp.ClientSession() as session:
        s = Summarizer(
            session,
            str(server.make_url("/v1")),
            {"authorization": "Bearer k"},
            "cheap",
            timeout,
            99,
        )
        return await s(CONV, previous)


async def test_posts_prompt_and_returns_summary(aiohttp_server: Any) -> None:
    """It posts model, max_tokens, the six-section prompt and the transcript; returns content."""
    seen: list[dict[str, Any]] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append({"auth": request.headers.get("authorization"), **await request.json()})
        return web.json_response({"choices": [{"message": {"content": " ## Goal\nfix "}}]})

    server = await _server(aiohttp_server, handler)
    assert await _call(server, previous="old summary") == "## Goal\nfix"
    body = seen[0]
    assert body["auth"] == "Bearer k" and body["model"] == "cheap" and body["max_tokens"] == 99
    assert body["messages"][0] == {"role": "system", "content": SYSTEM_PROMPT}
    user = body["messages"][1]["content"]
    assert "src/app.py" in user and "read c1" in user
    assert "old summary" not in user, "one piece is a leaf: independent of the summary before"
    assert len(user) < 10_000, "huge tool output not clipped in the transcript"


@pytest.mark.parametrize(
    "response",
    [
        web.json_response({"error": "boom"}, status=500),
        web.Response(body=b"not json"),
        web.json_response({"choices": []}),
        web.json_response({"choices": [{"message": {"content": "  "}}]}),
    ],
)
async def test_bad_answers_raise(aiohttp_server: Any, response: web.Response) -> None:
    """A non-200, malformed or empty answer raises SummarizerError."""

    async def handler(request: web.Request) -> web.Response:
        return response

    server = await _server(aiohttp_server, handler)
    with pytest.raises(SummarizerError):
        await _call(server)


async def test_timeout_raises(aiohttp_server: Any) -> None:
    """A summarizer slower than its timeout raises SummarizerError."""
    release = asyncio.Event()

    async def handler(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({})

    server = await _server(aiohttp_server, handler)
    try:
        with pytest.raises(SummarizerError, match="timed out"):
            await _call(server, timeout=0.05)
    finally:
        release.set()


def test_transcript_is_compact() -> None:
    """Tool calls are one line, parts become text, huge outputs are clipped in the middle."""
    text = render_transcript(CONV, max_tool_chars=100)
    assert "[assistant calls read c1] {}" in text
    assert "[tool result c1]" in text and "characters omitted" in text
    assert "[assistant]\nFixed." in text
    assert orjson.dumps(CONV)  # input untouched and serialisable


def test_pieces_fit_the_summarizer_window() -> None:
    """A dropped part larger than one call is split at message boundaries into pieces
    that each fit; a single message over a call is cut in its middle."""

    def count(text: str) -> int:
        return len(text) // 4 + 1

    s = Summarizer(None, "http://x/v1", {}, "m", 1.0, 256, input_tokens=2048, count=count)  # type: ignore[arg-type]
    messages = [{"role": "user", "content": "word " * 600} for _ in range(10)]
    messages.append({"role": "tool", "tool_call_id": "c", "content": "x" * 40_000})
    pieces = s.pieces(messages)
    assert len(pieces) > 2
    room = 2048 - count(SYSTEM_PROMPT) - 64
    assert all(count(p) <= room + 50 for p in pieces)
    assert sum(p.count("[user]") for p in pieces) == 10


async def test_piece_summaries_too_large_for_one_reduce_are_merged_as_a_tree(
    aiohttp_server: Any,
) -> None:
    """Leaf answers that together overflow one call are reduced in groups, then the
    groups' summaries again: every request fits ``input_tokens``, and leaves carry no
    earlier summary."""
    seen: list[str] = []

    def count(text: str) -> int:
        return len(text) // 4 + 1

    async def handler(request: web.Request) -> web.Response:
        user = (await request.json())["messages"][1]["content"]
        seen.append(user)
        kind = "merged" if user.startswith("For context") or "Merge these" in user else "leaf"
        return web.json_response({"choices": [{"message": {"content": f"{kind} " + "y" * 1200}}]})

    server = await _server(aiohttp_server, handler)
    messages = [{"role": "user", "content": f"step {i} " + "word " * 500} for i in range(24)]
    async with aiohttp.ClientSession() as session:
        s = Summarizer(session, str(server.make_url("/v1")), {}, "m", 5.0, 256,
                       input_tokens=2048, count=count)  # fmt: skip
        text = await s(messages, "the summary before")
    assert text.startswith("merged")
    assert all(count(SYSTEM_PROMPT) + count(u) <= 2048 for u in seen)
    leaves = [u for u in seen if u.startswith("Summarize this conversation:")]
    reduces = [u for u in seen if "Merge these" in u]
    assert len(leaves) >= 4 and not any("summary before" in u for u in leaves)
    assert any("leaf y" in u for u in reduces) and any("merged y" in u for u in reduces)
    assert sum("summary before" in u for u in reduces) == 1  # context for the root only
