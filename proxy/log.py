"""structlog set-up: one canonical event per request, console or JSON.

Fields are snake_case and bound through contextvars by the request middleware.
A last-line scrubber drops anything that looks like a credential, so a careless
``log.info(..., headers=...)`` can never write a key.
"""

from __future__ import annotations

import functools
import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any, Literal

import orjson
import structlog

_SECRET_KEYS = re.compile(r"authorization|api[-_]?key|access[-_]?key|secret|password|token$", re.I)
_SECRET_VALUES = re.compile(
    r"(?:Bearer\s+)[A-Za-z0-9._~+/=-]{8,}|sk-[A-Za-z0-9_-]{8,}|AKIA[0-9A-Z]{16}|gh[pousr]_[A-Za-z0-9]{20,}"
)


# Fields whose names look secret but hold counts, not credentials.
_SAFE_KEYS = frozenset({"tokens", "forwarded_tokens", "max_tokens", "event"})


@functools.lru_cache(maxsize=1024)
def _secret_key(key: str) -> bool:
    return key not in _SAFE_KEYS and _SECRET_KEYS.search(key) is not None


def scrub_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in event.items():
        if not isinstance(value, str):
            continue
        if _secret_key(key):
            event[key] = "[redacted]"
        elif _SECRET_VALUES.search(value) is not None:
            event[key] = _SECRET_VALUES.sub("[redacted]", value)
    return event


def _stderr_text(*_: Any) -> structlog.PrintLogger:
    return structlog.PrintLogger(sys.stderr)


def _stderr_bytes(*_: Any) -> structlog.BytesLogger | structlog.PrintLogger:
    buffer = getattr(sys.stderr, "buffer", None)
    return structlog.BytesLogger(buffer) if buffer is not None else _stderr_text()


def _orjson_dumps(event: Any, **_: Any) -> bytes:
    return orjson.dumps(event, default=str)


def configure_logging(
    fmt: Literal["console", "json"] = "console", level: int = logging.INFO
) -> None:
    """JSON lines via orjson (the request path logs once per request, so it must be
    cheap), or a readable console format. Loggers look sys.stderr up when created,
    never capture it once: it may be replaced (tests, daemonizers)."""
    renderer: structlog.typing.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer(serializer=_orjson_dumps)
        factory: Any = _stderr_bytes
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        factory = _stderr_text
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            scrub_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=factory,
        cache_logger_on_first_use=False,
    )
