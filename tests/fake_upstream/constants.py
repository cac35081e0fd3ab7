"""What the fake serves by default and the types its modules share."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

JSON = dict[str, Any]
CountTokens = Callable[[Mapping[str, Any]], int]
ContextErrorStyle = Literal["openai", "llamacpp", "vllm", "ollama"]

DEFAULT_MODELS: Mapping[str, int] = {
    "gpt-4o-mini": 128_000,
    "gpt-4o": 128_000,
    "small-8k": 8192,
    "mid-32k": 32_768,
    "big-1m": 1_000_000,
}
DEFAULT_CONTEXT_WINDOW = 128_000
FINGERPRINT = "fp_fake0001"
ROLES = ("system", "assistant", "user", "function", "tool", "developer")
CREATED = 1_700_000_000
NOT_JSON_BODY = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
