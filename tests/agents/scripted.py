"""A scripted upstream for real agent CLIs: it plays one tool-using task, step by step.

The agent's main requests (those that carry ``tools``) are answered from a script: a
tool call to read each large file the test wrote, in order, then a final answer. Which
step comes next is read from the request itself (the newest message is the result of
the call with our id ``call_<n>``), never from a counter, so a retry or a side request
(a title, a summary) cannot shift it, and compression of older messages cannot either.
Side requests without tools get a short plain answer.

It is strict where handoff could go wrong: it validates bodies and tool pairing as
OpenAI does (``tests.fake_upstream.validation``), and refuses a prompt longer than the
model's window, counted exactly (o200k), with OpenAI's context-length error.

One :class:`Script` per wire format path: ``ChatScript`` speaks Chat Completions; a
Messages or Responses script plugs in beside it through ``ScriptedUpstream(scripts=…)``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from proxy.decide.tokens.counter import TokenCounter
from tests.fake_upstream import ApiError, context_error, sse, stream_events, validate_chat

JSON = dict[str, Any]
Arguments = Callable[[str], Mapping[str, Any]]
"""Builds a read tool's arguments from a file's absolute path."""


@dataclass(frozen=True)
class Seen:
    """One request the upstream received: path, parsed body, and the answer's status."""

    path: str
    body: Any
    status: int


class Script(Protocol):
    """Answers one wire format's requests; raises ``ApiError`` for a refusal."""

    async def answer(self, request: web.Request, body: Any) -> web.StreamResponse: ...


@dataclass
class ToolTask:
    """The task: read each file with ``tool`` (arguments from ``arguments(path)``), then
    answer ``final``. ``window`` is the model's context window the upstream enforces."""

    tool: str
    arguments: Arguments
    files: Sequence[str]
    final: str
    window: int
    model: str = "scripted-agent"

    def call_id(self, step: int) -> str:
        return f"call_{step}"

    def step_after(self, answered: str | None) -> int:
        """The next step: 0 when the newest input is not one of our tool results, n+1
        after the result of ``call_<n>``. Each wire format's script finds ``answered``
        (the id its newest tool result answers) in its own shape."""
        if answered and answered.startswith("call_") and answered[5:].isdigit():
            return int(answered[5:]) + 1
        return 0


@dataclass
class ChatScript:
    """Chat Completions (``/v1/chat/completions``), streamed or not."""

    task: ToolTask
    tokenizer: str = "o200k_base"
    _counter: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._counter = TokenCounter(cache_size=100_000).for_model("gpt-4o", self.tokenizer)

    def message(self, body: JSON) -> JSON:
        """The assistant message this request gets."""
        if not body.get("tools"):
            return {"role": "assistant", "content": "Reading large files"}
        last = body["messages"][-1]
        answered = last.get("tool_call_id") if last.get("role") == "tool" else None
        step = self.task.step_after(answered)
        if step >= len(self.task.files):
            return {"role": "assistant", "content": self.task.final}
        args = json.dumps(dict(self.task.arguments(self.task.files[step])))
        call = {"name": self.task.tool, "arguments": args}
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": self.task.call_id(step), "type": "function", "function": call}],
        }

    async def answer(self, request: web.Request, body: Any) -> web.StreamResponse:
        body = validate_chat(body)
        prompt = self._counter.count_request(body)
        if prompt > self.task.window:
            raise context_error("openai", self.task.window, prompt)
        message = self.message(body)
        finish = "tool_calls" if "tool_calls" in message else "stop"
        completion = {
            "id": f"chatcmpl-scripted-{prompt}",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": body["model"],
            "service_tier": "default",
            "system_fingerprint": "fp_scripted",
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            ],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": 20,
                "total_tokens": prompt + 20,
            },
        }
        if body.get("stream") is not True:
            return web.json_response(completion)
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in stream_events(completion, 3, usage):
            await resp.write(sse(event))
        await resp.write(sse("[DONE]"))
        await resp.write_eof()
        return resp


@dataclass
class ScriptedUpstream:
    """The aiohttp app: one script per path, ``GET /v1/models``, everything recorded.

    Any other path is answered 404 and recorded, so a test sees a client (or handoff)
    reaching for something the script does not serve."""

    scripts: Mapping[str, Script]
    models: Mapping[str, int]
    seen: list[Seen] = field(default_factory=list)
    url: str = ""

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 28)
        app.router.add_get("/v1/models", self._models)
        app.router.add_route("*", "/{tail:.*}", self._any)
        return app

    def bodies(self, path: str = "/v1/chat/completions") -> list[Any]:
        """Bodies of the requests to ``path`` that were answered 200, in order."""
        return [s.body for s in self.seen if s.path == path and s.status == 200]

    async def _models(self, request: web.Request) -> web.Response:
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "scripted", "context_length": w}
            for m, w in self.models.items()
        ]
        self.seen.append(Seen(request.path, None, 200))
        return web.json_response({"object": "list", "data": data})

    async def _any(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        script = self.scripts.get(request.path) if request.method == "POST" else None
        if script is None:
            self.seen.append(Seen(request.path, body, 404))
            return web.json_response({"error": {"message": f"no route {request.path}"}}, status=404)
        try:
            resp = await script.answer(request, body)
        except ApiError as e:
            self.seen.append(Seen(request.path, body, e.status))
            return web.json_response(e.body, status=e.status, headers=e.headers)
        self.seen.append(Seen(request.path, body, resp.status))
        return resp
