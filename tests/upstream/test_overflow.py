"""Context-length errors are recognised in each server's wording, with their limit."""

from __future__ import annotations

import json

import pytest

from proxy.upstream.overflow import context_limit
from tests.fake_upstream import context_error


@pytest.mark.parametrize(
    ("style", "expected"), [("openai", 4096), ("vllm", 4096), ("llamacpp", 4096), ("ollama", 0)]
)
def test_fake_upstream_styles_are_recognised(style: str, expected: int) -> None:
    """Each server's wording is recognised; the limit is read where the text names it."""
    err = context_error(style, 4096, 5000)  # type: ignore[arg-type]
    assert context_limit(err.status, json.dumps(err.body).encode()) == expected


def test_other_errors_are_not_context_errors() -> None:
    """Rate limits, server errors and unrelated 400s are not mistaken for overflow."""
    body = (
        b'{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}'
    )
    assert context_limit(429, body) is None
    assert context_limit(400, b'{"error":{"message":"Invalid value for temperature"}}') is None
    assert context_limit(200, b"maximum context length is 10 tokens") is None


def test_plain_text_error_with_number() -> None:
    """A non-JSON body still yields the limit it states."""
    assert context_limit(400, b"This model's maximum context length is 8,192 tokens.") == 8192
