"""The canonical request event: rendered directly in JSON, identical to structlog's line."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator

import aiohttp
import pytest
import structlog
import structlog.testing

from proxy.decide.unknown_models import UnknownModels
from proxy.log import (
    _CLEAN_KEYS,
    _CLEAN_VALUES,
    FLUSH_EVERY_S,
    Throttled,
    _clean_values,
    configure_logging,
    flush_request_lines,
    log_request,
)
from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream


@pytest.fixture
def json_logs() -> Iterator[None]:
    configure_logging("json")
    yield
    configure_logging("console")


def _fields() -> dict[str, object]:
    return {
        "method": "POST",
        "path": "/v1/chat/completions",
        "model": "gpt-4o-mini",
        "stream": False,
        "bytes_out": 512,
        "status": 200,
        "latency_ms": 1.25,
    }


def _lines(err: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in err.splitlines() if line.strip()]


def test_fast_request_line_matches_structlog(
    json_logs: None, capsys: pytest.CaptureFixture[str]
) -> None:
    structlog.contextvars.bind_contextvars(request_id="req-1")
    try:
        structlog.get_logger("handoff.app").info("request", **_fields())
        log_request("req-1", _fields())
    finally:
        structlog.contextvars.unbind_contextvars("request_id")
    slow, fast = _lines(capsys.readouterr().err)
    assert list(fast) == list(slow)  # same keys, same order
    assert {**fast, "timestamp": 0} == {**slow, "timestamp": 0}
    assert isinstance(fast["timestamp"], float)


def test_fast_request_line_scrubs_secrets(
    json_logs: None, capsys: pytest.CaptureFixture[str]
) -> None:
    fields = {**_fields(), "model": "sk-live-abcdefghijklmnop", "api_key": "hunter2"}
    log_request("req-2", fields)
    err = capsys.readouterr().err
    assert "sk-live-abcdefghijklmnop" not in err and "hunter2" not in err
    (line,) = _lines(err)
    assert line["model"] == "[redacted]" and line["api_key"] == "[redacted]"


def test_request_events_follow_the_level(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("json", logging.WARNING)
    try:
        log_request("req-3", _fields())
    finally:
        configure_logging("console")
    assert capsys.readouterr().err == ""


def test_console_request_line_goes_through_structlog(
    capsys: pytest.CaptureFixture[str],
) -> None:
    configure_logging("console")
    log_request("req-4", _fields())
    err = capsys.readouterr().err
    assert "request" in err and "gpt-4o-mini" in err and "latency_ms" in err


class _CountingBuffer:
    def __init__(self) -> None:
        self.data = b""
        self.writes = 0
        self.flushes = 0

    def write(self, b: bytes) -> int:
        self.data += b
        self.writes += 1
        return len(b)

    def flush(self) -> None:
        self.flushes += 1


class _Stream:
    def __init__(self) -> None:
        self.buffer = _CountingBuffer()


async def test_request_lines_are_written_together_within_the_flush_interval(
    json_logs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Request lines are held and written together, one write(2) for all the lines
    of ``FLUSH_EVERY_S``, not one per request."""
    stream = _Stream()
    monkeypatch.setattr("sys.stderr", stream)
    for i in range(5):
        log_request(f"req-{i}", _fields())
    await asyncio.sleep(0)
    assert stream.buffer.writes == 0
    await asyncio.sleep(FLUSH_EVERY_S * 1.5)
    assert stream.buffer.writes == 1 and stream.buffer.data.count(b"\n") == 5
    log_request("req-5", _fields())
    flush_request_lines()  # at exit
    assert stream.buffer.writes == 2 and stream.buffer.data.count(b"\n") == 6
    assert [json.loads(x)["request_id"] for x in stream.buffer.data.splitlines()] == [
        f"req-{i}" for i in range(6)
    ]


