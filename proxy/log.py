"""structlog set-up: one canonical event per request, console or JSON.

Fields are snake_case and bound through contextvars by the request middleware.
A last-line scrubber drops anything that looks like a credential, so a careless
``log.info(..., headers=...)`` can never write a key.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, Literal

import structlog

_SECRET_KEYS = re.compile(r"authorization|api[-_]?key|access[-_]?key|secret|password|token$", re.I)
_SECRET_VALUES = re.compile(
    r"(?:Bearer\s+)[A-Za-z0-9._~+/=-]{8,}|sk-[A-Za-z0-9_-]{8,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}"
)


def scrub_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key in list(event):
        value = event[key]
        if _SECRET_KEYS.search(key) and isinstance(value, str) and key not in _SAFE_KEYS:
            event[key] = "[redacted]"
        elif isinstance(value, str):
            event[key] = _SECRET_VALUES.sub("[redacted]", value)
    return event


# Fields whose names look secret but hold counts, not credentials.
_SAFE_KEYS = frozenset({"tokens", "forwarded_tokens", "max_tokens", "event"})


def _stderr_logger(*_: Any) -> structlog.PrintLogger:
    return structlog.PrintLogger(sys.stderr)


def configure_logging(
    fmt: Literal["console", "json"] = "console", level: int = logging.INFO
) -> None:
    renderer: structlog.typing.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            scrub_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        # sys.stderr looked up per logger, not captured once: it may be replaced.
        logger_factory=_stderr_logger,
        cache_logger_on_first_use=False,
    )
