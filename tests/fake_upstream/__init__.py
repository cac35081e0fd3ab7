"""A strict fake of the OpenAI API, served on loopback, for tests, benchmarks and the demo.

It answers ``/v1/chat/completions`` the way OpenAI does where a proxy can get things
wrong: it rejects bad bodies, orphaned tool messages and over-long prompts with
OpenAI's error bodies, and it streams real SSE. It records every request byte for byte,
notices clients that go away, and injects faults on demand, so that a proxy bug shows
up as a test failure rather than as a quietly accepted request.

Pure parts are plain functions, one module each: ``errors`` (error bodies in each
upstream's dialect), ``validation`` (what it refuses), ``replies`` (its token estimate,
completions, SSE events); ``server`` holds :class:`FakeUpstream`, the state and the
``web.Application``; ``standalone`` serves one outside pytest
(``python -m tests.fake_upstream``).
"""

from tests.fake_upstream.constants import DEFAULT_MODELS, NOT_JSON_BODY, ROLES
from tests.fake_upstream.errors import ApiError, context_error, model_not_found, openai_error
from tests.fake_upstream.replies import (
    authorization_fingerprint,
    build_completion,
    estimate_tokens,
    sse,
    stream_events,
)
from tests.fake_upstream.server import FakeUpstream, Fault, FaultKind, RecordedRequest
from tests.fake_upstream.standalone import free_port, main, running, serve
from tests.fake_upstream.validation import check_tool_pairing, validate_chat

__all__ = [
    "DEFAULT_MODELS",
    "NOT_JSON_BODY",
    "ROLES",
    "ApiError",
    "FakeUpstream",
    "Fault",
    "FaultKind",
    "RecordedRequest",
    "authorization_fingerprint",
    "build_completion",
    "check_tool_pairing",
    "context_error",
    "estimate_tokens",
    "free_port",
    "main",
    "model_not_found",
    "openai_error",
    "running",
    "serve",
    "sse",
    "stream_events",
    "validate_chat",
]
