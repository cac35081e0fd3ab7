"""``middle-out``: keep the beginning and the end, drop from the middle.

The beginning is everything up to and including the first user message (the
system prompt and the task as first stated); the end is the newest units that
fit. The dropped block is the oldest part right after the beginning, so the
forwarded prefix (beginning + note) stays stable from turn to turn. Same note,
same reuse of the previous cut as ``truncate``.
"""

from __future__ import annotations

from collections.abc import Sequence

from policies.base import Message
from policies.truncate import Truncate
from policies.units import tail_start


class MiddleOut(Truncate):
    """Truncate that never drops the first user turn."""

    name = "middle-out"

    def start(self, messages: Sequence[Message]) -> int:
        tail = tail_start(messages)
        for i, m in enumerate(messages[:tail]):
            if m.get("role") == "user":
                return i + 1
        return tail
