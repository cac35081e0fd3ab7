"""Compression errors.

CompressionError
└── ContextTooLarge   even the pinned messages exceed the budget; the proxy
                      answers OpenAI's 400 ``context_length_exceeded`` itself
"""

from __future__ import annotations


class CompressionError(Exception):
    """Compression could not produce a request that fits."""


class ContextTooLarge(CompressionError):
    """The pinned messages (system/developer + the newest user turn) cannot fit."""

    def __init__(self, pinned_tokens: int, budget: int) -> None:
        self.pinned_tokens = pinned_tokens
        self.budget = budget
        super().__init__(
            f"the messages that must be kept (system prompt and newest user turn) "
            f"use {pinned_tokens:,} tokens, more than the {budget:,}-token budget"
        )
