"""Counting a chat request's prompt tokens, fast when the history is resent.

Each message's count is cached under a hash of its JSON text (bounded LRU shared
by all models), so a resent conversation only pays for messages not seen before.
``upper_bound`` needs no tokenizer at all: when it is within budget the request
fits and counting can be skipped.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import tiktoken

from policies.identity_memo import IdentityMemo
from proxy.decide.tokens import chat
from proxy.decide.tokens.encodings import ESTIMATE, EncodingLoader, LoadedEncoding
from proxy.decide.tokens.images import (
    ImageCost,
    cost_for_model,
    data_url_size,
    image_tokens,
    worst_case_tokens,
)
from proxy.decide.tokens.pieces import utf8_len
from proxy.decide.windows.matching import candidates

Message = Mapping[str, Any]
EXACT_ENCODINGS = frozenset({"cl100k_base", "o200k_base"})
"""Encodings whose chat accounting OpenAI publishes; others are approximate."""
OFFLOAD_BOUND = 32_768
"""Requests whose byte bound exceeds this are counted in a worker thread."""
_MAX_MODELS = 1024


class CountCache:
    """A thread-safe LRU of message-hash -> token count."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()

    def get_many(self, keys: Sequence[bytes]) -> list[int | None]:
        with self._lock:
            out: list[int | None] = []
            for key in keys:
                hit = self._data.get(key)
                if hit is not None:
                    self._data.move_to_end(key)
                out.append(hit)
            return out

    def put_many(self, items: Sequence[tuple[bytes, int]]) -> None:
        if self._size <= 0:
            return
        with self._lock:
            for key, value in items:
                self._data[key] = value
                self._data.move_to_end(key)
            while len(self._data) > self._size:
                self._data.popitem(last=False)

    def __len__(self) -> int:
        return len(self._data)


class ModelCounter:
    """Counts prompts for one model with one encoding; ``exact`` says how sure."""

    def __init__(self, model: str, enc: LoadedEncoding, exact: bool, cache: CountCache) -> None:
        self.model = model
        self.exact = exact
        self.encoding_name = enc.name
        self._enc = enc
        self._cache = cache
        self._image_cost: ImageCost = cost_for_model(model)
        self._tools = chat.O200K_TOOLS if enc.name.startswith("o200k") else chat.CL100K_TOOLS
        # Counts depend on encoding and image pricing: both salt the message hash.
        profile = f"{enc.name}|{self._image_cost}".encode()
        self._salt = hashlib.blake2b(profile, digest_size=16).digest()

    def count_text(self, text: str) -> int:
        return self._enc.count(text)

    def count_messages(self, messages: Sequence[Message]) -> int:
        """The messages plus the reply priming (what the cookbook counts)."""
        return self._messages_tokens(messages) + chat.REPLY_PRIMING

    def count_request(self, body: Mapping[str, Any]) -> int:
        """Messages, tools/functions, response_format and priming of a request body."""
        return self._messages_tokens(_messages(body)) + self._fixed_tokens(body)

    def request_counter(
        self, body: Mapping[str, Any], seen: IdentityMemo | None = None
    ) -> Callable[[Sequence[Message]], int]:
        """A counter for candidate message lists sent with this body's other fields.

        Compression counts the same message objects many times over (every candidate
        cut), so the counter remembers each message object's count by identity in
        ``seen`` (a fresh one, or the conversation's last turn's ``next()``: a resent
        history's messages are that turn's objects); the content-hash cache is asked
        once per message it does not know."""
        fixed = self._fixed_tokens(body)
        memo = seen if seen is not None else IdentityMemo()

        def count(messages: Sequence[Message]) -> int:
            total, fresh = fixed, []
            now, then = memo.now, memo.then  # IdentityMemo.get, inlined: it runs per message
            for msg in messages:
                hit = now.get(id(msg))
                if hit is None or hit[0] is not msg:
                    hit = then.get(id(msg))
                    if hit is None or hit[0] is not msg:
                        fresh.append(msg)
                        continue
                    now[id(msg)] = hit
                total += hit[1]
            if fresh:
                for msg, tokens in zip(fresh, self._per_message(fresh), strict=True):
                    memo.put(msg, tokens)
                    total += tokens
            return total

        return count

    def upper_bound(self, body: Mapping[str, Any]) -> int:
        """A bound >= ``count_request(body)`` computed from byte lengths, no tokenizer."""
        worst = worst_case_tokens(self._image_cost)

        def image(_: Mapping[str, Any]) -> int:
            return worst

        total = sum(chat.message_tokens(m, utf8_len, image) for m in _messages(body))
        return total + self._fixed_tokens(body, utf8_len)

    async def count_request_async(self, body: Mapping[str, Any]) -> int:
        """``count_request``, in a worker thread when the request is large."""
        if self.upper_bound(body) <= OFFLOAD_BOUND:
            return self.count_request(body)
        return await asyncio.to_thread(self.count_request, body)

    def _fixed_tokens(self, body: Mapping[str, Any], measure: chat.Measure | None = None) -> int:
        m = measure or self._enc.count
        total = chat.REPLY_PRIMING + chat.response_format_tokens(body.get("response_format"), m)
        for key, wrapped in (("tools", True), ("functions", False)):
            defs = body.get(key)
            if isinstance(defs, list) and defs:
                total += chat.tools_tokens(defs, m, self._tools, wrapped=wrapped)
        return total

    def _messages_tokens(self, messages: Sequence[Message]) -> int:
        return sum(self._per_message(messages))

    def _per_message(self, messages: Sequence[Message]) -> list[int]:
        keys = [self._key(m) for m in messages]
        cached = self._cache.get_many(keys)
        out, fresh = [], []
        for msg, key, hit in zip(messages, keys, cached, strict=True):
            if hit is None:
                hit = chat.message_tokens(msg, self._enc.count, self._image)
                fresh.append((key, hit))
            out.append(hit)
        if fresh:
            self._cache.put_many(fresh)
        return out

    def _key(self, msg: Message) -> bytes:
        try:
            raw = orjson.dumps(msg)
        except TypeError:
            raw = repr(msg).encode()
        return hashlib.blake2b(raw, digest_size=16, salt=self._salt).digest()

    def _image(self, part: Mapping[str, Any]) -> int:
        spec = part.get("image_url")
        url = (
            spec if isinstance(spec, str) else spec.get("url") if isinstance(spec, Mapping) else ""
        )
        detail = spec.get("detail", "auto") if isinstance(spec, Mapping) else "auto"
        size = data_url_size(url) if isinstance(url, str) else None
        return image_tokens(self._image_cost, size, str(detail))


