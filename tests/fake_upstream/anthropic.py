"""The fake upstream's Anthropic Messages routes: ``/v1/messages`` and its ``count_tokens``.

Strict where a proxy can get Anthropic's shape wrong, as the real API is: ``max_tokens``
required, roles alternating (``role: "system"`` messages aside) and starting with the
user, no empty text, every ``tool_result`` answering a ``tool_use`` of the assistant
message just before it (results first) and every ``tool_use`` answered in the next
message, at most four ``cache_control`` breakpoints, and the fake's own thinking
signatures intact. A prompt over the model's window is answered as Anthropic answers
it ("prompt is too long: N tokens > M maximum"). Replies are text, or a ``tool_use``
when the newest user text holds the fake's tool trigger; streamed as real SSE.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

_ids = itertools.count(1)


class MessagesError(Exception):
    def __init__(self, message: str, status: int = 400, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.status, self.kind = message, status, kind

    def response(self) -> web.Response:
        body = {"type": "error", "error": {"type": self.kind, "message": self.message}}
        return web.json_response(body, status=self.status)


def signature(thinking: str) -> str:
    """The fake's thinking signature: a digest of the thinking text."""
    return "fake-sig-" + hashlib.sha256(thinking.encode()).hexdigest()[:24]


def estimate(body: Mapping[str, Any]) -> int:
    """The fake's prompt size: the JSON of system, messages and tools, four bytes a token."""
    parts = {k: body.get(k) for k in ("system", "messages", "tools")}
    return max(1, len(orjson.dumps(parts)) // 4)


@dataclass
class MessagesFake:
    """Settings and script for the Messages routes (one per :class:`FakeUpstream`)."""

    windows: Mapping[str, int] = field(default_factory=dict)
    default_window: int = 200_000
    count_tokens: bool = True
    """False: ``count_tokens`` answers 404, as a server without it does."""
    tool_trigger: str = "use a tool"
    script: list[list[dict[str, Any]]] = field(default_factory=list)
    """Replies' content blocks to give in order before the default replies."""
    linger: float = 0.0
    """Seconds a stream stays open after ``message_stop``."""

    def window(self, model: str) -> int:
        return self.windows.get(model, self.default_window)


def validate(body: Any) -> None:
    """Refuse what the real API refuses (of what a proxy could break)."""
    if not isinstance(body, dict):
        raise MessagesError("body: Input should be an object")
    if not isinstance(body.get("model"), str):
        raise MessagesError("model: Field required")
    max_tokens = body.get("max_tokens")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise MessagesError("max_tokens: Field required")
    _validate_messages(body.get("messages"))


def validate_counting(body: Any) -> None:
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise MessagesError("model: Field required")
    _validate_messages(body.get("messages"))


def _validate_messages(messages: Any) -> None:
    if not isinstance(messages, list) or not messages:
        raise MessagesError("messages: Field required (at least one message)")
    turns = [
        (i, m) for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") != "system"
    ]
    if len(turns) != sum(
        1 for m in messages if not (isinstance(m, dict) and m.get("role") == "system")
    ):
        raise MessagesError("messages: each message must be an object")
    breakpoints = 0
    previous: dict[str, Any] | None = None
    for n, (i, msg) in enumerate(turns):
        role = msg.get("role")
        if role not in ("user", "assistant"):
            raise MessagesError(f"messages.{i}.role: Input should be 'user' or 'assistant'")
        if n == 0 and role != "user":
            raise MessagesError('messages: first message must use the "user" role')
        if previous is not None and previous.get("role") == role:
            raise MessagesError(
                f'messages: roles must alternate between "user" and "assistant" (messages.{i})'
            )
        blocks = _blocks(i, msg.get("content"))
        breakpoints += sum(1 for b in blocks if "cache_control" in b)
        _check_pairs(i, previous, blocks, role)
        for b in blocks:
            if _signed(b) and b["signature"] != signature(str(b.get("thinking", ""))):
                raise MessagesError(f"messages.{i}: Invalid `signature` in `thinking` block")
        previous = msg
    for (i, msg), (_, nxt) in itertools.pairwise(turns):
        if msg.get("role") == "assistant":
            uses = {
                b.get("id") for b in _blocks(i, msg.get("content")) if b.get("type") == "tool_use"
            }
            answered = {
                b.get("tool_use_id")
                for b in _blocks(i + 1, nxt.get("content"))
                if b.get("type") == "tool_result"
            }
            if uses - answered:
                raise MessagesError(
                    f"messages.{i + 1}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(sorted(map(str, uses - answered)))}. Each "
                    "`tool_use` block must have a corresponding `tool_result` block in the next message."
                )
    if breakpoints > 4:
        raise MessagesError(
            f"A maximum of 4 blocks with cache_control may be provided. Found {breakpoints}."
        )


def _signed(block: Mapping[str, Any]) -> bool:
    """A thinking block the fake signed (others' signatures it cannot check)."""
    return block.get("type") == "thinking" and str(block.get("signature", "")).startswith(
        "fake-sig-"
    )


def _blocks(i: int, content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        if not content:
            raise MessagesError(f"messages.{i}: text content blocks must be non-empty")
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise MessagesError(f"messages.{i}.content: Input should be a string or a list")
    for j, b in enumerate(content):
        if not isinstance(b, dict) or not isinstance(b.get("type"), str):
            raise MessagesError(f"messages.{i}.content.{j}: Input should be a block")
        if b["type"] == "text" and not b.get("text"):
            raise MessagesError(f"messages.{i}.content.{j}: text content blocks must be non-empty")
    return content


def _check_pairs(
    i: int, previous: Mapping[str, Any] | None, blocks: Sequence[dict[str, Any]], role: str
) -> None:
    results = [b for b in blocks if b.get("type") == "tool_result"]
    if not results:
        return
    if role != "user":
        raise MessagesError(f"messages.{i}: tool_result blocks belong in user messages")
    first_other = next(
        (k for k, b in enumerate(blocks) if b.get("type") != "tool_result"), len(blocks)
    )
    if any(b.get("type") == "tool_result" for b in blocks[first_other:]):
        raise MessagesError(f"messages.{i}: tool_result blocks must come first in the content")
    uses: set[Any] = set()
    if previous is not None and isinstance(previous.get("content"), list):
        uses = {
            b.get("id")
            for b in previous["content"]
            if isinstance(b, dict) and b.get("type") == "tool_use"
        }
    for b in results:
        if b.get("tool_use_id") not in uses:
            raise MessagesError(
                f"messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{b.get('tool_use_id')}. Each `tool_result` block must have a corresponding "
                "`tool_use` block in the previous message."
            )


def reply_blocks(fake: MessagesFake, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    if fake.script:
        return fake.script.pop(0)
    blocks: list[dict[str, Any]] = []
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
        text = "Let me think about this."
        blocks.append({"type": "thinking", "thinking": text, "signature": signature(text)})
    last = body["messages"][-1]
    texts = (
        [last["content"]]
        if isinstance(last.get("content"), str)
        else [b.get("text", "") for b in last.get("content", []) if b.get("type") == "text"]
    )
    if last.get("role") == "user" and any(fake.tool_trigger in t for t in texts):
        blocks.append({"type": "tool_use", "id": f"toolu_{next(_ids):06d}", "name": "read_file",
                       "input": {"path": "big.txt"}})  # fmt: skip
    else:
        blocks.append({"type": "text", "text": "ok"})
    return blocks


def message(model: str, blocks: list[dict[str, Any]], prompt: int) -> dict[str, Any]:
    stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
    return {
        "id": f"msg_{next(_ids):08d}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": prompt,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 5,
        },
    }


def events(msg: Mapping[str, Any]) -> list[bytes]:
    """The message as Anthropic's SSE events, each a whole ``event:``/``data:`` frame."""
    start = {
        **msg,
        "content": [],
        "stop_reason": None,
        "usage": {**msg["usage"], "output_tokens": 1},
    }
    out = [_sse("message_start", {"type": "message_start", "message": start})]
    for i, b in enumerate(msg["content"]):
        if b["type"] == "text":
            first, deltas = (
                {"type": "text", "text": ""},
                [
                    {"type": "text_delta", "text": b["text"][:1]},
                    {"type": "text_delta", "text": b["text"][1:]},
                ],
            )
        elif b["type"] == "tool_use":
            raw = orjson.dumps(b["input"]).decode()
            first = {**b, "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": raw[:5]},
                      {"type": "input_json_delta", "partial_json": raw[5:]}]  # fmt: skip
        else:
            first = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": b["thinking"]},
                      {"type": "signature_delta", "signature": b["signature"]}]  # fmt: skip
        out.append(_sse("content_block_start", {"type": "content_block_start", "index": i,
                                                "content_block": first}))  # fmt: skip
        out.append(_sse("ping", {"type": "ping"}))
        for d in deltas:
            out.append(
                _sse("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d})
            )
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": i}))
    delta = {"stop_reason": msg["stop_reason"], "stop_sequence": None}
    out.append(_sse("message_delta", {"type": "message_delta", "delta": delta,
                                      "usage": {"output_tokens": msg["usage"]["output_tokens"]}}))  # fmt: skip
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return out


def _sse(name: str, data: Any) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


async def answer_messages(
    fake: MessagesFake, body: Any, request: web.Request
) -> web.StreamResponse:
    try:
        validate(body)
    except MessagesError as e:
        return e.response()
    prompt, window = estimate(body), fake.window(body["model"])
    if prompt > window:
        return MessagesError(f"prompt is too long: {prompt} tokens > {window} maximum").response()
    msg = message(body["model"], reply_blocks(fake, body), prompt)
    if not body.get("stream"):
        return web.json_response(msg)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for frame in events(msg):
        await resp.write(frame)
    if fake.linger:
        await asyncio.sleep(fake.linger)
    await resp.write_eof()
    return resp


async def answer_count(fake: MessagesFake, body: Any) -> web.Response:
    if not fake.count_tokens:
        return MessagesError("Not Found", 404, "not_found_error").response()
    try:
        validate_counting(body)
    except MessagesError as e:
        return e.response()
    return web.json_response({"input_tokens": estimate(body)})
