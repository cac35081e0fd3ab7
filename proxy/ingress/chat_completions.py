"""Chat Completions wire format → :class:`ChatRequest`, with OpenAI-style 400s.

Only what handoff must understand to count and compress is checked: a JSON object
with a string ``model`` and a ``messages`` list of objects with a string ``role``.
Everything else is the upstream's to judge, so it passes through untouched, with
one exception: JSON nested deeper than orjson can write back (:data:`MAX_DEPTH`) is
refused, because handoff could neither snapshot nor rewrite it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from proxy.errors import InvalidRequest
from proxy.ingress.chat_request import ChatRequest
from proxy.ingress.incremental_parse import Resends, ResentBodies

_CONTENT_TYPES = (str, list, type(None))
MAX_DEPTH = 254
"""orjson reads 1024 levels but writes only 254; a deeper body cannot be stored."""


Check = Callable[[dict[str, Any], int], None]
"""Refuses a parsed body by raising; the ``int`` leading messages were reused from a body
that passed before, so only the ``messages`` the parsed body holds are to be checked,
numbered from there."""


def parse_json_object(
    raw: bytes, bodies: ResentBodies | None = None, check: Check | None = None
) -> tuple[dict[str, Any], Resends | None]:
    """The JSON object in ``raw``, passed by ``check``, and the earlier body ``raw`` was
    found to repeat: ``bodies`` reuses the messages of a body it resends (and remembers
    only bodies that passed)."""

    def checked(doc: Any, reused: int) -> None:
        _check_object(doc)
        if check is not None:
            check(doc, reused)

    if not raw.strip():
        raise InvalidRequest(
            "The request body is empty; send a JSON object (Content-Type: application/json)."
        )
    resends = None
    try:
        if bodies is not None:
            body, resends = bodies.parse_resending(raw, check=checked)
        else:
            body = orjson.loads(raw)
            checked(body, 0)
    except orjson.JSONDecodeError as e:
        raise InvalidRequest(
            f"The request body is not valid JSON ({e}). "
            "Send a JSON object encoded as UTF-8 (Content-Type: application/json)."
        ) from None
    return body, resends


def _check_object(body: Any) -> None:
    if not isinstance(body, dict):
        raise InvalidRequest(
            f"The request body must be a JSON object, not a JSON {type(body).__name__}."
        )
    _check_depth(body)


def _check_depth(body: dict[str, Any]) -> None:
    """Refuse what the store and the rewriter could not serialise (orjson finds out in
    C, far cheaper than a Python walk over the parsed tree)."""
    try:
        orjson.dumps(body)
    except orjson.JSONEncodeError:
        raise InvalidRequest(
            f"The request body nests arrays or objects more than {MAX_DEPTH} levels deep; "
            "handoff cannot record or rewrite JSON that deep."
        ) from None


def parse_chat(raw: bytes, bodies: ResentBodies | None = None) -> ChatRequest:
    body, resends = parse_json_object(raw, bodies, _check_chat)
    return ChatRequest(
        model=body["model"], messages=tuple(body["messages"]), body=body, raw=raw, resends=resends
    )


def _check_chat(body: dict[str, Any], reused: int) -> None:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest(
            "you must provide a model parameter (a non-empty string)", param="model"
        )
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise InvalidRequest(
            "'messages' is a required property and must be an array of message objects",
            param="messages",
        )
    for i, msg in enumerate(messages, reused):
        if type(msg) is not dict or not _plain_message(msg):
            _check_message(i, msg)


def _plain_message(msg: dict[str, Any]) -> bool:
    """The common case, checked fast: a string role, string or null content, no calls."""
    return (
        type(msg.get("role")) is str
        and type(msg.get("content", "")) in (str, type(None))
        and msg.get("tool_calls") is None
    )


def _check_message(i: int, msg: Any) -> None:
    where = f"messages[{i}]"
    if not isinstance(msg, dict):
        raise InvalidRequest(
            f"Invalid type for '{where}': expected an object, got {type(msg).__name__}.",
            param=where,
        )
    role = msg.get("role")
    if not isinstance(role, str):
        raise InvalidRequest(
            f"Missing required parameter: '{where}.role' (a string such as 'user').",
            param=f"{where}.role",
        )
    content = msg.get("content")
    if not isinstance(content, _CONTENT_TYPES):
        raise InvalidRequest(
            f"Invalid type for '{where}.content': expected a string or an array of "
            f"content parts, got {type(content).__name__}.",
            param=f"{where}.content",
        )
    if isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, dict):
                raise InvalidRequest(
                    f"Invalid type for '{where}.content[{j}]': expected an object, "
                    f"got {type(part).__name__}.",
                    param=f"{where}.content[{j}]",
                )
    tool_calls = msg.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise InvalidRequest(
            f"Invalid type for '{where}.tool_calls': expected an array.",
            param=f"{where}.tool_calls",
        )
