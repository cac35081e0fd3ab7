"""structlog set-up: one canonical event per request, console or JSON.

Fields are snake_case. Only ``request_id`` is bound to the request's context (so every
event of a request can be joined to it), in a context variable of its own
(:func:`bind_request_id`: one ``ContextVar.set``, cheaper than structlog's
``bind_contextvars``); the canonical event's own fields go in a
per-request dict (:func:`proxy.server.request_log.request_fields`) that the route's wrapper
(:mod:`proxy.server.endpoint`) logs once at the end.
A last-line scrubber drops anything that looks like a credential, in every field (nested
ones, bytes and objects as they would be printed, an exception and its traceback, which
is rendered first and plain, never with its frames' locals), so a careless
``log.info(..., headers=...)`` can never write a key.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import functools
import logging
import re
import sys
import time
from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
import structlog

_SECRET_KEYS = re.compile(r"authorization|api[-_]?key|access[-_]?key|secret|password|token$", re.I)
_SECRET_VALUES = re.compile(
    r"(?:[Bb]earer|BEARER)\s+[A-Za-z0-9._~+/=-]{8,}|sk-[A-Za-z0-9_-]{8,}|AKIA[0-9A-Z]{16}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{22,}"
)
"""Every shape ``store.redact`` masks (``proxy.store.redact``), and looser: a log is no
place to guess whether it really was a key."""


_SHORTEST_SECRET = 11  # "sk-" and 8 more: nothing shorter can match _SECRET_VALUES
_PLAIN = (int, float, bool, type(None))

# Fields whose names look secret but hold counts, not credentials.
_SAFE_KEYS = frozenset({"tokens", "forwarded_tokens", "max_tokens", "event"})


@functools.lru_cache(maxsize=1024)
def _secret_key(key: str) -> bool:
    return key not in _SAFE_KEYS and _SECRET_KEYS.search(key) is not None


def _may_hold_secret(value: str) -> bool:
    # A scan for what every pattern of _SECRET_VALUES holds is cheaper than the full
    # search, and nearly every logged value holds none of it. (Substring tests: a
    # regex of these literals took 1.5-2x their time on a model name.)
    return (
        "sk-" in value
        or "earer" in value
        or "EARER" in value
        or "AKIA" in value
        or "gh" in value
        or "ithub_pat_" in value
    ) and _SECRET_VALUES.search(value) is not None


def scrub_secrets(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    for key, value in event.items():
        if value is None:
            continue
        if _secret_key(key):
            event[key] = "[redacted]"
        elif type(value) is str:
            if len(value) >= _SHORTEST_SECRET and _may_hold_secret(value):
                event[key] = _SECRET_VALUES.sub("[redacted]", value)
        elif type(value) not in _PLAIN:
            event[key] = _scrubbed(value)
    return event


def _scrubbed(value: Any) -> Any:
    """``value`` with every secret masked: containers walked (a key named like a secret
    masks its value), bytes read as text, other objects as text (``str``, as the JSON
    renderer would print them)."""
    if isinstance(value, str):
        if len(value) >= _SHORTEST_SECRET and _may_hold_secret(value):
            return _SECRET_VALUES.sub("[redacted]", value)
        return value
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, dict):
        return {
            _scrubbed(k): "[redacted]" if isinstance(k, str) and _secret_key(k) else _scrubbed(v)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple | set | frozenset):
        return [_scrubbed(v) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        return _scrubbed(bytes(value).decode("utf-8", "replace"))
    return _scrubbed(str(value))


_REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "handoff_request_id", default=None
)


def bind_request_id(request_id: str) -> None:
    """Tag every event logged from here on in this request's task with ``request_id``
    (aiohttp runs each request in a task of its own, so it never outlives the request)."""
    _REQUEST_ID.set(request_id)


def add_request_id(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    request_id = _REQUEST_ID.get()
    if request_id is not None:
        event.setdefault("request_id", request_id)
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


@dataclass(slots=True)
class _RequestEvents:
    json: bool = False
    enabled: bool = True
    stream: Any = None  # the binary stream the held lines go to
    loop: Any = None  # the event loop that will write them
    lines: list[bytes] = field(default_factory=list)
    held: int = 0  # bytes in ``lines``


FLUSH_EVERY_S = 0.05
"""Request lines are held at most this long before they are written."""
FLUSH_BYTES = 64 << 10


def _write_batched(line: bytes) -> None:
    """Hold a request line, and write all that are held in one write(2) within
    ``FLUSH_EVERY_S`` (or once ``FLUSH_BYTES`` are held). Non-interactive stderr
    is unbuffered (a raw file: every write is a system call), and a write per line
    cost a tenth of the proxy's CPU (bench/NOTES.md). Held lines are
    written at exit (``atexit``), so only a ``kill -9`` can lose the last ones.
    Outside a running loop, or to a text-only stream, a line is written at once."""
    stream = getattr(sys.stderr, "buffer", None)
    if stream is None:
        _Stderr().msg(line)
        return
    ev = _request_events
    if ev.stream is not stream or not ev.loop.is_running():
        # A first line, or held ones for a stream since replaced or a loop since stopped
        # (asyncio.get_running_loop() is a getpid(2) each time: not on every line).
        flush_request_lines()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            _write(stream, [line, b""])
            return
        ev.stream, ev.loop = stream, loop
        loop.call_later(FLUSH_EVERY_S, flush_request_lines)
    ev.lines.append(line)
    ev.held += len(line)
    if ev.held >= FLUSH_BYTES:
        flush_request_lines()


def flush_request_lines() -> None:
    """Write the held request lines now."""
    ev = _request_events
    stream, lines = ev.stream, ev.lines
    ev.stream, ev.loop, ev.lines, ev.held = None, None, [], 0
    if stream is not None and lines:
        lines.append(b"")
        _write(stream, lines)


def _write(stream: Any, lines: list[bytes]) -> None:
    with contextlib.suppress(OSError, ValueError):  # a closed or broken stream: drop
        stream.write(b"\n".join(lines))
        stream.flush()


_request_events = _RequestEvents()
_request_log = structlog.get_logger("handoff.app")


def log_request(request_id: str, fields: dict[str, Any]) -> None:
    """Log the canonical ``request`` event (one per request; ``fields`` is consumed).

    In JSON format the line is rendered here, exactly as the processor chain below
    would render it (same keys in the same order, same scrubbing): that chain costs
    a third of what a passthrough request adds to a bare forwarder (bench/NOTES.md).
    Every other event, and the console format, goes through structlog."""
    if not _request_events.enabled:
        return
    if not _request_events.json:
        _request_log.info("request", **fields)
        return
    clean = (
        fields.keys() <= _CLEAN_KEYS
        and _clean_values(fields.values())
        and not (len(request_id) >= _SHORTEST_SECRET and _may_hold_secret(request_id))
    )
    fields["event"] = "request"
    fields["request_id"] = request_id
    fields["level"] = "info"
    fields["timestamp"] = time.time()
    if not clean:
        scrub_secrets(None, "", fields)
        if len(_CLEAN_KEYS) < 1024:
            _CLEAN_KEYS.update(k for k in fields if not _secret_key(k))
    _write_batched(orjson.dumps(fields, default=str))


_CLEAN_KEYS: set[str] = set()
"""Field names seen and found not to name a secret."""
_CLEAN_VALUES: set[str] = set()
"""Field values seen and found to hold no secret. A request's path, model, upstream and
decision recur, so most requests find every value here: a set lookup each, instead
of scanning the rendered line for what starts a secret."""
_MAX_CLEAN_VALUES = 4096
_MAX_CLEAN_VALUE_LEN = 256


def _clean_values(values: Iterable[Any]) -> bool:
    """True when no value can hold a secret: numbers, and strings found to hold none."""
    for value in values:
        kind = type(value)
        if kind is str:
            if value in _CLEAN_VALUES:
                continue
            if len(value) >= _SHORTEST_SECRET and _may_hold_secret(value):
                return False
            if len(value) <= _MAX_CLEAN_VALUE_LEN and len(_CLEAN_VALUES) < _MAX_CLEAN_VALUES:
                _CLEAN_VALUES.add(value)
        elif kind not in _PLAIN:
            return False  # nested and other values: scrub_secrets checks them as JSON
    return True


class Throttled:
    """A warning logged at most once per ``every_s``, counting how often it happened since
    its last line: for what a client can cause many times a second (refused connections,
    failed accepts), where a line each time would flood the log."""

    __slots__ = ("_count", "_event", "_every_s", "_logger", "_next")

    def __init__(self, logger: Any, event: str, every_s: float) -> None:
        self._logger, self._event, self._every_s = logger, event, every_s
        self._next = float("-inf")
        self._count = 0

    def __call__(self, **fields: Any) -> None:
        self._count += 1
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self._every_s
        count, self._count = self._count, 0
        self._logger.warning(self._event, occurrences=count, **fields)


@dataclass(slots=True)
class _Setup:
    """What the last :func:`configure_logging` chose. The processors read it at each event,
    so loggers cached under an earlier configuration follow a later one."""

    level: int = logging.INFO
    stamper: structlog.typing.Processor = field(
        default_factory=lambda: structlog.processors.TimeStamper(fmt="iso", utc=True)
    )
    renderer: structlog.typing.Processor = field(
        default_factory=lambda: structlog.dev.ConsoleRenderer(colors=False)
    )


_setup = _Setup()
_LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "msg": logging.INFO,
    "warning": logging.WARNING,
    "warn": logging.WARNING,
    "error": logging.ERROR,
    "exception": logging.ERROR,
    "critical": logging.CRITICAL,
    "fatal": logging.CRITICAL,
}


def _by_level(_: Any, method: str, event: structlog.typing.EventDict) -> structlog.typing.EventDict:
    if _LEVELS.get(method, logging.INFO) < _setup.level:
        raise structlog.DropEvent
    return event


def _stamp(logger: Any, method: str, event: structlog.typing.EventDict) -> Any:
    return _setup.stamper(logger, method, event)


def _render(logger: Any, method: str, event: structlog.typing.EventDict) -> Any:
    return _setup.renderer(logger, method, event)


def configure_logging(
    fmt: Literal["console", "json"] = "console", level: int = logging.INFO
) -> None:
    """JSON lines via orjson (the request path logs once per request, so it must be
    cheap), or a readable console format. Loggers look sys.stderr up when created,
    never capture it once: it may be replaced (tests, daemonizers); and a later call
    changes what every logger does, cached ones too (``_Setup``)."""
    if fmt == "json":
        _setup.renderer = structlog.processors.JSONRenderer(serializer=_orjson_dumps)
        _setup.stamper = structlog.processors.TimeStamper(fmt=None, utc=True)  # unix: cheap
    else:
        _setup.renderer = structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        _setup.stamper = structlog.processors.TimeStamper(fmt="iso", utc=True)
    _setup.level = level
    _request_events.json = fmt == "json"
    atexit.unregister(flush_request_lines)  # (once, however often this is called)
    atexit.register(flush_request_lines)
    _request_events.enabled = level <= logging.INFO
    structlog.configure(
        processors=[
            _by_level,
            structlog.contextvars.merge_contextvars,
            add_request_id,
            structlog.processors.add_log_level,
            _stamp,
            structlog.processors.format_exc_info,  # a plain traceback, scrubbed like the rest
            scrub_secrets,
            _render,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
        logger_factory=_stderr,
        cache_logger_on_first_use=True,
    )
