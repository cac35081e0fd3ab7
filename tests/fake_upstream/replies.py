"""The fake's token estimate and its answers: completions, tool calls and their SSE events."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tests.fake_upstream.constants import CREATED, FINGERPRINT, JSON


def content_text(content: Any) -> str:
    """The text of a message's content, whether a string or an array of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def estimate_tokens(body: Mapping[str, Any]) -> int:
    """A deterministic prompt-token estimate: OpenAI's per-message overhead plus bytes/4."""
    total = 3
    for message in body.get("messages", ()):
        text = content_text(message.get("content")) + json.dumps(message.get("tool_calls") or "")
        total += 4 + len(text.encode()) // 4
    if body.get("tools"):
        total += len(json.dumps(body["tools"]).encode()) // 4
    return total


def completion_tokens(text: str) -> int:
    """Tokens of generated text, by the same bytes/4 rule."""
    return max(1, len(text.encode()) // 4)


def requested_completion(body: Mapping[str, Any]) -> int:
    """The completion budget the request reserves (``max_completion_tokens`` first)."""
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    return value if isinstance(value, int) and value > 0 else 0


def _last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    users = [content_text(m.get("content")) for m in messages if m.get("role") == "user"]
    return users[-1] if users else ""


def _tool_to_call(body: Mapping[str, Any], trigger: str) -> JSON | None:
    tools = [t for t in body.get("tools") or () if isinstance(t, dict) and "function" in t]
    choice = body.get("tool_choice", "auto")
    if not tools or choice == "none":
        return None
    if isinstance(choice, dict):
        wanted = choice.get("function", {}).get("name")
        return next((t["function"] for t in tools if t["function"].get("name") == wanted), None)
    last = body["messages"][-1]
    said = re.search(rf"\b{re.escape(trigger)}\b", content_text(last.get("content")), re.I)
    return (
        tools[0]["function"] if choice == "required" or (last["role"] == "user" and said) else None
    )


def _arguments(function: Mapping[str, Any], text: str) -> str:
    props = function.get("parameters", {}).get("properties", {})
    samples = {"string": text[:40], "integer": 1, "number": 1.5, "boolean": True}
    return json.dumps({k: samples.get(v.get("type")) for k, v in props.items()})


def build_completion(body: Mapping[str, Any], prompt_tokens: int, trigger: str = "tool") -> JSON:
    """A deterministic ``chat.completion`` for a valid request: an echo, or a tool call."""
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    text = "Echo: " + _last_user_text(body["messages"])[:200]
    function, finish = _tool_to_call(body, trigger), "stop"
    message: JSON = {"role": "assistant", "content": text, "refusal": None, "annotations": []}
    if function is not None:
        call = {"name": function["name"], "arguments": _arguments(function, text)}
        message |= {
            "content": None,
            "tool_calls": [{"id": f"call_{digest[:24]}", "type": "function", "function": call}],
        }
        text, finish = call["arguments"], "tool_calls"
    elif (limit := requested_completion(body)) and completion_tokens(text) > limit:
        message["content"] = text = text.encode()[: limit * 4].decode(errors="ignore")
        finish = "length"
    n = body.get("n")
    n = n if isinstance(n, int) and n > 0 else 1
    choice = {"message": message, "logprobs": None, "finish_reason": finish}
    used = completion_tokens(text) * n
    return {
        "id": f"chatcmpl-{digest[:29]}",
        "object": "chat.completion",
        "created": CREATED,
        "model": body["model"],
        "choices": [{"index": i, **_nth(choice, i)} for i in range(n)],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": used,
            "total_tokens": prompt_tokens + used,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }


def _nth(choice: JSON, i: int) -> JSON:
    """Choice ``i`` of ``n``: the later ones' text says which they are, so tests can tell."""
    message = choice["message"]
    if i == 0 or choice["finish_reason"] != "stop" or not isinstance(message.get("content"), str):
        return choice
    return {**choice, "message": {**message, "content": f"{message['content']} (take {i + 1})"}}


def _pieces(text: str, count: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, count)))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _choice_deltas(message: Mapping[str, Any], count: int) -> list[JSON]:
    if "tool_calls" not in message:
        first: JSON = {"role": "assistant", "content": "", "refusal": None}
        return [first, *({"content": p} for p in _pieces(message["content"], count))]
    deltas: list[JSON] = [{"role": "assistant", "content": None, "refusal": None}]
    for index, call in enumerate(message["tool_calls"]):
        head = {"index": index, "id": call["id"], "type": "function"}
        deltas.append(
            {
                "tool_calls": [
                    head | {"function": {"name": call["function"]["name"], "arguments": ""}}
                ]
            }
        )
        for piece in _pieces(call["function"]["arguments"], count):
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    return deltas


def stream_events(completion: Mapping[str, Any], chunks: int, include_usage: bool) -> list[JSON]:
    """The ``chat.completion.chunk`` events OpenAI would stream for ``completion``."""
    head = {
        k: completion[k] for k in ("id", "created", "model", "service_tier", "system_fingerprint")
    }
    head["object"] = "chat.completion.chunk"
    extra = {"usage": None} if include_usage else {}
    events: list[JSON] = []
    for choice in completion["choices"]:
        tail: JSON = {"delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}
        bodies = [
            {"delta": d, "logprobs": None, "finish_reason": None}
            for d in _choice_deltas(choice["message"], chunks)
        ]
        for body in [*bodies, tail]:
            events.append(head | {"choices": [{"index": choice["index"], **body}]} | extra)
    if include_usage:
        events.append(head | {"choices": [], "usage": completion["usage"]})
    return events


def sse(event: Mapping[str, Any] | str) -> bytes:
    """One SSE frame: ``data: <json>\\n\\n`` (or ``[DONE]``)."""
    data = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def authorization_fingerprint(value: str | None) -> str:
    """What ``x-fake-saw-authorization`` says for an ``Authorization`` value (never the key)."""
    return hashlib.sha256(value.encode()).hexdigest()[:16] if value is not None else "none"
