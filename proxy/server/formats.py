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

from proxy.decide.decision import Decision
from proxy.decide.plan import Plan
from proxy.errors import ErrorShape, anthropic_shape, openai_shape
from proxy.ingress.anthropic_messages import parse_messages
from proxy.ingress.chat_completions import parse_chat
from proxy.ingress.chat_request import ChatRequest
from proxy.ingress.incremental_parse import ResentBodies
from proxy.ingress.responses_api import parse_responses
from proxy.upstream import responses_stream
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

    @property
    def complete(self) -> bool:
        """Whether the answer's end has arrived: a client that leaves after it has had
        its whole turn."""
        ...

    def feed(self, data: bytes) -> None: ...

    def reply(self) -> dict[str, Any] | None: ...

    def choices(self) -> list[dict[str, Any]] | None:
        """Every choice (index, message, finish_reason) when there were several."""


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
    own_plan: Callable[[ChatRequest], Plan | None] | None = None
    """A plan the format makes itself for a request handoff must not rewrite (None from
    it: ask the planner)."""
    history_key: str = "messages"
    """The body's member holding the history a client resends (for :class:`ResentBodies`)."""
    upstream_kind: str = "openai"
    """Which upstreams (``[[upstreams]] kind``) requests in this format are routed to."""


CHAT = WireFormat(
    name="chat",
    route="/v1/chat/completions",
    upstream_path="/chat/completions",
    parse=parse_chat,
    assembler=ReplyAssembler,
    read_answer=read_answer,
    context_limit=context_limit,
)


def stateful_plan(req: ChatRequest) -> Plan | None:
    """A Responses request that continues a stored response (``previous_response_id``):
    the upstream holds the history, so handoff can neither count nor compress it, and
    forwards the request as it came, saying so in ``x-handoff-decision: stateful``."""
    if req.params is None or not req.params.get("previous_response_id"):
        return None
    return Plan(
        body=req.raw,
        decision=Decision(action="stateful", exact=False),
        headers={"x-handoff-decision": "stateful"},
    )


RESPONSES = WireFormat(
    name="responses",
    route="/v1/responses",
    upstream_path="/responses",
    parse=parse_responses,
    assembler=responses_stream.ResponsesAssembler,
    read_answer=responses_stream.read_answer,
    context_limit=responses_stream.context_limit,
    own_plan=stateful_plan,
    history_key="input",
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
)
"""Anthropic Messages (``POST /v1/messages``), routed to ``kind = "anthropic"`` upstreams."""
