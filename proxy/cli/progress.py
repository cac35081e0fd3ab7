"""Progress of long work on stderr: ``export: 120/500 turns``, so a wait is not a hang.

Shown when stderr is a terminal (one line, rewritten in place) or when asked (one line
now and then, for logs); never on stdout, which carries the command's output.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Call it with (done, total) as work advances; :meth:`close` ends the line."""

    def __init__(
        self,
        label: str,
        unit: str,
        *,
        forced: bool = False,
        stream: TextIO | None = None,
        every_s: float | None = None,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.enabled = forced or self.tty
        self.label, self.unit = label, unit
        self.every_s = every_s if every_s is not None else (0.1 if self.tty else 1.0)
        self._last = -self.every_s
        self._shown = ""

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < total and now - self._last < self.every_s:
            return
        self._last = now
        self._shown = f"{self.label}: {done}/{total} {self.unit}"
        self.stream.write(("\r" + self._shown) if self.tty else self._shown + "\n")
        self.stream.flush()

    def close(self) -> None:
        """End the rewritten line on a terminal (nothing to end otherwise)."""
        if self.enabled and self.tty and self._shown:
            self.stream.write("\n")
            self.stream.flush()
