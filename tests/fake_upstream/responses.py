"""The fake's ``/v1/responses``: what OpenAI's Responses API refuses, and what it answers.

Strict where a proxy can go wrong: every ``function_call_output`` (and the custom, local
shell and computer ones) needs its call earlier in ``input``; a ``reasoning`` item must
be well-formed, carry an ``encrypted_content`` this fake issued (so a byte edited on the
way is caught), and be followed by the output item it came with; an over-long input is
refused with ``context_length_exceeded``. Answers are a response object or an SSE stream
of typed events, each with its ``sequence_number``, ending in ``response.completed``.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tests.fake_upstream.constants import CREATED, JSON
from tests.fake_upstream.errors import ApiError, openai_error

CountInput = Callable[[Mapping[str, Any]], int]
CALL_OUTPUTS = {
    "function_call_output": "function_call",
    "custom_tool_call_output": "custom_tool_call",
    "local_shell_call_output": "local_shell_call",
    "computer_call_output": "computer_call",
}
ITEM_TYPES = frozenset(
    {"message", "reasoning", "item_reference", "web_search_call", "file_search_call"}
    | set(CALL_OUTPUTS)
    | set(CALL_OUTPUTS.values())
)
OVERFLOW_MESSAGE = (
    "Your input exceeds the context window of this model. Please adjust your input and try again."
)


def strings(value: Any) -> list[str]:
    """Every string in a JSON value (encrypted reasoning left out: no model reads it as
    text, and handoff does not count it)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    if isinstance(value, dict):
        return [s for k, v in value.items() if k != "encrypted_content" for s in strings(v)]
    return []


def strings_tokens(body: Mapping[str, Any]) -> int:
    """A rough count: a token per four characters of every string in ``input`` and
    ``instructions`` (encrypted reasoning left out, as handoff leaves it out)."""
    chars = sum(len(s) for s in strings([body.get("input"), body.get("instructions")]))
    return (chars + 3) // 4


def overflow_error() -> ApiError:
    """OpenAI's answer to an input over the window (the Responses API names no number)."""
    return openai_error(OVERFLOW_MESSAGE, param="input", code="context_length_exceeded")


def validate_responses(body: Any, issued: set[str]) -> JSON:
    """The body, or an ``ApiError`` as OpenAI would raise it."""
    if not isinstance(body, dict):
        raise openai_error("Invalid type for body: expected an object.")
    if not isinstance(body.get("model"), str):
        raise openai_error("Missing required parameter: 'model'.", param="model")
    items = body.get("input")
    if isinstance(items, str):
        return body
    if not isinstance(items, list):
        raise openai_error("Missing required parameter: 'input'.", param="input")
    calls: set[tuple[str, Any]] = set()
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise openai_error(f"Invalid type for 'input[{i}]': expected an object.")
        kind = item.get("type", "message" if "role" in item else None)
        if kind not in ITEM_TYPES:
            raise openai_error(
                f"Invalid value: '{kind}'. Supported values are: "
                + ", ".join(f"'{t}'" for t in sorted(ITEM_TYPES)),
                param=f"input[{i}].type",
            )
        if kind in CALL_OUTPUTS.values():
            calls.add((kind, item.get("call_id")))
        elif kind in CALL_OUTPUTS:
            cid = item.get("call_id", item.get("id"))
            if (CALL_OUTPUTS[kind], cid) not in calls:
                raise openai_error(
                    f"No tool call found for {kind.replace('_', ' ')} with call_id {cid}.",
                    param="input",
                )
        elif kind == "reasoning":
            _check_reasoning(i, item, items, issued)
    return body


def _check_reasoning(i: int, item: JSON, items: list[Any], issued: set[str]) -> None:
    summary = item.get("summary")
    if not isinstance(summary, list) or not all(
        isinstance(s, dict) and s.get("type") == "summary_text" and isinstance(s.get("text"), str)
        for s in summary
    ):
        raise openai_error(
            f"Invalid 'input[{i}].summary': expected an array of summary_text parts.",
            param=f"input[{i}].summary",
        )
    enc = item.get("encrypted_content")
    if enc is not None and enc not in issued:
        raise openai_error(
            f"The encrypted content for item {item.get('id')} could not be verified.",
            param=f"input[{i}].encrypted_content",
        )
    nxt = items[i + 1] if i + 1 < len(items) else None
    follows = isinstance(nxt, dict) and (
        nxt.get("type") in CALL_OUTPUTS.values()
        or (nxt.get("type", "message") == "message" and nxt.get("role") == "assistant")
    )
    if not follows:
        raise openai_error(
            f"Item '{item.get('id')}' of type 'reasoning' was provided without its required "
            "following item.",
            param="input",
        )


