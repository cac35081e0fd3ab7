"""Parsing ``30d``-style durations, ``--since`` values and counts (CLI and HTTP query)."""

from __future__ import annotations

import argparse
import datetime as dt
import re
import time

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
SQLITE_MAX = 2**63 - 1
"""The largest integer SQLite holds; a larger one cannot even be asked about."""


def parse_count(text: str) -> int:
    """A whole number from 1 to :data:`SQLITE_MAX`: a limit or a turn number."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= SQLITE_MAX:
        shown = text if len(text) <= 24 else text[:24] + "…"
        raise argparse.ArgumentTypeError(
            f"{shown!r}: expected a whole number from 1 to {SQLITE_MAX}"
        )
    return n


def parse_duration(text: str) -> float:
    """Seconds in ``30d``, ``12h``, ``90m``, ``2w``, ``45s``."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a duration like 30d, 12h or 90m")
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_since(text: str, now: float | None = None) -> float:
    """A unix time from a duration ago (``7d``) or an ISO date/time (UTC if no zone)."""
    try:
        return (time.time() if now is None else now) - parse_duration(text)
    except argparse.ArgumentTypeError:
        pass
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected a duration (7d) or an ISO date (2025-01-31)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()
