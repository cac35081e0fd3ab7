"""The summarizer: an LLM call that writes the structured summary for ``summarize``.

A :class:`Summarizer` is the ``ctx.summarize`` callable the proxy injects. It posts
one non-streaming chat-completions request (the configured model and upstream)
with a system prompt asking for six sections and the dropped turns rendered as a
compact transcript (tool calls one line each, huge tool outputs cut inside the
transcript), in pieces that fit the summarizer model when the dropped part does not,
each extending the summary before it; summaries already written come from a
:class:`SummaryCache` (the store). Any timeout, non-200 or malformed body raises
:class:`SummarizerError`, which the policy turns into "the digest instead, and why".
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

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


class SummaryCache(Protocol):
    """Summaries already written, by a hash of what they summarize (the store keeps them,
    so a restarted proxy does not pay for them again)."""

    async def get(self, key: str) -> str | None: ...

    def put(self, key: str, text: str) -> None: ...


class Summarizer:
    """Calls ``{base_url}/chat/completions`` to summarize (or extend a summary).

    With ``input_tokens`` (what the summarizer model can read besides its answer) and
    ``count`` (its tokens in a text), dropped messages that do not fit one call are
    split into pieces that do, each summarized extending the summary of those before:
    every call fits the model, whatever the size of what is dropped."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        headers: Mapping[str, str],
        model: str,
        timeout: float,
        max_tokens: int,
        *,
        input_tokens: int | None = None,
        count: Callable[[str], int] | None = None,
        cache: SummaryCache | None = None,
    ) -> None:
        self.session = session
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.headers = {**headers, "content-type": "application/json"}
        self.model = model
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.input_tokens = input_tokens
        self.count = count or (lambda text: len(text) // 2 + 1)  # a token is >= 2 chars, mostly
        self.cache = cache
        self.calls = 0  # summaries requested from the model (not found in the cache)

    def request_body(self, messages: Sequence[Message], previous_summary: str | None) -> bytes:
        return self._body(render_transcript(messages), previous_summary)

    def _body(self, transcript: str, previous_summary: str | None) -> bytes:
        task = "Summarize this conversation:"
        if previous_summary:
            task = (
                "Here is the summary of the conversation so far:\n\n"
                f"{previous_summary}\n\nExtend it with these later messages, "
                "keeping the same sections:"
            )
        return self.chat_body(SYSTEM_PROMPT, f"{task}\n\n{transcript}")

    def chat_body(self, system: str, user: str) -> bytes:
        """One deterministic, non-streamed chat request to the summarizer's model."""
        body = {
            "model": self.model,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
            "max_tokens": self.max_tokens,
            "temperature": 0,
            "stream": False,
        }
        return orjson.dumps(body)

    async def __call__(self, messages: Sequence[Message], previous_summary: str | None) -> str:
        summary = previous_summary
        for piece in self.pieces(messages, previous_summary):
            summary = await self._summarize(piece, summary)
        if summary is None or summary == previous_summary:
            raise SummarizerError("nothing to summarize")
        return summary

    def pieces(self, messages: Sequence[Message], previous: str | None) -> list[str]:
        """The transcript of ``messages`` in pieces that each fit one call (room left for
        the system prompt, a summary so far as long as the answer, and the answer)."""
        blocks = [render_transcript([m]) for m in messages]
        blocks = [b for b in blocks if b]
        if self.input_tokens is None:
            return ["\n\n".join(blocks)] if blocks else []
        fixed = self.count(SYSTEM_PROMPT) + 64 + max(self.max_tokens, self.count(previous or ""))
        room = max(256, self.input_tokens - fixed)
        out: list[str] = []
        piece: list[str] = []
        used = 0
        for block in blocks:
            size = self.count(block)
            if size > room:  # one message alone over a call: its middle goes
                block = _clip(block, max(200, len(block) * room // (size + 1)))
                size = self.count(block)
            if piece and used + size > room:
                out.append("\n\n".join(piece))
                piece, used = [], 0
            piece.append(block)
            used += size
        if piece:
            out.append("\n\n".join(piece))
        return out

    async def _summarize(self, transcript: str, previous: str | None) -> str:
        data = self._body(transcript, previous)
        key = hashlib.sha256(data).hexdigest()  # what is summarized, by which model, how
        if self.cache is not None and (hit := await self.cache.get(key)) is not None:
            return hit
        self.calls += 1
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
        text = _content(raw)
        if self.cache is not None:
            self.cache.put(key, text)
        return text


def _content(raw: bytes) -> str:
    try:
        content = orjson.loads(raw)["choices"][0]["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError) as e:
        raise SummarizerError(f"summarizer answered an unexpected body: {raw[:200]!r}") from e
    if not isinstance(content, str) or not content.strip():
        raise SummarizerError("summarizer answered an empty summary")
    return content.strip()
