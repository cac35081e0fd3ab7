"""Recognise an upstream's "prompt too long" answer, and read the limit it names.

Servers word this differently: OpenAI (``context_length_exceeded``, "maximum
context length is N tokens"), vLLM (the same sentence, or "max_model_len"),
llama.cpp ("exceeds the available context size", ``n_ctx``), Ollama and others
("context length", "prompt is too long"). The limit, when named, is the upstream's
true window and feeds the retry and calibration.
"""

from __future__ import annotations

import re

import orjson

_LIMIT_PATTERNS = (
    re.compile(r"maximum context length is (\d[\d,]*)", re.I),
    re.compile(r"max_model_len[^\d]{0,20}(\d[\d,]*)", re.I),
    re.compile(r"n_ctx(?:_slot)?\s*[=:]?\s*(\d[\d,]*)", re.I),
    re.compile(r"context (?:size|window|length)(?: is| of)?\s*(?:of\s*)?\(?(\d[\d,]*)", re.I),
    re.compile(r"(\d[\d,]*)\s*token context", re.I),
)
_MARKERS = (
    "context_length_exceeded",
    "maximum context length",
    "exceeds the available context size",
    "context length",
    "context window",
    "prompt is too long",
    "too many tokens",
    "max_model_len",
    "exceed_context_size",
)


def context_limit(status: int, body: bytes) -> int | None:
    """None if this is not a context-length error; else the limit it names, or 0."""
    if status not in (400, 413, 422, 500) or not body:
        return None
    text = _message(body)
    low = text.lower()
    if not any(m in low for m in _MARKERS):
        return None
    for pat in _LIMIT_PATTERNS:
        m = pat.search(text)
        if m:
            return int(m.group(1).replace(",", ""))
    return 0


def _message(body: bytes) -> str:
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return body[:4096].decode("utf-8", "replace")
    if isinstance(parsed, dict):
        err = parsed.get("error", parsed)
        if isinstance(err, dict):
            return " ".join(str(err.get(k, "")) for k in ("message", "code", "type"))
        return str(err)
    return str(parsed)