class ResponseMaker:
    """Builds answers: a tool call when the newest user text holds the trigger and a
    function tool is offered, else a text that shows what the model was sent."""

    def __init__(self, trigger: str = "tool") -> None:
        self.trigger = trigger
        self.issued: set[str] = set()
        self._ids = itertools.count(1)

    def response(self, body: JSON, input_tokens: int) -> JSON:
        n = next(self._ids)
        items = body["input"] if isinstance(body["input"], list) else [
            {"role": "user", "content": body["input"]}
        ]  # fmt: skip
        include = body.get("include") or []
        output = [self.reasoning(n, "reasoning.encrypted_content" in include)]
        tool = next((t for t in body.get("tools") or () if t.get("type") == "function"), None)
        last = items[-1] if items else {}
        if tool is not None and last.get("role") == "user" and self.trigger in _text(last):
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{n:06d}",
                    "call_id": f"call_{n:06d}",
                    "name": tool["name"],
                    "arguments": json.dumps({"path": f"file_{n}.txt"}),
                    "status": "completed",
                }
            )
        else:
            text = f"Seen {len(items)} items; last: {_text(last)[:120]}"
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{n:06d}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            )
        out_tokens = 8 + sum(len(_text(o)) // 4 for o in output)
        return {
            "id": f"resp_{n:06d}",
            "object": "response",
            "created_at": CREATED,
            "status": "completed",
            "error": None,
            "incomplete_details": None,
            "instructions": body.get("instructions"),
            "model": body["model"],
            "output": output,
            "parallel_tool_calls": body.get("parallel_tool_calls", True),
            "store": body.get("store", True),
            "tool_choice": body.get("tool_choice", "auto"),
            "tools": body.get("tools") or [],
            "truncation": body.get("truncation", "disabled"),
            "usage": {
                "input_tokens": input_tokens,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": out_tokens,
                "output_tokens_details": {"reasoning_tokens": 4},
                "total_tokens": input_tokens + out_tokens,
            },
        }

    def reasoning(self, n: int, encrypted: bool) -> JSON:
        item: JSON = {
            "type": "reasoning",
            "id": f"rs_{n:06d}",
            "summary": [{"type": "summary_text", "text": f"Thinking step {n}."}],
        }
        if encrypted:
            digest = hashlib.sha256(f"reasoning-{n}".encode()).digest()
            item["encrypted_content"] = "gAAA" + base64.b64encode(digest * 4).decode()
            self.issued.add(item["encrypted_content"])
        return item


def _text(item: Any) -> str:
    if not isinstance(item, dict):
        return ""
    content = item.get("content", item.get("arguments", item.get("summary")))
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def response_events(response: JSON, chunks: int = 3) -> Iterator[JSON]:
    """The stream of one response: created, each item added/delta/done, completed."""
    seq = itertools.count()
    start = {**response, "status": "in_progress", "output": [], "usage": None}
    yield {"type": "response.created", "sequence_number": next(seq), "response": start}
    yield {"type": "response.in_progress", "sequence_number": next(seq), "response": start}
    for index, item in enumerate(response["output"]):
        yield from _item_events(index, item, seq, chunks)
    yield {"type": "response.completed", "sequence_number": next(seq), "response": response}


def _item_events(index: int, item: JSON, seq: Iterator[int], chunks: int) -> Iterator[JSON]:
    base = {"output_index": index}
    kind = item["type"]
    empty = dict(item)
    if kind == "message":
        empty["content"], empty["status"] = [], "in_progress"
    elif kind == "function_call":
        empty["arguments"], empty["status"] = "", "in_progress"
    yield {"type": "response.output_item.added", "sequence_number": next(seq), **base,
           "item": empty}  # fmt: skip
    if kind == "message":
        text = item["content"][0]["text"]
        part = {"output_index": index, "item_id": item["id"], "content_index": 0}
        yield {"type": "response.content_part.added", "sequence_number": next(seq), **part,
               "part": {"type": "output_text", "text": "", "annotations": []}}  # fmt: skip
        for piece in _pieces(text, chunks):
            yield {"type": "response.output_text.delta", "sequence_number": next(seq),
                   **part, "delta": piece}  # fmt: skip
        yield {"type": "response.output_text.done", "sequence_number": next(seq), **part,
               "text": text}  # fmt: skip
        yield {"type": "response.content_part.done", "sequence_number": next(seq), **part,
               "part": item["content"][0]}  # fmt: skip
    elif kind == "function_call":
        ids = {"output_index": index, "item_id": item["id"]}
        for piece in _pieces(item["arguments"], chunks):
            yield {"type": "response.function_call_arguments.delta",
                   "sequence_number": next(seq), **ids, "delta": piece}  # fmt: skip
        yield {"type": "response.function_call_arguments.done", "sequence_number": next(seq),
               **ids, "arguments": item["arguments"]}  # fmt: skip
    yield {"type": "response.output_item.done", "sequence_number": next(seq), **base,
           "item": item}  # fmt: skip


def failed_events(response: JSON, error: JSON) -> Iterator[JSON]:
    """A stream that fails: created, then ``response.failed`` carrying ``error``."""
    start = {**response, "status": "in_progress", "output": [], "usage": None}
    yield {"type": "response.created", "sequence_number": 0, "response": start}
    failed = {**start, "status": "failed", "error": error}
    yield {"type": "response.failed", "sequence_number": 1, "response": failed}


def _pieces(text: str, n: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, n)))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def sse_event(event: JSON) -> bytes:
    """One typed SSE event, as OpenAI writes them (``event:`` then ``data:``)."""
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
