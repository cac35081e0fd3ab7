"""What the fake refuses, as OpenAI does: bad bodies, bad messages, tool calls left unanswered."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tests.fake_upstream.constants import JSON, ROLES
from tests.fake_upstream.errors import ApiError, openai_error


def _type_name(value: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a decimal", str: "a string"}
    names |= {list: "an array", dict: "an object", type(None): "null"}
    return names.get(type(value), "an unknown type")


def _invalid_type(param: str, expected: str, value: Any) -> ApiError:
    message = (
        f"Invalid type for '{param}': expected {expected}, but got {_type_name(value)} instead."
    )
    return openai_error(message, param=param, code="invalid_type")


def _missing(param: str) -> ApiError:
    message = f"Missing required parameter: '{param}'."
    return openai_error(message, param=param, code="missing_required_parameter")


def _check_message(i: int, message: Any) -> None:
    where = f"messages[{i}]"
    if not isinstance(message, dict):
        raise _invalid_type(where, "an object", message)
    if "role" not in message:
        raise _missing(f"{where}.role")
    role = message["role"]
    if role not in ROLES:
        allowed = ", ".join(f"'{r}'" for r in ROLES[:-1]) + f", and '{ROLES[-1]}'"
        message_ = f"Invalid value: '{role}'. Supported values are: {allowed}."
        raise openai_error(message_, param=f"{where}.role", code="invalid_value")
    optional = role == "assistant" or (role == "function" and "content" in message)
    if "content" not in message:
        if not optional:
            raise _missing(f"{where}.content")
        return
    content = message["content"]
    if content is None and optional:
        return
    expected = "one of a string or array of objects"
    if isinstance(content, list):
        for j, part in enumerate(content):
            if not isinstance(part, dict) or "type" not in part:
                raise _invalid_type(f"{where}.content[{j}]", "an object with a 'type'", part)
            if part["type"] == "text" and not isinstance(part.get("text"), str):
                raise _invalid_type(f"{where}.content[{j}].text", "a string", part.get("text"))
    elif not isinstance(content, str):
        raise _invalid_type(f"{where}.content", expected, content)
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise _missing(f"{where}.tool_call_id")


def _call_ids(message: Mapping[str, Any]) -> list[str]:
    calls = message.get("tool_calls") if message.get("role") == "assistant" else None
    if not isinstance(calls, list):
        return []
    return [c["id"] for c in calls if isinstance(c, dict) and isinstance(c.get("id"), str)]


def _unanswered(at: int, missing: Sequence[str]) -> ApiError:
    message = (
        "An assistant message with 'tool_calls' must be followed by tool messages responding "
        "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
        + ", ".join(missing)
    )
    return openai_error(message, param=f"messages.[{at}].role")


def check_tool_pairing(messages: Sequence[Mapping[str, Any]]) -> None:
    """Raise OpenAI's error when a tool message is orphaned or a tool call unanswered."""
    open_at, pending = -1, list[str]()
    for i, message in enumerate(messages):
        if message.get("role") == "tool":
            call_id = message.get("tool_call_id")
            if open_at < 0:
                text = (
                    "Invalid parameter: messages with role 'tool' must be a response to a "
                    "preceeding message with 'tool_calls'."
                )
                raise openai_error(text, param=f"messages.[{i}].role")
            if call_id not in _call_ids(messages[open_at]):
                text = (
                    f"Invalid parameter: 'tool_call_id' of '{call_id}' not found in "
                    "'tool_calls' of previous message."
                )
                raise openai_error(text, param=f"messages.[{i}].tool_call_id")
            pending = [p for p in pending if p != call_id]
            continue
        if pending:
            raise _unanswered(open_at, pending)
        pending = _call_ids(message)
        open_at = i if pending else -1
    if pending:
        raise _unanswered(open_at, pending)


MAX_N = 128
"""OpenAI's bound on ``n`` (choices per request)."""


def validate_chat(body: Any) -> JSON:
    """Return the body if OpenAI would accept it, else raise its ``ApiError``."""
    if not isinstance(body, dict):
        raise _invalid_type("body", "an object", body)
    if not body.get("model"):
        raise openai_error("you must provide a model parameter")
    if "messages" not in body:
        raise _missing("messages")
    messages = body["messages"]
    if not isinstance(messages, list):
        raise _invalid_type("messages", "an array", messages)
    if not messages:
        text = (
            "Invalid 'messages': empty array. Expected an array with minimum length 1, "
            "but got an empty array instead."
        )
        raise openai_error(text, param="messages", code="empty_array")
    for i, message in enumerate(messages):
        _check_message(i, message)
    check_tool_pairing(messages)
    n = body.get("n")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool)):
        raise _invalid_type("n", "an integer", n)
    if isinstance(n, int) and not 1 <= n <= MAX_N:
        side, bound = ("above maximum", f"<= {MAX_N}") if n > MAX_N else ("below minimum", ">= 1")
        text = f"Invalid 'n': integer {side} value. Expected a value {bound}, but got {n} instead."
        code = "integer_above_max_value" if n > MAX_N else "integer_below_min_value"
        raise openai_error(text, param="n", code=code)
    if body.get("stream_options") is not None and body.get("stream") is not True:
        text = "The 'stream_options' parameter is only allowed when 'stream' is enabled."
        raise openai_error(text, param="stream_options")
    if body.get("stream_options") is not None and not isinstance(body["stream_options"], dict):
        raise _invalid_type("stream_options", "an object", body["stream_options"])
    return body
