"""The proxy's request log lines as a test sees them: read from stderr (the lines take a
fast path of their own, which ``structlog.testing.capture_logs`` does not see)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

_FIELD = re.compile(r"(\w+)=(\S+)")


def chat_lines(text: str) -> list[dict[str, str]]:
    """The ``request`` lines for the chat route in ``text`` (console format), as fields."""
    out = []
    for line in text.splitlines():
        if "] request " in line and "completions" in line:
            out.append(dict(_FIELD.findall(line)))
    return out


async def wait_lines(capfd: pytest.CaptureFixture[str], n: int, timeout: float = 5.0) -> Any:
    """At least ``n`` chat request lines, once the logger flushed them; and all stderr."""
    seen = ""
    async with asyncio.timeout(timeout):
        while len(chat_lines(seen)) < n:
            await asyncio.sleep(0.05)
            seen += capfd.readouterr().err
    return chat_lines(seen), seen