def _messages(body: Mapping[str, Any]) -> Sequence[Message]:
    msgs = body.get("messages")
    return [m for m in msgs if isinstance(m, Mapping)] if isinstance(msgs, list) else []


class TokenCounter:
    """Owns the encodings and the per-message cache; hands out ``ModelCounter``s."""

    def __init__(self, cache_size: int, cache_dir: Path | None = None) -> None:
        self._loader = EncodingLoader(cache_dir)
        self._cache = CountCache(cache_size)
        self._models: dict[tuple[str, str | None], ModelCounter] = {}
        self._lock = threading.Lock()

    @classmethod
    def with_loader(cls, cache_size: int, loader: EncodingLoader) -> TokenCounter:
        counter = cls(cache_size)
        counter._loader = loader
        return counter

    def for_model(self, model: str, tokenizer: str | None = None) -> ModelCounter:
        """The counter for ``model``; ``tokenizer`` (config or table) beats tiktoken's map."""
        key = (model, tokenizer)
        hit = self._models.get(key)
        if hit is not None:
            return hit
        name, known = encoding_for(model, tokenizer)
        enc = self._loader.get(name)
        exact = known and enc.exact and enc.name in EXACT_ENCODINGS
        counter = ModelCounter(model, enc, exact, self._cache)
        with self._lock:
            if len(self._models) >= _MAX_MODELS:
                self._models.clear()
            self._models[key] = counter
        return counter

    @property
    def cached_messages(self) -> int:
        return len(self._cache)


def encoding_for(model: str, tokenizer: str | None = None) -> tuple[str, bool]:
    """(encoding name, whether it is the model's own): config/table, then tiktoken's
    model map (on the name and its provider-less forms), else o200k_base, not own."""
    if tokenizer:
        return tokenizer, tokenizer != ESTIMATE
    for cand in candidates(model):
        try:
            return tiktoken.encoding_name_for_model(cand.name), True
        except KeyError:
            continue
    return "o200k_base", False
