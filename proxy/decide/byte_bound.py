"""Upper bounds on a request's prompt tokens without tokenizing it, so that a request
that surely fits migrates at once (the engine's fast path)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from proxy.decide.tokens import ModelCounter
from proxy.ingress.chat_request import ChatRequest

RAW_SLACK = 64
"""Tokens a text-only request may cost beyond its byte length (reply priming, tool
framing); property-tested against the exact count in tests/decide/test_raw_bound.py."""


def prompt_bound(req: ChatRequest, budget: int, counter: ModelCounter) -> int:
    """An upper bound on the request's prompt tokens, as cheap as it can be had when
    the question is whether it fits ``budget``."""
    bound = raw_bound(req)
    if bound is None or budget < bound <= 2 * budget:
        # Images, or close enough that the tighter per-part bound may still fit;
        # far over, it cannot, and walking a huge history for it is wasted.
        bound = counter.upper_bound(req.body)
    return bound


def raw_bound(req: ChatRequest) -> int | None:
    """A cheap upper bound on a text-only request's prompt tokens: every token covers
    at least one byte of text, and the JSON around the text outweighs the per-message
    and per-tool constants. None when a message holds a non-text part (image, audio,
    file), whose cost is not bounded by its bytes."""
    if not req.raw:
        return None
    if not _has_list_content(req.messages):
        return len(req.raw) + RAW_SLACK  # (the common case, without a loop in Python)
    for msg in req.messages:
        content = msg.get("content")
        if isinstance(content, list) and not all(
            isinstance(part, dict) and part.get("type") == "text" for part in content
        ):
            return None
    return len(req.raw) + RAW_SLACK


def _has_list_content(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Does any message hold a list of parts? Iterated in C: twice as fast as a Python
    loop over a long history."""
    try:
        return list in map(type, map(_dict_get, messages, itertools.repeat("content")))
    except TypeError:  # a message that is a Mapping but not a dict
        return any(isinstance(m.get("content"), list) for m in messages)


_dict_get: Callable[[Any, str], Any] = dict.get