def test_request_lines_outside_a_loop_are_flushed_at_once(
    json_logs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    stream = _Stream()
    monkeypatch.setattr("sys.stderr", stream)
    log_request("req-1", _fields())
    log_request("req-2", _fields())
    assert stream.buffer.flushes == 2


@pytest.mark.parametrize(
    "value",
    [
        "Bearer\tsk-abcdefghijkl",  # whitespace JSON escapes
        "Bearer abcdefghijkl.mnop",
        "AKIAABCDEFGHIJKLMNOP",
        "ghp_" + "a" * 24,
        "sk-proj-abcdefgh",
    ],
)
def test_a_secret_is_scrubbed_however_many_clean_lines_came_before(
    json_logs: None, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    """Clean lines take the fast way; a line holding a secret value, or a new field
    named like one, is scrubbed all the same."""
    for i in range(3):
        log_request(f"req-{i}", _fields())
    log_request("req-x", {**_fields(), "upstream": value})
    log_request("req-y", {**_fields(), "x_api_key": "short"})
    flush_request_lines()
    err = capsys.readouterr().err
    assert value not in err and "short" not in err
    *clean, secret, named = _lines(err)
    assert [c["model"] for c in clean] == ["gpt-4o-mini"] * 3
    assert "[redacted]" in str(secret["upstream"]) and named["x_api_key"] == "[redacted]"


def test_an_ordinary_request_line_takes_the_fast_way(json_logs: None) -> None:
    """The fast way is the common way: after the first requests (which teach the field
    names, then the values), every value of the next like them is known clean
    ("passthrough" holds "gh", but no GitHub token prefix)."""
    fields = {**_fields(), "decision": "passthrough"}
    log_request("0af3", dict(fields))
    log_request("0af4", dict(fields))
    assert fields.keys() <= _CLEAN_KEYS
    assert all(v in _CLEAN_VALUES for v in fields.values() if isinstance(v, str))
    assert _clean_values(fields.values())
    assert not _clean_values([*fields.values(), "sk-proj-abcdefghij"])


def test_secrets_in_nested_values_and_request_ids_are_scrubbed(
    json_logs: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """A secret inside a list or dict field, or in a client's x-request-id, never reaches
    the log, however many clean lines came before."""
    for i in range(3):
        log_request(f"req-{i}", _fields())
    log_request("req-n", {**_fields(), "detail": {"auth": ["Bearer abcdefghijkl.mnop"]}})
    log_request("Bearer abcdefghijklmnop", _fields())
    flush_request_lines()
    err = capsys.readouterr().err
    assert "abcdefghijkl" not in err
    *_, nested, rid = _lines(err)
    assert "[redacted]" in str(nested["detail"]) and rid["request_id"] == "[redacted]"


def test_throttled_logs_once_an_interval_with_a_count() -> None:
    """A throttled warning is logged the first time, then not again until its interval
    has passed, and then with how often it happened meanwhile."""
    logger = structlog.get_logger("test")
    warn = Throttled(logger, "flood", every_s=0.2)
    with structlog.testing.capture_logs() as logs:
        for _ in range(50):
            warn(what="x")
        time.sleep(0.25)
        warn(what="y")
    assert [(e["event"], e["occurrences"], e["what"]) for e in logs] == [
        ("flood", 1, "x"),
        ("flood", 50, "y"),
    ]


async def test_unknown_model_names_are_warned_about_a_few_then_counted(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, capsys: pytest.CaptureFixture[str]
) -> None:
    """Model names come from clients: 60 distinct unknown ones write the first few
    warnings, each naming its model, and then one summary line, not 60 lines."""
    proxy = await make_proxy(fake_upstream.url, tokens={"discover": False})
    capsys.readouterr()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
        for i in range(60):
            body = {
                "model": f"no-such-model-{i % 50}",
                "messages": [{"role": "user", "content": "hi"}],
            }
            async with s.post(proxy.url + "/chat/completions", json=body) as r:
                await r.read()
    err = capsys.readouterr().err.splitlines()
    named = [ln for ln in err if "unknown_model_window " in ln]
    summaries = [ln for ln in err if "unknown_model_windows " in ln]
    assert len(named) == UnknownModels.FIRST and "no-such-model-0" in named[0]
    assert len(summaries) == 1 and "new_names=1" in summaries[0]


def test_unknown_model_summaries_come_at_most_every_period(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """After the first names, a new name is counted, and the count logged when a new name
    comes a period after the last summary; a name seen before is never counted again."""
    now = [0.0]
    models = UnknownModels(first=2, every_s=60.0, clock=lambda: now[0])
    for name in ["a", "b", "a", "c", "d", "c", "e"]:
        models.saw(name)
    now[0] = 61.0
    models.saw("f")
    models.saw("b")
    err = capsys.readouterr().err.splitlines()
    assert sum("unknown_model_window " in ln for ln in err) == 2
    summaries = [ln for ln in err if "unknown_model_windows " in ln]
    assert len(summaries) == 2
    assert "new_names=1" in summaries[0] and "total_names=3" in summaries[0]  # c
    assert "new_names=3" in summaries[1] and "total_names=6" in summaries[1]  # d, e, f


KEY_SHAPED = [
    "sk-proj-Abc123Def456Ghi789Jkl012",
    "sk-ant-api03-Abc123Def456Ghi789",
    "github_pat_11ABCDEFG0123456789_abcdefghij",
    "ghp_0123456789abcdefghijABCDEFGHIJ012345",
    "AKIAIOSFODNN7EXAMPLE",
    "bearer abcdefghijkl.mnop",
]


def _raise_with_a_key_around() -> None:
    api_key = "canaryLOCAL-1234567890"  # a local a traceback renderer could show
    raise ValueError(f"upstream said no to {KEY_SHAPED[0]} ({len(api_key)})")


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_the_scrubber_covers_every_field(fmt: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Whatever a careless log call passes: a key-shaped value of any recognised kind, in
    any field, nested or not, as text or bytes or an object; a nested field named like a
    secret; an exception's message and its traceback (never its locals)."""
    configure_logging(fmt)  # type: ignore[arg-type]
    try:
        log = structlog.get_logger("handoff.test")
        for i, key in enumerate(KEY_SHAPED):
            log.warning(f"leak_{i}", model=key, nested={"deep": [key]}, raw=key.encode())
        log.warning("headers", headers={"api-key": "canaryAPIKEY-3e8a55b6c1", "x-trace": "ok"})
        log.warning("object", value=ValueError(KEY_SHAPED[0]))
        try:
            _raise_with_a_key_around()
        except ValueError as e:
            log.exception("internal_error", exc_info=e)
    finally:
        configure_logging("console")
    err = capsys.readouterr().err
    for secret in [*KEY_SHAPED, "canaryAPIKEY", "canaryLOCAL", "abcdefghijkl.mnop"]:
        assert secret not in err, secret
    assert "_raise_with_a_key_around" in err and "ValueError" in err  # the traceback is there
    assert "x-trace" in err and "ok" in err


def test_a_logger_cached_under_one_configuration_follows_the_next(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A module's logger first used while info events were off (the demo) still logs them,
    in the new format, once logging is configured again (serve, a later test)."""
    log = structlog.get_logger("tests.cached")
    configure_logging("console", logging.WARNING)
    log.info("hidden_event")
    configure_logging("json")
    log.info("shown_event", n=1)
    err = capsys.readouterr().err
    assert "hidden_event" not in err
    (line,) = [ln for ln in err.splitlines() if "shown_event" in ln]
    assert json.loads(line)["n"] == 1
    configure_logging("console")
