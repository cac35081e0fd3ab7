"""The summarizer: an LLM call that writes the structured summary for ``summarize``.

A :class:`Summarizer` is the ``ctx.summarize`` callable the proxy injects. It posts
one non-streaming chat-completions request (the configured model and upstream)
with a system prompt asking for six sections and the dropped turns rendered as a
compact transcript (tool calls one line each, huge tool outputs cut inside the
transcript). Any timeout, non-200 or malformed body raises :class:`SummarizerError`,
which the policy turns into "skip to the next policy".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import orjson

from policies.units import called_function

Message = Mapping[str, Any]

SYSTEM_PROMPT = """You compress the earlier part of a conversation between a user and an \
AI assistant so that the assistant can continue the work without it. Write a summary \
with exactly these sections, as Markdown headings:

## Goal
## What was done (files, code, commands, results)
## Key decisions
## Current state
## Open items and next steps
## User's requests (verbatim where short)

Be specific: keep file paths, function names, identifiers, numbers, error messages and \
short code that later turns may need. Omit pleasantries. Do not invent anything."""


class SummarizerError(Exception):
    """The summarizer LLM did not produce a summary (timeout, HTTP error, bad body)."""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for p in content:
            if isinstance(p, dict) and isinstance(p.get("text"), str):
                parts.append(p["text"])
            elif isinstance(p, dict):
                parts.append(f"[{p.get('type', 'part')}]")
        return " ".join(parts)
    return ""


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[… {len(text) - limit:,} characters omitted …]\n{text[-half:]}"


def render_transcript(messages: Sequence[Message], max_tool_chars: int = 2000) -> str:
    """The messages as a compact plain-text transcript, one block per message."""
    lines: list[str] = []
    for m in messages:
        role = str(m.get("role", "?"))
        if role in ("tool", "function"):
            who = m.get("tool_call_id") or m.get("name") or ""
            lines.append(f"[tool result {who}]\n{_clip(_text(m.get('content')), max_tool_chars)}")
            continue
        text = _text(m.get("content")) or str(m.get("refusal") or "")
        if text:
            lines.append(f"[{role}]\n{text}")
        calls = m.get("tool_calls")
        for call in calls if isinstance(calls, list) else ():
            fn = called_function(call)
            args = _clip(str(fn.get("arguments", "")), max_tool_chars // 4)
            call_id = call.get("id", "") if isinstance(call, dict) else ""
            lines.append(f"[{role} calls {fn.get('name', '?')} {call_id}] {args}")
    return "\n\n".join(lines)


class Summarizer:
    """Calls ``{base_url}/chat/completions`` to summarize (or extend a summary)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        headers: Mapping[str, str],
        model: str,
        timeout: float,
        max_tokens: int,
    ) -> None:
        self.session = session
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.headers = {**headers, "content-type": "application/json"}
        self.model = model
        self.timeout = timeout
        self.max_tokens = max_tokens

    def request_body(self, messages: Sequence[Message], previous_summary: str | None) -> bytes:
        task = "Summarize this conversation:"
        if previous_summary:
            task = (
                "Here is the summary of the conversation so far:\n\n"
                f"{previous_summary}\n\nExtend it with these later messages, "
                "keeping the same sections:"
            )
        body = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": f"{task}\n\n{render_transcript(messages)}"},
            ],
            "max_tokens": self.max_tokens,
            "temperature": 0,
            "stream": False,
        }
        return orjson.dumps(body)

    async def __call__(self, messages: Sequence[Message], previous_summary: str | None) -> str:
        data = self.request_body(messages, previous_summary)
        timeout = aiohttp.ClientTimeout(total=self.timeout)
        try:
            async with self.session.post(
                self.url, data=data, headers=self.headers, timeout=timeout
            ) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise SummarizerError(
                        f"summarizer upstream answered {resp.status}: {raw[:200]!r}"
                    )
        except TimeoutError as e:
            raise SummarizerError(f"summarizer timed out after {self.timeout}s") from e
        except aiohttp.ClientError as e:
            raise SummarizerError(f"summarizer request failed: {e}") from e
        return _content(raw)


def _content(raw: bytes) -> str:
    try:
        content = orjson.loads(raw)["choices"][0]["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError) as e:
        raise SummarizerError(f"summarizer answered an unexpected body: {raw[:200]!r}") from e
    if not isinstance(content, str) or not content.strip():
        raise SummarizerError("summarizer answered an empty summary")
    return content.strip()
