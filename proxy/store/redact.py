"""Mask common secret formats in text before it is stored (``store.redact``).

Pure functions. Each pattern keeps a recognisable prefix (``sk-proj-``, ``AKIA``…)
and replaces the secret part with ``[REDACTED]``, so a reader sees what leaked
without the store holding it. Masking is idempotent. An identifier that holds a secret
(a workspace, a session name: a key pasted in the wrong header) becomes a digest of
it instead (:func:`masked_id`), so that it still tells one from another.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

MASK = "[REDACTED]"

_B = r"(?<![A-Za-z0-9_\-])"  # a secret starts a token: "task-…" is not "sk-…"
_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"(Bearer\s+)(?!\[REDACTED\])[A-Za-z0-9._~+/=\-]{8,}", re.IGNORECASE),
    re.compile(_B + r"(sk-ant-)[A-Za-z0-9_\-]{16,}"),
    re.compile(_B + r"(sk-proj-)[A-Za-z0-9_\-]{16,}"),
    re.compile(_B + r"(sk-)(?!ant-|proj-)[A-Za-z0-9_\-]{16,}"),
    re.compile(_B + r"(AKIA)[0-9A-Z]{16}"),
    re.compile(_B + r"(gh[pousr]_)[A-Za-z0-9]{30,}"),
    re.compile(_B + r"(github_pat_)[A-Za-z0-9_]{22,}"),
)


def redact_text(text: str) -> str:
    """``text`` with every recognised secret replaced by its prefix and ``MASK``."""
    for pattern in _PATTERNS:
        text = pattern.sub(lambda m: m.group(1) + MASK, text)
    return text


@functools.lru_cache(maxsize=1024)
def masked_name(value: str) -> str:
    """:func:`redact_text` of a short name that recurs every turn (a model's), remembered."""
    return redact_text(value)


@functools.lru_cache(maxsize=1024)
def masked_id(value: str) -> str:
    """``value``, or ``redacted-`` and a digest of it if it holds a recognised secret."""
    if masked_name(value) == value:
        return value
    return "redacted-" + hashlib.sha256(b"handoff-redacted-v1:" + value.encode()).hexdigest()[:16]


def redact_json(obj: Any) -> Any:
    """A copy of a JSON value with every string (keys excepted) passed through ``redact_text``."""
    if isinstance(obj, str):
        return redact_text(obj)
    if isinstance(obj, Mapping):
        return {k: redact_json(v) for k, v in obj.items()}
    if isinstance(obj, Sequence) and not isinstance(obj, bytes | bytearray):
        return [redact_json(v) for v in obj]
    return obj
