"""The wire-neutral request: what every wire format parses into, and how it is written back.

A message is a Chat Completions message, a plain JSON object (``dict``), so that
unknown fields (``reasoning_content``, ``refusal``, provider extras) pass through
untouched; nothing here mutates one. A wire format other than Chat Completions
parses its request into these messages and a chat-shaped ``body`` (what counting and
the budget read: ``tools``, ``max_tokens``…), and gives the request a ``render`` that
writes compressed messages back in its own shape, the client's items untouched where
a message was not rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

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
    render: Render | None = field(repr=False, default=None, compare=False)
    """Writes compressed messages back in the request's wire format (None: Chat
    Completions, ``body`` with its messages replaced)."""
    params: Mapping[str, Any] | None = field(repr=False, default=None, compare=False)
    """What the store records besides the messages, when the wire format is not Chat
    Completions (its own fields as sent, but for the ones the messages show); None:
    ``body``'s other fields."""

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def tools(self) -> Sequence[Mapping[str, Any]]:
        tools = self.body.get("tools") or self.body.get("functions") or ()
        return tools if isinstance(tools, list) else ()

    def rendered(self, messages: Messages, origins: Sequence[int | None]) -> bytes:
        """The body to send with ``messages`` in place of the client's: ``origins`` names
        the client's message each one shows (None for one handoff wrote)."""
        if self.render is not None:
            return self.render(self, messages, origins)
        body = dict(self.body)
        body["messages"] = list(messages)
        return orjson.dumps(body)


Render = Callable[[ChatRequest, Messages, Sequence[int | None]], bytes]
"""A wire format's writer: the request, the messages to send, and their origins."""
