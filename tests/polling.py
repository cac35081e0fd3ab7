"""Waiting for a background thread or process to get somewhere, in tests."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(cond: Callable[[], object], deadline_s: float = 20.0) -> bool:
    """Poll ``cond()`` until it is true or ``deadline_s`` has passed: a liveness bound
    (did it get there at all), never a timing check."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return False
