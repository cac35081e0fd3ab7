"""The scripted upstream's Responses API (``/v1/responses``), for Codex.

It plays the same :class:`~tests.agents.scripted.ToolTask` as the chat script: a call of
the shell tool the request offers to print each large file, in order, then the final
answer; the step is read from the newest call output (``call_<n>``). It is as strict as
the fake upstream's Responses API (``tests.fake_upstream.responses``: call outputs need
their call, reasoning items must be the ones it issued and keep their following item),
refuses an input over the window (o200k over every string sent) with OpenAI's
``context_length_exceeded``, and streams typed events with sequence numbers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from proxy.decide.tokens.counter import TokenCounter
from tests.agents.scripted import JSON, ToolTask
from tests.fake_upstream.errors import openai_error
from tests.fake_upstream.responses import (
    ResponseMaker,
    overflow_error,
    response_events,
    sse_event,
    strings,
    validate_responses,
)


@dataclass
class ResponsesScript:
    """Responses (``/v1/responses``), streamed (as Codex asks) or not."""

    task: ToolTask
    maker: ResponseMaker = field(default_factory=ResponseMaker)
    tools_seen: list[list[str]] = field(default_factory=list)
    _counter: Any = field(init=False, repr=False)
    _n: int = 0

    def __post_init__(self) -> None:
        self._counter = TokenCounter(cache_size=100_000).for_model("gpt-4o", "o200k_base")

    def count(self, body: JSON) -> int:
        """o200k over what the model reads: the instructions, the items' texts, calls
        and outputs, the tools as JSON (ids, types and encrypted reasoning left out)."""
        read = strings(body.get("instructions"))
        for item in body.get("input") if isinstance(body.get("input"), list) else ():
            if isinstance(item, dict):
                read += strings({k: v for k, v in item.items() if k not in _NOT_READ})
        read += [json.dumps(t) for t in body.get("tools") or ()]
        return sum(self._counter.count_text(s) for s in read)

    def output(self, body: JSON) -> list[JSON]:
        """The output items this request gets."""
        self._n += 1
        n = self._n
        message = {"type": "message", "id": f"msg_{n}", "role": "assistant",
                   "status": "completed", "content": []}  # fmt: skip
        tools = [t for t in body.get("tools") or () if isinstance(t, dict)]
        self.tools_seen.append([str(t.get("name", t.get("type"))) for t in tools])
        if not tools:
            return [_with_text(message, "Reading large files")]
        step = _step(body["input"])
        if step >= len(self.task.files):
            return [_with_text(message, self.task.final)]
        path = self.task.files[step]
        name, args = _shell_call(tools, path)
        reasoning = self.maker.reasoning(
            n, "reasoning.encrypted_content" in (body.get("include") or [])
        )
        call = {"type": "function_call", "id": f"fc_{n}", "call_id": self.task.call_id(step),
                "name": name, "arguments": json.dumps(args), "status": "completed"}  # fmt: skip
        return [reasoning, call]

    async def answer(self, request: web.Request, body: Any) -> web.StreamResponse:
        body = validate_responses(body, self.maker.issued)
        prompt = self.count(body)
        if prompt > self.task.window:
            raise overflow_error()
        response = self.maker.response(body, prompt)  # the envelope; output is ours
        response["output"] = self.output(body)
        if body.get("stream") is not True:
            return web.json_response(response)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in response_events(response):
            await resp.write(sse_event(event))
        await resp.write_eof()
        return resp


_NOT_READ = frozenset({"id", "type", "role", "status", "call_id", "encrypted_content"})


def _with_text(message: JSON, text: str) -> JSON:
    return {**message, "content": [{"type": "output_text", "text": text, "annotations": []}]}


def _step(items: Any) -> int:
    """0 after a user's words, n+1 after the output of ``call_<n>``."""
    for item in reversed(items if isinstance(items, list) else []):
        kind = item.get("type") if isinstance(item, dict) else None
        if isinstance(kind, str) and kind.endswith("_call_output"):
            ref = str(item.get("call_id", ""))
            return int(ref[5:]) + 1 if ref.startswith("call_") and ref[5:].isdigit() else 0
        if isinstance(item, dict) and item.get("role") == "user":
            return 0
    return 0


def _shell_call(tools: list[JSON], path: str) -> tuple[str, JSON]:
    """The call that prints ``path`` with whichever shell tool Codex offers."""
    names = {str(t.get("name")): t for t in tools if t.get("type") == "function"}
    if "exec_command" in names:
        return "exec_command", {"cmd": f"cat {path}"}
    if "shell_command" in names:
        return "shell_command", {"command": f"cat {path}"}
    if "shell" in names:
        return "shell", {"command": ["cat", path]}
    raise openai_error(f"no shell tool among {sorted(names)}")
