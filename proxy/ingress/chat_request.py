"""The chat request shape, kept apart from any wire format.

Chat Completions is today's only ingress; Anthropic Messages and OpenAI Responses
will parse into the same shape. A message is a plain JSON object (``dict``) so that
unknown fields (``reasoning_content``, ``refusal``, provider extras) pass through
untouched; nothing here mutates one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.ingress.incremental_parse import Resends

Message = Mapping[str, Any]
Messages = Sequence[Message]


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A chat request: the model, its messages, and every other field as it came.

    ``body`` is the parsed JSON object; ``raw`` the exact bytes received, which go
    upstream unchanged when nothing is rewritten.
    """

    model: str
    messages: tuple[Message, ...]
    body: Mapping[str, Any]
    raw: bytes = field(repr=False, default=b"")
    resends: Resends | None = field(repr=False, default=None, compare=False)
    """The earlier body ``raw`` was found to repeat while parsing, and for how many bytes."""

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def tools(self) -> Sequence[Mapping[str, Any]]:
        tools = self.body.get("tools") or self.body.get("functions") or ()
        return tools if isinstance(tools, list) else ()

    def with_messages(self, messages: Messages) -> ChatRequest:
        """A new request with ``messages`` replaced and every other field untouched."""
        body = dict(self.body)
        body["messages"] = list(messages)
        return ChatRequest(model=self.model, messages=tuple(messages), body=body, raw=b"")
