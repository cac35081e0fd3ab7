"""The scripted upstream's Anthropic Messages side, for Claude Code (``/v1/messages``).

It plays the same :class:`~tests.agents.scripted.ToolTask` as the chat script: the
agent's main requests (those with ``tools``) get a ``tool_use`` reading the next file,
judged from the newest ``tool_result`` (ids ``toolu_call_<n>``), then the final answer;
side requests (titles, quota checks) a short text. It is as strict as the fake's
Messages routes (:mod:`tests.fake_upstream.anthropic`: pairing, alternation, signatures)
and refuses a prompt over the window with Anthropic's "prompt is too long" error;
``count_tokens`` is answered too. Always streamed when asked, as Claude Code asks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.agents.scripted import ToolTask
from tests.fake_upstream.anthropic import (
    MessagesError,
    estimate,
    events,
    message,
    validate,
    validate_counting,
)

PREFIX = "toolu_call_"


def step_of(messages: Sequence[Mapping[str, Any]]) -> int:
    """0 after a plain user turn, n+1 after the result of ``toolu_call_<n>``."""
    last = messages[-1] if messages else {}
    content = last.get("content")
    if last.get("role") != "user" or not isinstance(content, list):
        return 0
    steps = [
        int(ref[len(PREFIX) :])
        for b in content
        if isinstance(b, dict) and b.get("type") == "tool_result"
        for ref in [str(b.get("tool_use_id", ""))]
        if ref.startswith(PREFIX) and ref[len(PREFIX) :].isdigit()
    ]
    return max(steps) + 1 if steps else 0


@dataclass
class MessagesScript:
    """``POST /v1/messages``."""

    task: ToolTask

    def blocks(self, body: Mapping[str, Any]) -> list[dict[str, Any]]:
        if not body.get("tools"):
            return [{"type": "text", "text": "Reading large files"}]
        step = step_of(body["messages"])
        if step >= len(self.task.files):
            return [{"type": "text", "text": self.task.final}]
        args = dict(self.task.arguments(self.task.files[step]))
        return [
            {"type": "tool_use", "id": f"{PREFIX}{step}", "name": self.task.tool, "input": args}
        ]

    async def answer(self, request: web.Request, body: Any) -> web.StreamResponse:
        try:
            validate(body)
        except MessagesError as e:
            return e.response()
        prompt = estimate(body)
        if prompt > self.task.window:
            error = f"prompt is too long: {prompt} tokens > {self.task.window} maximum"
            return MessagesError(error).response()
        msg = message(body["model"], self.blocks(body), prompt)
        if not body.get("stream"):
            return web.json_response(msg)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for frame in events(msg):
            await resp.write(frame)
        await resp.write_eof()
        return resp


@dataclass
class CountScript:
    """``POST /v1/messages/count_tokens``."""

    async def answer(self, request: web.Request, body: Any) -> web.StreamResponse:
        try:
            validate_counting(body)
        except MessagesError as e:
            return e.response()
        return web.json_response({"input_tokens": estimate(body)})
