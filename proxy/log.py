"""structlog set-up: one canonical event per request, console or JSON.

Fields are snake_case. Only ``request_id`` is bound through contextvars (so every
event of a request can be joined to it); the canonical event's own fields go in a
per-request dict (:func:`proxy.request_log.request_fields`) that the middleware
logs once at the end: each contextvar bound copies the context, about 1 µs a field.
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


_SHORTEST_SECRET = 11  # "sk-" and 8 more: nothing shorter can match _SECRET_VALUES

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
        elif len(value) >= _SHORTEST_SECRET and _SECRET_VALUES.search(value) is not None:
            event[key] = _SECRET_VALUES.sub("[redacted]", value)
    return event


class _Stderr:
    """Writes each line to whatever ``sys.stderr`` is *now*, so loggers can be cached
    (structlog's own loggers capture the stream once, and tests or daemonizers may
    replace it)."""

    def msg(self, message: str | bytes) -> None:
        stream = sys.stderr
        if isinstance(message, bytes):
            buffer = getattr(stream, "buffer", None)
            if buffer is not None:
                buffer.write(message + b"\n")
                buffer.flush()
                return
            message = message.decode("utf-8", "replace")
        stream.write(message + "\n")
        stream.flush()

    log = debug = info = warn = warning = err = error = critical = exception = msg


def _stderr(*_: Any) -> _Stderr:
    return _Stderr()


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
        stamper = structlog.processors.TimeStamper(fmt=None, utc=True)  # unix time: cheap
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        stamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            stamper,
            scrub_secrets,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=_stderr,
        cache_logger_on_first_use=True,
    )
