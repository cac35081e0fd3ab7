"""Anthropic Messages answers: a streamed one reassembled as a tee, a whole one read,
and Anthropic's overflow error recognised.

The stream (``message_start`` … ``message_stop``) is relayed byte for byte; the tee
rebuilds the message's content blocks (text, ``tool_use`` from its ``input_json_delta``
pieces, ``thinking`` with its signature) and merges the usage of ``message_start`` and
``message_delta``. The reply is given as a chat assistant message (what the store and
readers show for every format) that also carries the Anthropic ``blocks`` as they came.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import orjson

from proxy.upstream.sse import event_end

Answer = tuple[dict[str, Any] | None, str | None, dict[str, Any] | None, dict[str, Any] | None]

_OVERFLOW = (
    re.compile(r"prompt is too long:\s*[\d,]+\s*tokens\s*>\s*([\d,]+)\s*maximum", re.I),
    re.compile(r"exceed context limit:\s*[\d,]+\s*\+\s*[\d,]+\s*>\s*([\d,]+)", re.I),
)


class MessageAssembler:
    """Feeds on a Messages SSE stream; never raises on what it cannot read."""

    def __init__(self) -> None:
        self._buf = b""
        self.blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.error: dict[str, Any] | None = None
        self.stopped = False

    @property
    def complete(self) -> bool:
        """Whether ``message_stop`` has arrived: a client leaving after it had its turn."""
        return self.stopped

    def feed(self, data: bytes) -> None:
        self._buf += data
        while True:
            cut = event_end(self._buf)
            if cut is None:
                return
            event, self._buf = self._buf[: cut[0]], self._buf[cut[1] :]
            lines = [ln[5:].lstrip(b" ") for ln in event.splitlines() if ln.startswith(b"data:")]
            if not lines:
                continue
            try:
                parsed = orjson.loads(b"\n".join(lines))
            except orjson.JSONDecodeError:
                continue
            if isinstance(parsed, dict):
                self._event(parsed)

    def _event(self, ev: dict[str, Any]) -> None:
        kind = ev.get("type")
        if kind == "message_start" and isinstance(ev.get("message"), dict):
            self._usage(ev["message"].get("usage"))
        elif kind == "content_block_start" and isinstance(ev.get("content_block"), dict):
            self.blocks[_index(ev)] = dict(ev["content_block"])
        elif kind == "content_block_delta" and isinstance(ev.get("delta"), dict):
            self._delta(_index(ev), ev["delta"])
        elif kind == "content_block_stop":
            self._close(_index(ev))
        elif kind == "message_delta":
            delta = ev.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason"):
                self.finish_reason = str(delta["stop_reason"])
            self._usage(ev.get("usage"))
        elif kind == "message_stop":
            self.stopped = True
        elif kind == "error":
            self.error = ev

    def _usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            self.usage = {**(self.usage or {}), **{k: v for k, v in usage.items() if v is not None}}

    def _delta(self, i: int, delta: Mapping[str, Any]) -> None:
        block = self.blocks.setdefault(i, {"type": "text", "text": ""})
        kind = delta.get("type")
        for name, key in (
            ("text_delta", "text"),
            ("thinking_delta", "thinking"),
            ("signature_delta", "signature"),
            ("citations_delta", None),
        ):
            if kind == name and key is not None and isinstance(delta.get(key), str):
                block[key] = str(block.get(key) or "") + delta[key]
        if kind == "input_json_delta" and isinstance(delta.get("partial_json"), str):
            self._json.setdefault(i, []).append(delta["partial_json"])

    def _close(self, i: int) -> None:
        pieces = self._json.pop(i, None)
        block = self.blocks.get(i)
        if pieces is None or block is None:
            return
        text = "".join(pieces)
        try:
            block["input"] = orjson.loads(text) if text else {}
        except orjson.JSONDecodeError:
            block["input"] = {"handoff_unparsed": text}

    def choices(self) -> list[dict[str, Any]] | None:
        """None: this format answers with one reply (no ``n``)."""
        return None

    def reply(self) -> dict[str, Any] | None:
        for i in list(self._json):
            self._close(i)  # a stream cut off inside a tool_use block
        if not self.blocks:
            return None if self.finish_reason is None else chat_reply([])
        return chat_reply([self.blocks[i] for i in sorted(self.blocks)])


def _index(ev: Mapping[str, Any]) -> int:
    i = ev.get("index")
    return i if isinstance(i, int) else 0


def chat_reply(blocks: list[Any]) -> dict[str, Any]:
    """An Anthropic message's content as a chat assistant message, ``blocks`` kept."""
    text = [b.get("text") or "" for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    thinking = [
        b.get("thinking") or ""
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "thinking"
    ]
    calls = [
        {
            "id": b.get("id"),
            "type": "function",
            "function": {"name": b.get("name"), "arguments": orjson.dumps(b.get("input")).decode()},
        }
        for b in blocks
        if isinstance(b, dict) and b.get("type") == "tool_use"
    ]
    msg: dict[str, Any] = {"role": "assistant", "content": "".join(text) or None}
    if thinking:
        msg["reasoning_content"] = "".join(thinking)
    if calls:
        msg["tool_calls"] = calls
    msg["blocks"] = blocks
    return msg


def read_message(status: int, body: bytes) -> Answer:
    """(reply, stop_reason, usage, error) from a non-streamed Messages answer."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        if status >= 400:
            text = body[:500].decode("utf-8", "replace")
            return None, None, None, {"type": "error", "error": {"message": text}}
        return None, None, None, None
    if not isinstance(parsed, dict):
        return None, None, None, {"error": parsed} if status >= 400 else None
    if status >= 400:
        return None, None, None, parsed
    usage = parsed.get("usage") if isinstance(parsed.get("usage"), dict) else None
    content = parsed.get("content")
    reply = chat_reply(content) if isinstance(content, list) else None
    reason = parsed.get("stop_reason")
    return reply, reason if isinstance(reason, str) else None, usage, None


def overflow_limit(status: int, body: bytes) -> int | None:
    """The window Anthropic's "prompt is too long: N tokens > M maximum" names (M), 0
    for an overflow without one, None when the answer is not an overflow."""
    if status not in (400, 413) or not body:
        return None
    text = body[:4096].decode("utf-8", "replace")
    for pattern in _OVERFLOW:
        m = pattern.search(text)
        if m:
            return int(m.group(1).replace(",", ""))
    return 0 if "prompt is too long" in text.lower() else None


def prompt_tokens(usage: Mapping[str, Any]) -> int | None:
    """The prompt's full size in a Messages usage: input plus cache read and creation."""
    total = usage.get("input_tokens")
    if not isinstance(total, int):
        return None
    for key in ("cache_read_input_tokens", "cache_creation_input_tokens"):
        more = usage.get(key)
        if isinstance(more, int):
            total += more
    return total
