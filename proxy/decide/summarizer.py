"""The summarizer: LLM calls that write the structured summary for ``summarize``.

A :class:`Summarizer` is the ``ctx.summarize`` callable the proxy injects, and its
``merge`` the ``ctx.merge``. Each call is one non-streaming chat-completions request
(the chosen model and upstream) with a system prompt asking for six sections. The
dropped turns are rendered as a compact transcript (tool calls one line each, huge
tool outputs cut inside it), split into pieces that fit the model, summarized piece
by piece and merged by reduce calls in a tree, so no call is larger than the model
reads. Every answer is kept in a :class:`SummaryCache` (the store) by the hash of its
request. Any timeout, non-200 or malformed body raises :class:`SummarizerError`,
which the policy turns into "the digest instead, and why".
"""

from __future__ import annotations

import asyncio
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


class ChatCall:
    """One non-streamed call to ``{base_url}/chat/completions``, answered from the
    cache when the same request body was answered before (any restart included)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        headers: Mapping[str, str],
        model: str,
        timeout: float,
        max_tokens: int,
        *,
        cache: SummaryCache | None = None,
    ) -> None:
        self.session = session
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.headers = {**headers, "content-type": "application/json"}
        self.model = model
        self.timeout = timeout
        self.max_tokens = max_tokens
        self.cache = cache
        self.calls = 0  # requests sent to the model (not found in the cache)

    def chat_body(self, system: str, user: str) -> bytes:
        """One deterministic, non-streamed chat request to the model."""
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

    async def ask(self, data: bytes) -> str:
        """The answer's text; keyed by the hash of ``data`` (what, by which model, how)."""
        key = hashlib.sha256(data).hexdigest()
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


