"""Read a Responses answer: a streamed one from its SSE bytes as a tee, or a whole body.

A Responses stream is typed events (``response.created``, ``response.output_item.added``,
``response.output_text.delta``, ``response.function_call_arguments.delta``,
``response.output_item.done``…, then ``response.completed``, ``response.incomplete`` or
``response.failed``; an ``error`` event for a failure outside a response). The tee
keeps the output items as they complete, the deltas of the ones that have not, and the
usage and status of the final response, and gives the reply as one assistant message
(see :func:`proxy.ingress.responses_api.assistant_message`), with ``usage`` as the
upstream sent it plus chat's ``prompt_tokens``/``completion_tokens``, which calibration
reads. Malformed events are skipped: the tee must never disturb the stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from proxy.ingress.responses_api import assistant_message
from proxy.upstream.overflow import context_limit as _chat_context_limit
from proxy.upstream.sse import event_data
from proxy.upstream.sse import read_answer as chat_read_answer

FINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
_FRAMING = ("type", "sequence_number")


class ResponsesAssembler:
    """A tee over a Responses event stream."""

    def __init__(self) -> None:
        self._buf = b""
        self.items: dict[int, dict[str, Any]] = {}
        self.texts: dict[int, list[str]] = {}
        self.arguments: dict[int, list[str]] = {}
        self.final: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.events = 0

    @property
    def complete(self) -> bool:
        """Whether the final event (``response.completed`` or another) has arrived."""
        return self.final is not None

    @property
    def finish_reason(self) -> str | None:
        return finish_reason(self.final) if self.final is not None else None

    def feed(self, data: bytes) -> None:
        events, self._buf = event_data(self._buf + data)
        for event in events:
            try:
                parsed = orjson.loads(event)
            except orjson.JSONDecodeError:
                continue
            if isinstance(parsed, dict) and isinstance(parsed.get("type"), str):
                self.events += 1
                self._typed(parsed["type"], parsed)

    def _typed(self, kind: str, data: dict[str, Any]) -> None:
        index = data.get("output_index")
        index = index if isinstance(index, int) else len(self.items)
        if kind in ("response.output_item.added", "response.output_item.done"):
            if isinstance(data.get("item"), dict):
                self.items[index] = data["item"]
        elif kind == "response.output_text.delta" and isinstance(data.get("delta"), str):
            self.texts.setdefault(index, []).append(data["delta"])
        elif kind.endswith("_call_arguments.delta") and isinstance(data.get("delta"), str):
            self.arguments.setdefault(index, []).append(data["delta"])
        elif kind in FINAL_EVENTS and isinstance(data.get("response"), dict):
            self.final = data["response"]
            self.usage = chat_usage(self.final.get("usage"))
            if kind == "response.failed":
                self.error = {"error": self.final.get("error") or {"message": "response.failed"}}
        elif kind == "error":
            self.error = {"error": {k: v for k, v in data.items() if k not in _FRAMING}}

    def choices(self) -> list[dict[str, Any]] | None:
        """None: this format answers with one reply (no ``n``)."""
        return None

    def reply(self) -> dict[str, Any] | None:
        """The assistant message, or None when the stream carried no output."""
        output = self.final.get("output") if self.final is not None else None
        if isinstance(output, list) and output:
            return assistant_message([i for i in output if isinstance(i, dict)])
        items = [self._item(i) for i in sorted(self.items)]
        if not items:
            return None
        return assistant_message(items)

    def _item(self, index: int) -> dict[str, Any]:
        """An output item as far as it came: its deltas fill what its ``done`` did not."""
        item = dict(self.items[index])
        if item.get("type") == "message" and not item.get("content") and index in self.texts:
            item["content"] = [{"type": "output_text", "text": "".join(self.texts[index])}]
        if index in self.arguments and not item.get("arguments"):
            item["arguments"] = "".join(self.arguments[index])
        return item


def finish_reason(response: Mapping[str, Any]) -> str:
    """A response's status in chat's words: ``tool_calls``, ``stop``, ``length``…"""
    status = response.get("status")
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if isinstance(details, dict) else None
        return "length" if reason in (None, "max_output_tokens") else str(reason)
    if status == "failed":
        return "error"
    output = response.get("output")
    if isinstance(output, list) and any(
        isinstance(i, dict) and str(i.get("type", "")).endswith("_call") for i in output
    ):
        return "tool_calls"
    return "stop"


def chat_usage(usage: Any) -> dict[str, Any] | None:
    """The upstream's usage, with chat's names added for what calibration reads."""
    if not isinstance(usage, dict):
        return None
    out = dict(usage)
    if isinstance(usage.get("input_tokens"), int):
        out.setdefault("prompt_tokens", usage["input_tokens"])
    if isinstance(usage.get("output_tokens"), int):
        out.setdefault("completion_tokens", usage["output_tokens"])
    return out


def read_answer(
    status: int, body: bytes
) -> tuple[dict[str, Any] | None, str | None, dict[str, Any] | None, dict[str, Any] | None]:
    """(assistant message, finish reason, usage, error) from a whole Responses answer (an
    error answer is read as chat's is)."""
    if status >= 400:
        return chat_read_answer(status, body)
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None, None, None
    if not isinstance(parsed, dict):
        return None, None, None, None
    output = parsed.get("output")
    reply = None
    if isinstance(output, list) and output:
        reply = assistant_message([i for i in output if isinstance(i, dict)])
    error = {"error": parsed["error"]} if isinstance(parsed.get("error"), dict) else None
    return reply, finish_reason(parsed), chat_usage(parsed.get("usage")), error


def context_limit(status: int, body: bytes) -> int | None:
    """An overflow answer on this route: OpenAI's ``context_length_exceeded`` error body
    (the same recogniser as chat's, which also knows other servers' wording)."""
    return _chat_context_limit(status, body)
