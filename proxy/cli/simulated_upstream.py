"""A simulated OpenAI-compatible upstream, for ``handoff demo`` (offline, on loopback).

It behaves like a real server where handoff's work shows: each model has a context
window that is enforced with an exact o200k count, and an over-long prompt gets
OpenAI's own ``context_length_exceeded`` error. Replies are deterministic and say what
the model was really sent (how many messages and tokens), so compression is visible.
Chat completions (plain and streamed, with ``stream_options.include_usage``) and
``GET /v1/models`` (with ``context_window``) are served; nothing else.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from proxy.decide.tokens import TokenCounter
from proxy.decide.tokens.counter import ModelCounter

JSON = dict[str, Any]
MODELS: Mapping[str, int] = {"sim-large-1m": 1_000_000, "sim-small-8k": 8192}
CREATED = 1_700_000_000


def error(message: str, param: str | None = None, code: str | None = None) -> JSON:
    return {"error": {"message": message, "type": "invalid_request_error", "param": param,
                      "code": code}}  # fmt: skip


def context_error(window: int, prompt: int, completion: int) -> JSON:
    """OpenAI's wording, which handoff's safety net parses for the true limit."""
    return error(
        f"This model's maximum context length is {window} tokens. However, you requested "
        f"{prompt + completion} tokens ({prompt} in the messages, {completion} in the "
        "completion). Please reduce the length of the messages or completion.",
        param="messages",
        code="context_length_exceeded",
    )


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def reply_text(model: str, window: int, messages: list[Any], prompt_tokens: int) -> str:
    """What the model says: what it saw, and the newest user message it answers."""
    users = [_text(m.get("content")) for m in messages if isinstance(m, dict)
             and m.get("role") == "user"]  # fmt: skip
    asked = " ".join(users[-1].split()) if users else ""
    asked = asked if len(asked) <= 70 else asked[:67] + "..."
    return (
        f"[{model}] I was sent {len(messages)} messages, {prompt_tokens:,} tokens of my "
        f'{window:,}-token window. You said: "{asked}"'
    )


def completion(model: str, text: str, prompt_tokens: int) -> JSON:
    used = max(1, len(text) // 4)
    return {
        "id": f"chatcmpl-sim{prompt_tokens:012d}",
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": used,
            "total_tokens": prompt_tokens + used,
        },
    }


def stream_frames(reply: JSON, include_usage: bool) -> list[bytes]:
    """The reply as SSE frames: role, one frame per word, finish, usage, ``[DONE]``."""
    text = reply["choices"][0]["message"]["content"]
    words = [w + " " for w in text.split(" ")]
    words[-1] = words[-1].rstrip()
    deltas: list[JSON] = [{"role": "assistant", "content": ""}]
    deltas += [{"content": w} for w in words]
    base = {k: reply[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    events = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
              for d in deltas]  # fmt: skip
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if include_usage:
        events.append({**base, "choices": [], "usage": reply["usage"]})
    return [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


@dataclass
class SimulatedUpstream:
    """The models and their windows; the exact counter is loaded on first use."""

    models: Mapping[str, int] = field(default_factory=lambda: dict(MODELS))
    requests: int = 0
    _counter: ModelCounter | None = None

    def count(self, body: Mapping[str, Any]) -> int:
        if self._counter is None:
            self._counter = TokenCounter(cache_size=10_000).for_model("gpt-4o", "o200k_base")
        return self._counter.count_request(body)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 << 20)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.list_models)
        return app

    async def list_models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "created": CREATED, "owned_by": "simulated",
                 "context_window": w} for m, w in self.models.items()]  # fmt: skip
        return web.json_response({"object": "list", "data": data})

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return web.json_response(error("We could not parse the JSON body."), status=400)
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return web.json_response(error("'messages' must be an array", "messages"), status=400)
        model = body.get("model")
        if not isinstance(model, str) or model not in self.models:
            msg = f"The model `{model}` does not exist or you do not have access to it."
            return web.json_response(error(msg, code="model_not_found"), status=404)
        window, prompt = self.models[model], self.count(body)
        reserve = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        reserve = reserve if isinstance(reserve, int) else 0
        if prompt + reserve > window:
            return web.json_response(context_error(window, prompt, reserve), status=400)
        reply = completion(model, reply_text(model, window, body["messages"], prompt), prompt)
        if body.get("stream") is not True:
            return web.json_response(reply)
        options = body.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True
        return await self._stream(request, stream_frames(reply, usage))

    async def _stream(self, request: web.Request, frames: list[bytes]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Cache-Control": "no-cache"})
        response.content_type = "text/event-stream"
        await response.prepare(request)
        for frame in frames:
            await response.write(frame)
        await response.write_eof()
        return response