class Summarizer(ChatCall):
    """Summarizes dropped messages by map-reduce, so every call fits the model.

    With ``input_tokens`` (what the model reads besides its answer) and ``count`` (its
    tokens in a text), the transcript is split at message boundaries into pieces that
    fit one call; each piece is summarized on its own (``concurrency`` at once), and
    the piece summaries are merged by a reduce call, in groups that fit and again
    over the groups' summaries when they do not fit one (a tree). Leaves depend on
    their piece alone, so a cut that moves finds the ones it made before in the cache.
    """

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
        concurrency: int = 3,
    ) -> None:
        super().__init__(session, base_url, headers, model, timeout, max_tokens, cache=cache)
        self.input_tokens = input_tokens
        self.count = count or (lambda text: len(text) // 2 + 1)  # a token is >= 2 chars, mostly
        self.concurrency = concurrency

    async def __call__(self, messages: Sequence[Message], previous_summary: str | None) -> str:
        """A summary of ``messages``; ``previous_summary`` (of what came before them) is
        context for the reduce call, never part of a leaf."""
        pieces = self.pieces(messages)
        if not pieces:
            raise SummarizerError("nothing to summarize")
        leaves = await self._all([self.chat_body(SYSTEM_PROMPT, leaf_prompt(p)) for p in pieces])
        if len(leaves) == 1:
            return leaves[0]
        return await self._reduce(leaves, previous_summary, None)

    async def merge(self, summaries: Sequence[str], limit: int) -> str:
        """One summary of ``summaries`` (oldest first), asked to stay within ``limit``
        characters: how a note that has no room for another block becomes one block."""
        if not summaries:
            raise SummarizerError("nothing to merge")
        return await self._reduce(list(summaries), None, limit)

    def pieces(self, messages: Sequence[Message]) -> list[str]:
        """The transcript of ``messages`` in pieces that each fit one leaf call; a single
        message over a call is cut in its middle."""
        blocks = [b for b in (render_transcript([m]) for m in messages) if b]
        if self.input_tokens is None:
            return ["\n\n".join(blocks)] if blocks else []
        room = self._room(leaf_prompt(""))
        out: list[str] = []
        piece: list[str] = []
        used = 0
        for block in blocks:
            block = self._clip_tokens(block, room)
            size = self.count(block) + 1  # and the blank line that joins it
            if piece and used + size > room:
                out.append("\n\n".join(piece))
                piece, used = [], 0
            piece.append(block)
            used += size
        if piece:
            out.append("\n\n".join(piece))
        return out

    async def _reduce(self, texts: list[str], previous: str | None, limit: int | None) -> str:
        """Merge ``texts`` in one call when they fit it, else group by group first."""
        if self.input_tokens is None:
            return await self.ask(
                self.chat_body(SYSTEM_PROMPT, reduce_prompt(texts, previous, limit))
            )
        room = self._room(reduce_prompt([], None, limit))
        texts = [self._clip_tokens(t, room // 2 - 16) for t in texts]
        previous = self._clip_tokens(previous, room // 4) if previous else None
        while not self._fits(prompt := reduce_prompt(texts, previous, limit)):
            groups: list[list[str]] = [[]]
            for t in texts:  # any two fit one call, so each round at least halves them
                if groups[-1] and not self._fits(reduce_prompt([*groups[-1], t], None, None)):
                    groups.append([])
                groups[-1].append(t)
            bodies = [self.chat_body(SYSTEM_PROMPT, reduce_prompt(g, None, None)) for g in groups]
            texts = [self._clip_tokens(t, room // 2 - 16) for t in await self._all(bodies)]
        return await self.ask(self.chat_body(SYSTEM_PROMPT, prompt))

    async def _all(self, bodies: Sequence[bytes]) -> list[str]:
        """The answers to ``bodies``, in order, at most ``concurrency`` in flight; the
        first failure cancels the rest and is raised as it is."""
        gate = asyncio.Semaphore(self.concurrency)

        async def one(data: bytes) -> str:
            async with gate:
                return await self.ask(data)

        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(one(b)) for b in bodies]
        except ExceptionGroup as failed:
            raise failed.exceptions[0] from None
        return [t.result() for t in tasks]

    def _room(self, prompt: str) -> int:
        """Tokens left for text in a call whose prompt, without that text, is ``prompt``."""
        assert self.input_tokens is not None
        return max(256, self.input_tokens - self.count(SYSTEM_PROMPT) - self.count(prompt) - 64)

    def _fits(self, prompt: str) -> bool:
        if self.input_tokens is None:
            return True
        return self.count(SYSTEM_PROMPT) + self.count(prompt) + 64 <= self.input_tokens

    def _clip_tokens(self, text: str, tokens: int) -> str:
        size = self.count(text)
        if size <= tokens:
            return text
        return _clip(text, max(100, len(text) * tokens // (size + 1)))


def leaf_prompt(transcript: str) -> str:
    return f"Summarize this conversation:\n\n{transcript}"


def reduce_prompt(summaries: Sequence[str], previous: str | None, limit: int | None) -> str:
    """The reduce call's request: summaries of consecutive parts merged into one, with the
    summary of what came before them as context only."""
    head = ""
    if previous:
        head = (
            "For context only (do not repeat it), the summary of what came before:\n\n"
            f"{previous}\n\n"
        )
    within = f", at most {limit:,} characters long" if limit else ""
    parts = "\n\n".join(f"--- part {i} ---\n{s}" for i, s in enumerate(summaries, 1))
    return (
        f"{head}Merge these summaries of consecutive parts of a conversation, oldest first, "
        f"into one summary with the same sections{within}:\n\n{parts}"
    )


def _content(raw: bytes) -> str:
    try:
        content = orjson.loads(raw)["choices"][0]["message"]["content"]
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError) as e:
        raise SummarizerError(f"summarizer answered an unexpected body: {raw[:200]!r}") from e
    if not isinstance(content, str) or not content.strip():
        raise SummarizerError("summarizer answered an empty summary")
    return content.strip()
