"""The wire formats handoff speaks, each bundled from its rooms: how a request is parsed
and written back (``ingress``), how an answer is read and a stream reassembled and what
an overflow looks like (``upstream``), and the shape of handoff's own errors on its route.

The exchange (:mod:`proxy.server.exchange`) is the same for every format; a request
whose format handoff does not know is relayed as it is (:mod:`proxy.server.relay`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from proxy.errors import ErrorShape, anthropic_shape, openai_shape
from proxy.ingress.anthropic_messages import parse_messages
from proxy.ingress.chat_completions import parse_chat
from proxy.ingress.chat_request import ChatRequest
from proxy.ingress.incremental_parse import ResentBodies
from proxy.upstream.anthropic_stream import MessageAssembler, overflow_limit, read_message
from proxy.upstream.overflow import context_limit
from proxy.upstream.sse import ReplyAssembler, read_answer

Answer = tuple[dict[str, Any] | None, str | None, dict[str, Any] | None, dict[str, Any] | None]
"""What an answer says: the reply (an assistant message), finish reason, usage, error."""


class Assembler(Protocol):
    """A tee that reassembles a streamed answer from its bytes as they are relayed."""

    @property
    def usage(self) -> Mapping[str, Any] | None: ...

    @property
    def finish_reason(self) -> str | None: ...

    @property
    def error(self) -> Mapping[str, Any] | None: ...

    def feed(self, data: bytes) -> None: ...

    def reply(self) -> dict[str, Any] | None: ...


@dataclass(frozen=True, slots=True)
class WireFormat:
    """What the exchange needs of one wire format."""

    name: str
    route: str
    """The route's canonical path, for metrics and logs."""
    upstream_path: str
    """Where on the upstream (below its base URL) the request goes."""
    parse: Callable[[bytes, ResentBodies | None], ChatRequest]
    assembler: Callable[[], Assembler]
    read_answer: Callable[[int, bytes], Answer]
    context_limit: Callable[[int, bytes], int | None]
    """The window an overflow answer names (0: unnamed), None when it is not one."""
    error_shape: ErrorShape = openai_shape
    upstream_kind: str = "openai"
    """Which upstreams (``[[upstreams]] kind``) requests in this format are routed to."""
    session_header: str | None = None
    """A header the format's clients name their session in (threads the store's turns)."""


CHAT = WireFormat(
    name="chat",
    route="/v1/chat/completions",
    upstream_path="/chat/completions",
    parse=parse_chat,
    assembler=ReplyAssembler,
    read_answer=read_answer,
    context_limit=context_limit,
)

ANTHROPIC = WireFormat(
    name="anthropic",
    route="/v1/messages",
    upstream_path="/messages",
    parse=parse_messages,
    assembler=MessageAssembler,
    read_answer=read_message,
    context_limit=overflow_limit,
    error_shape=anthropic_shape,
    upstream_kind="anthropic",
    session_header="x-claude-code-session-id",
)
"""Anthropic Messages (``POST /v1/messages``), routed to ``kind = "anthropic"`` upstreams."""
