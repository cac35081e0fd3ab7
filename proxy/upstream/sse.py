"""Reassemble a streamed chat completion from its SSE bytes, as a tee.

The proxy forwards every byte as it arrives and also feeds it here; at the end
:meth:`ReplyAssembler.reply` gives the assistant message (content, tool calls,
refusal, reasoning) and ``usage``, exactly as a non-streamed reply would carry them.
Malformed events are skipped: the tee must never disturb the stream.
"""

from __future__ import annotations

from typing import Any

import orjson


class ReplyAssembler:
    def __init__(self) -> None:
        self._buf = b""
        self.role = "assistant"
        self.content: list[str] = []
        self.refusal: list[str] = []
        self.reasoning: list[str] = []
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.model: str | None = None
        self.done = False
        self.events = 0
        self.others: dict[int, ReplyAssembler] = {}  # choices past the first (``n`` > 1)

    @property
    def complete(self) -> bool:
        """Whether the stream's end (``[DONE]``) has arrived."""
        return self.done

    def feed(self, data: bytes) -> None:
        events, self._buf = event_data(self._buf + data)
        for event in events:
            self._event(event)

    def _event(self, data: bytes) -> None:
        if data.strip() == b"[DONE]":
            self.done = True
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if isinstance(chunk, dict):
            self.events += 1
            self._chunk(chunk)

    def _chunk(self, chunk: dict[str, Any]) -> None:
        if isinstance(chunk.get("error"), dict):
            self.error = chunk
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            index = choice.get("index", 0)
            if index == 0:
                self._choice(choice)
            elif isinstance(index, int):
                self.others.setdefault(index, ReplyAssembler())._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]
        delta = choice.get("delta")
        if isinstance(delta, dict):
            self._delta(delta)

    def _delta(self, delta: dict[str, Any]) -> None:
        if isinstance(delta.get("role"), str):
            self.role = delta["role"]
        for key, acc in (
            ("content", self.content),
            ("refusal", self.refusal),
            ("reasoning_content", self.reasoning),
        ):
            if isinstance(delta.get(key), str):
                acc.append(delta[key])
        for tc in delta.get("tool_calls") or ():
            if isinstance(tc, dict):
                self._tool_call(tc)

    def _tool_call(self, tc: dict[str, Any]) -> None:
        index = tc.get("index", len(self.tool_calls))
        call = self.tool_calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if tc.get("id"):
            call["id"] = tc["id"]
        if tc.get("type"):
            call["type"] = tc["type"]
        fn = tc.get("function")
        if isinstance(fn, dict):
            if isinstance(fn.get("name"), str):
                call["function"]["name"] += fn["name"]
            if isinstance(fn.get("arguments"), str):
                call["function"]["arguments"] += fn["arguments"]

    def reply(self) -> dict[str, Any] | None:
        """The assistant message, or None if the stream carried no choice at all."""
        if not (self.content or self.tool_calls or self.refusal or self.reasoning):
            return None if self.finish_reason is None else {"role": self.role, "content": ""}
        msg: dict[str, Any] = {"role": self.role, "content": "".join(self.content) or None}
        if self.refusal:
            msg["refusal"] = "".join(self.refusal)
        if self.reasoning:
            msg["reasoning_content"] = "".join(self.reasoning)
        if self.tool_calls:
            msg["tool_calls"] = [self.tool_calls[i] for i in sorted(self.tool_calls)]
        return msg

    def choices(self) -> list[dict[str, Any]] | None:
        """Every choice (index, message, finish_reason) when there were several, else None."""
        if not self.others:
            return None
        subs = {0: self, **self.others}
        return [
            {"index": i, "message": subs[i].reply(), "finish_reason": subs[i].finish_reason}
            for i in sorted(subs)
        ]


def choices_of(body: bytes) -> list[dict[str, Any]] | None:
    """A non-streamed completion's choices when it has several, else None."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    choices = parsed.get("choices") if isinstance(parsed, dict) else None
    if not isinstance(choices, list) or len(choices) < 2:
        return None
    return [c for c in choices if isinstance(c, dict)]


def event_data(buf: bytes) -> tuple[list[bytes], bytes]:
    """The data of each complete event in ``buf`` (its ``data:`` lines joined; events
    without any left out), and what follows the last complete one."""
    out: list[bytes] = []
    while (cut := event_end(buf)) is not None:
        event, buf = buf[: cut[0]], buf[cut[1] :]
        lines = [ln[5:].lstrip(b" ") for ln in event.splitlines() if ln.startswith(b"data:")]
        if lines:
            out.append(b"\n".join(lines))
    return out, buf


def event_end(buf: bytes) -> tuple[int, int] | None:
    """Where the first complete event ends: (end of event, start of the next)."""
    best: tuple[int, int] | None = None
    for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        i = buf.find(sep)
        if i != -1 and (best is None or i < best[0]):
            best = (i, i + len(sep))
    return best


def read_answer(
    status: int, body: bytes
) -> tuple[dict[str, Any] | None, str | None, dict[str, Any] | None, dict[str, Any] | None]:
    """(assistant message, finish_reason, usage, error) from a non-streamed answer's bytes:
    the error is the body of an answer with status 400 or more (or its first 500
    bytes as a message, when it is not JSON)."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        if status >= 400:
            return None, None, None, {"error": {"message": body[:500].decode("utf-8", "replace")}}
        return None, None, None, None
    if status >= 400:
        return None, None, None, parsed if isinstance(parsed, dict) else {"error": parsed}
    return (*reply_from_completion(parsed), None)


def reply_from_completion(
    body: Any,
) -> tuple[dict[str, Any] | None, str | None, dict[str, Any] | None]:
    """(assistant message, finish_reason, usage) from a non-streamed completion body."""
    if not isinstance(body, dict):
        return None, None, None
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else None
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None, None, usage
    msg = choices[0].get("message")
    return (msg if isinstance(msg, dict) else None), choices[0].get("finish_reason"), usage
