"""A strict fake of the OpenAI API, served on loopback, for tests, benchmarks and the demo.

It answers ``/v1/chat/completions`` the way OpenAI does where a proxy can get things
wrong: it rejects bad bodies, orphaned tool messages and over-long prompts with
OpenAI's error bodies, and it streams real SSE. It records every request byte for byte,
notices clients that go away, and injects faults on demand, so that a proxy bug shows
up as a test failure rather than as a quietly accepted request.

Pure parts (validation, token estimate, replies, error bodies) are plain functions;
``FakeUpstream`` holds the state and builds the ``web.Application``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import re
import socket
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

JSON = dict[str, Any]
CountTokens = Callable[[Mapping[str, Any]], int]
ContextErrorStyle = Literal["openai", "llamacpp", "vllm", "ollama"]

DEFAULT_MODELS: Mapping[str, int] = {
    "gpt-4o-mini": 128_000,
    "gpt-4o": 128_000,
    "small-8k": 8192,
    "mid-32k": 32_768,
    "big-1m": 1_000_000,
}
DEFAULT_CONTEXT_WINDOW = 128_000
FINGERPRINT = "fp_fake0001"
ROLES = ("system", "assistant", "user", "function", "tool", "developer")
CREATED = 1_700_000_000
NOT_JSON_BODY = b"<html><body><h1>502 Bad Gateway</h1></body></html>"


# ---------------------------------------------------------------- errors


@dataclass
class ApiError(Exception):
    """An error answer: status and JSON body, shaped like the upstream it imitates."""

    status: int
    body: JSON
    headers: Mapping[str, str] = field(default_factory=dict)


def openai_error(
    message: str,
    *,
    status: int = 400,
    type_: str = "invalid_request_error",
    param: str | None = None,
    code: str | None = None,
) -> ApiError:
    """OpenAI's error body: ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return ApiError(status, body)


def context_error(
    style: ContextErrorStyle, window: int, prompt: int, completion: int = 0
) -> ApiError:
    """A context-length error in the dialect of one server (texts as those servers send)."""
    total = prompt + completion
    if style == "llamacpp":
        message = (
            f"request ({total} tokens) exceeds the available context size "
            f"({window} tokens), try increasing it"
        )
        error = {"code": 400, "message": message, "type": "exceed_context_size_error"}
        return ApiError(400, {"error": {**error, "n_prompt_tokens": total, "n_ctx": window}})
    if style == "vllm":
        message = (
            f"This model's maximum context length is {window} tokens. However, you "
            f"requested {total} tokens ({prompt} in the messages, {completion} in the "
            "completion). Please reduce the length of the messages or completion."
        )
        body = {"object": "error", "message": message, "type": "BadRequestError"}
        return ApiError(400, {**body, "param": None, "code": 400})
    if style == "ollama":
        return openai_error("the input length exceeds the context length")
    if completion:
        tail = (
            f"you requested {total} tokens ({prompt} in the messages, {completion} in the "
            "completion). Please reduce the length of the messages or completion."
        )
    else:
        tail = (
            f"your messages resulted in {prompt} tokens. Please reduce the length of the messages."
        )
    message = f"This model's maximum context length is {window} tokens. However, {tail}"
    return openai_error(message, param="messages", code="context_length_exceeded")


def model_not_found(model: str) -> ApiError:
    """OpenAI's 404 for a model it does not serve."""
    message = f"The model `{model}` does not exist or you do not have access to it."
    return openai_error(message, status=404, code="model_not_found")


# ---------------------------------------------------------------- validation


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


# ---------------------------------------------------------------- tokens and replies


def content_text(content: Any) -> str:
    """The text of a message's content, whether a string or an array of parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def estimate_tokens(body: Mapping[str, Any]) -> int:
    """A deterministic prompt-token estimate: OpenAI's per-message overhead plus bytes/4."""
    total = 3
    for message in body.get("messages", ()):
        text = content_text(message.get("content")) + json.dumps(message.get("tool_calls") or "")
        total += 4 + len(text.encode()) // 4
    if body.get("tools"):
        total += len(json.dumps(body["tools"]).encode()) // 4
    return total


def completion_tokens(text: str) -> int:
    """Tokens of generated text, by the same bytes/4 rule."""
    return max(1, len(text.encode()) // 4)


def requested_completion(body: Mapping[str, Any]) -> int:
    """The completion budget the request reserves (``max_completion_tokens`` first)."""
    value = body.get("max_completion_tokens", body.get("max_tokens"))
    return value if isinstance(value, int) and value > 0 else 0


def _last_user_text(messages: Sequence[Mapping[str, Any]]) -> str:
    users = [content_text(m.get("content")) for m in messages if m.get("role") == "user"]
    return users[-1] if users else ""


def _tool_to_call(body: Mapping[str, Any], trigger: str) -> JSON | None:
    tools = [t for t in body.get("tools") or () if isinstance(t, dict) and "function" in t]
    choice = body.get("tool_choice", "auto")
    if not tools or choice == "none":
        return None
    if isinstance(choice, dict):
        wanted = choice.get("function", {}).get("name")
        return next((t["function"] for t in tools if t["function"].get("name") == wanted), None)
    last = body["messages"][-1]
    said = re.search(rf"\b{re.escape(trigger)}\b", content_text(last.get("content")), re.I)
    return (
        tools[0]["function"] if choice == "required" or (last["role"] == "user" and said) else None
    )


def _arguments(function: Mapping[str, Any], text: str) -> str:
    props = function.get("parameters", {}).get("properties", {})
    samples = {"string": text[:40], "integer": 1, "number": 1.5, "boolean": True}
    return json.dumps({k: samples.get(v.get("type")) for k, v in props.items()})


def build_completion(body: Mapping[str, Any], prompt_tokens: int, trigger: str = "tool") -> JSON:
    """A deterministic ``chat.completion`` for a valid request: an echo, or a tool call."""
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    text = "Echo: " + _last_user_text(body["messages"])[:200]
    function, finish = _tool_to_call(body, trigger), "stop"
    message: JSON = {"role": "assistant", "content": text, "refusal": None, "annotations": []}
    if function is not None:
        call = {"name": function["name"], "arguments": _arguments(function, text)}
        message |= {
            "content": None,
            "tool_calls": [{"id": f"call_{digest[:24]}", "type": "function", "function": call}],
        }
        text, finish = call["arguments"], "tool_calls"
    elif (limit := requested_completion(body)) and completion_tokens(text) > limit:
        message["content"] = text = text.encode()[: limit * 4].decode(errors="ignore")
        finish = "length"
    n = body.get("n")
    n = n if isinstance(n, int) and n > 0 else 1
    choice = {"message": message, "logprobs": None, "finish_reason": finish}
    used = completion_tokens(text) * n
    return {
        "id": f"chatcmpl-{digest[:29]}",
        "object": "chat.completion",
        "created": CREATED,
        "model": body["model"],
        "choices": [{"index": i, **choice} for i in range(n)],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": used,
            "total_tokens": prompt_tokens + used,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
        },
        "service_tier": "default",
        "system_fingerprint": FINGERPRINT,
    }


def _pieces(text: str, count: int) -> list[str]:
    size = max(1, -(-len(text) // max(1, count)))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _choice_deltas(message: Mapping[str, Any], count: int) -> list[JSON]:
    if "tool_calls" not in message:
        first: JSON = {"role": "assistant", "content": "", "refusal": None}
        return [first, *({"content": p} for p in _pieces(message["content"], count))]
    deltas: list[JSON] = [{"role": "assistant", "content": None, "refusal": None}]
    for index, call in enumerate(message["tool_calls"]):
        head = {"index": index, "id": call["id"], "type": "function"}
        deltas.append(
            {
                "tool_calls": [
                    head | {"function": {"name": call["function"]["name"], "arguments": ""}}
                ]
            }
        )
        for piece in _pieces(call["function"]["arguments"], count):
            deltas.append({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
    return deltas


def stream_events(completion: Mapping[str, Any], chunks: int, include_usage: bool) -> list[JSON]:
    """The ``chat.completion.chunk`` events OpenAI would stream for ``completion``."""
    head = {
        k: completion[k] for k in ("id", "created", "model", "service_tier", "system_fingerprint")
    }
    head["object"] = "chat.completion.chunk"
    extra = {"usage": None} if include_usage else {}
    events: list[JSON] = []
    for choice in completion["choices"]:
        tail: JSON = {"delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}
        bodies = [
            {"delta": d, "logprobs": None, "finish_reason": None}
            for d in _choice_deltas(choice["message"], chunks)
        ]
        for body in [*bodies, tail]:
            events.append(head | {"choices": [{"index": choice["index"], **body}]} | extra)
    if include_usage:
        events.append(head | {"choices": [], "usage": completion["usage"]})
    return events


def sse(event: Mapping[str, Any] | str) -> bytes:
    """One SSE frame: ``data: <json>\\n\\n`` (or ``[DONE]``)."""
    data = event if isinstance(event, str) else json.dumps(event, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


def authorization_fingerprint(value: str | None) -> str:
    """What ``x-fake-saw-authorization`` says for an ``Authorization`` value (never the key)."""
    return hashlib.sha256(value.encode()).hexdigest()[:16] if value is not None else "none"


# ---------------------------------------------------------------- state and server


class FaultKind(StrEnum):
    """What a fault does to the request it hits. (Refusing connections: stop the server.)"""

    RESET_BEFORE_HEADERS = "reset_before_headers"
    RESET_MID_STREAM = "reset_mid_stream"
    HANG_BEFORE_HEADERS = "hang_before_headers"
    HANG_MID_STREAM = "hang_mid_stream"
    NOT_JSON = "not_json"
    SERVER_ERROR = "server_error"
    RATE_LIMIT = "rate_limit"
    CONTEXT_LENGTH = "context_length"


@dataclass(frozen=True)
class Fault:
    """A fault for chat-completion requests; ``after_events`` SSE events (or half a
    non-streamed body) go out before a mid-stream fault strikes."""

    kind: FaultKind
    after_events: int = 2
    retry_after: int = 1
    style: ContextErrorStyle = "openai"
    n_ctx: int = 4096
    prompt_tokens: int | None = None


@dataclass(frozen=True)
class RecordedRequest:
    """One request as it arrived: ``body`` holds the exact bytes received."""

    index: int
    method: str
    path: str
    query_string: str
    headers: CIMultiDictProxy[str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class ClientGone(Exception):
    """The client closed its connection while the fake was still answering."""


class _Aborted(Exception):
    """The fake reset the connection on purpose."""


class _NotJson(Exception):
    """Answer 200 with a body that is not JSON."""


FAKE_KEY = web.AppKey("fake_upstream", object)


class FakeUpstream:
    """State and behaviour of one fake upstream; ``app()`` builds its aiohttp application.

    Tests tune attributes between requests: ``chunk_delay`` (seconds between SSE events),
    ``stream_chunks`` (pieces per content), ``fault`` (applies to every chat request),
    ``inject(...)`` (faults for the next chat requests), ``context_error_style``,
    ``extra_headers`` (added to every answer, e.g. the CORS headers OpenAI's API sends).
    Faults hit chat requests only, so a proxy's model discovery cannot use them up.
    Tests read ``requests``, ``cancelled`` (requests whose client left mid-answer) and
    ``frames_sent`` (SSE frames written so far, over all streams).
    """

    def __init__(
        self,
        *,
        models: Mapping[str, int] | None = None,
        count_tokens: CountTokens | None = None,
        accept_unknown_models: bool = False,
        default_context_window: int = DEFAULT_CONTEXT_WINDOW,
        model_list_extras: Sequence[Literal["max_model_len", "context_length"]] = (),
        chunk_delay: float = 0.0,
        stream_chunks: int = 4,
        tool_trigger: str = "tool",
        context_error_style: ContextErrorStyle = "openai",
    ) -> None:
        self.models = dict(DEFAULT_MODELS if models is None else models)
        self.count_tokens = count_tokens or estimate_tokens
        self.accept_unknown_models = accept_unknown_models
        self.default_context_window = default_context_window
        self.model_list_extras = tuple(model_list_extras)
        self.chunk_delay = chunk_delay
        self.stream_chunks = stream_chunks
        self.tool_trigger = tool_trigger
        self.context_error_style: ContextErrorStyle = context_error_style
        self.fault: Fault | None = None
        self.extra_headers: dict[str, str] = {}
        self.faults: deque[Fault] = deque()
        self.requests: list[RecordedRequest] = []
        self.cancelled: list[RecordedRequest] = []
        self.frames_sent = 0
        self.url = ""
        self._stop: Callable[[], Awaitable[None]] | None = None
        self._changed = asyncio.Event()
        self._closing = asyncio.Event()

    # -- wiring

    def app(self) -> web.Application:
        """A fresh application serving this fake's routes."""
        app = web.Application(client_max_size=1 << 30)
        app[FAKE_KEY] = self
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1/models/{model}", self._model)
        app.router.add_route("*", "/v1/{tail:.*}", self._echo)
        app.on_shutdown.append(self._on_shutdown)
        return app

    def attach(self, url: str, stop: Callable[[], Awaitable[None]]) -> None:
        """Remember where this fake listens (``url`` ends in ``/v1``) and how to stop it."""
        self.url, self._stop = url, stop

    async def stop(self) -> None:
        """Stop listening: hangs end and new connections are refused."""
        self._closing.set()
        if self._stop is not None:
            await self._stop()

    def inject(self, *faults: Fault) -> None:
        """Queue faults, one for each of the next chat requests."""
        self.faults.extend(faults)

    # -- what tests await

    @property
    def chat_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    async def wait_for_requests(self, n: int = 1, timeout: float = 5.0) -> list[RecordedRequest]:
        """Wait until ``n`` requests have arrived; return them all."""
        await self._wait(lambda: len(self.requests) >= n, timeout)
        return self.requests

    async def wait_for_cancelled(self, n: int = 1, timeout: float = 5.0) -> list[RecordedRequest]:
        """Wait until ``n`` requests have lost their client mid-answer."""
        await self._wait(lambda: len(self.cancelled) >= n, timeout)
        return self.cancelled

    async def _wait(self, done: Callable[[], bool], timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while not done():
                await self._changed.wait()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _on_shutdown(self, app: web.Application) -> None:
        self._closing.set()

    # -- handlers

    async def _record(self, request: web.Request) -> RecordedRequest:
        body = await request.read()
        headers = CIMultiDictProxy(CIMultiDict(request.headers))
        recorded = RecordedRequest(
            len(self.requests), request.method, request.path, request.query_string, headers, body
        )
        self.requests.append(recorded)
        self._notify()
        return recorded

    def _headers(self, request: web.Request, recorded: RecordedRequest) -> dict[str, str]:
        return {
            "x-request-id": f"req_fake{recorded.index:08d}",
            "openai-processing-ms": "1",
            "openai-version": "2020-10-01",
            "x-fake-saw-authorization": authorization_fingerprint(
                request.headers.get("Authorization")
            ),
            **self.extra_headers,
        }

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        recorded = await self._record(request)
        headers = self._headers(request, recorded)
        fault = self.faults.popleft() if self.faults else self.fault
        try:
            return await self._answer(request, recorded, headers, fault)
        except ApiError as error:
            return web.json_response(
                error.body, status=error.status, headers={**headers, **error.headers}
            )
        except (ClientGone, ConnectionResetError, asyncio.CancelledError):
            self.cancelled.append(recorded)
            self._notify()
            raise
        except _NotJson:
            return web.Response(
                body=NOT_JSON_BODY, content_type="application/json", headers=headers
            )
        except _Aborted:
            raise asyncio.CancelledError from None

    async def _answer(
        self,
        request: web.Request,
        recorded: RecordedRequest,
        headers: dict[str, str],
        fault: Fault | None,
    ) -> web.StreamResponse:
        if fault is not None:
            await self._early_fault(request, recorded, fault)
        try:
            body = json.loads(recorded.body)
        except ValueError:
            raise openai_error(
                "We could not parse the JSON body of your request. (HINT: This likely means you "
                "aren't using your HTTP library correctly. The OpenAI API expects a JSON payload, "
                "but what was sent was not valid JSON."
            ) from None
        body = validate_chat(body)
        window = self._window(body["model"])
        prompt, completion = self.count_tokens(body), requested_completion(body)
        if prompt + completion > window:
            raise context_error(self.context_error_style, window, prompt, completion)
        reply = build_completion(body, prompt, self.tool_trigger)
        mid = fault if fault is not None and fault.kind in _MID_FAULTS else None
        if body.get("stream") is True:
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = stream_events(reply, self.stream_chunks, usage)
            return await self._stream(request, headers, [*map(sse, events), sse("[DONE]")], mid)
        return await self._send_json(request, headers, reply, mid)

    def _window(self, model: str) -> int:
        if model in self.models:
            return self.models[model]
        if self.accept_unknown_models:
            return self.default_context_window
        raise model_not_found(model)

    async def _early_fault(
        self, request: web.Request, recorded: RecordedRequest, fault: Fault
    ) -> None:
        kind = fault.kind
        if kind is FaultKind.RESET_BEFORE_HEADERS:
            _abort(request)
        if kind is FaultKind.HANG_BEFORE_HEADERS:
            await self._pause(request, float("inf"))
        if kind is FaultKind.NOT_JSON:
            raise _NotJson
        if kind is FaultKind.SERVER_ERROR:
            text = "The server had an error while processing your request. Sorry about that!"
            raise openai_error(text, status=500, type_="server_error")
        if kind is FaultKind.RATE_LIMIT:
            text = "Rate limit reached for requests. Please try again in 1s."
            error = openai_error(text, status=429, type_="requests", code="rate_limit_exceeded")
            raise ApiError(error.status, error.body, {"retry-after": str(fault.retry_after)})
        if kind is FaultKind.CONTEXT_LENGTH:
            prompt = fault.prompt_tokens or max(self._safe_count(recorded.body), fault.n_ctx + 1)
            raise context_error(fault.style, fault.n_ctx, prompt)

    def _safe_count(self, raw: bytes) -> int:
        try:
            return self.count_tokens(json.loads(raw))
        except Exception:  # a fault fires whatever the body; the count is only decoration
            return 0

    async def _stream(
        self,
        request: web.Request,
        headers: dict[str, str],
        frames: list[bytes],
        fault: Fault | None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={**headers, "Cache-Control": "no-cache"})
        response.content_type = "text/event-stream"
        response.charset = "utf-8"
        await response.prepare(request)
        for i, frame in enumerate(frames):
            if fault is not None and i == fault.after_events:
                await self._mid_fault(request, fault)
            if i and self.chunk_delay:
                await self._pause(request, self.chunk_delay)
            await response.write(frame)
            self.frames_sent += 1
        await response.write_eof()
        return response

    async def _send_json(
        self, request: web.Request, headers: dict[str, str], reply: JSON, fault: Fault | None
    ) -> web.StreamResponse:
        data = json.dumps(reply).encode()
        if fault is None:
            return web.Response(body=data, content_type="application/json", headers=headers)
        response = web.StreamResponse(headers=headers)
        response.content_type = "application/json"
        response.content_length = len(data)
        await response.prepare(request)
        await response.write(data[: len(data) // 2])
        await self._mid_fault(request, fault)
        return response

    async def _mid_fault(self, request: web.Request, fault: Fault) -> None:
        if fault.kind is FaultKind.HANG_MID_STREAM:
            await self._pause(request, float("inf"))
        _abort(request)

    async def _pause(self, request: web.Request, seconds: float) -> None:
        """Sleep up to ``seconds``; raise ``ClientGone`` as soon as the client leaves."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while (left := deadline - loop.time()) > 0:
            if request.transport is None or request.transport.is_closing():
                raise ClientGone
            if self._closing.is_set():
                _abort(request)
            await asyncio.sleep(min(left, 0.02))

    async def _models(self, request: web.Request) -> web.Response:
        recorded = await self._record(request)
        data = [self._model_entry(model) for model in self.models]
        return web.json_response(
            {"object": "list", "data": data}, headers=self._headers(request, recorded)
        )

    async def _model(self, request: web.Request) -> web.Response:
        recorded = await self._record(request)
        headers, model = self._headers(request, recorded), request.match_info["model"]
        if model not in self.models:
            error = model_not_found(model)
            return web.json_response(error.body, status=error.status, headers=headers)
        return web.json_response(self._model_entry(model), headers=headers)

    def _model_entry(self, model: str) -> JSON:
        entry: JSON = {
            "id": model,
            "object": "model",
            "created": CREATED,
            "owned_by": "fake-upstream",
        }
        return entry | {extra: self.models[model] for extra in self.model_list_extras}

    async def _echo(self, request: web.Request) -> web.Response:
        recorded = await self._record(request)
        echo = {
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
            "body_length": len(recorded.body),
        }
        return web.json_response(echo, headers=self._headers(request, recorded))


_MID_FAULTS = frozenset({FaultKind.RESET_MID_STREAM, FaultKind.HANG_MID_STREAM})


def _abort(request: web.Request) -> None:
    if request.transport is not None:
        request.transport.abort()
    raise _Aborted


# ---------------------------------------------------------------- standalone


def free_port(host: str = "127.0.0.1") -> int:
    """A port with nothing listening on it (for connection-refused tests)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.asynccontextmanager
async def running(
    fake: FakeUpstream, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[FakeUpstream]:
    """Serve ``fake`` on ``host:port`` (0: any free port) for the ``async with`` body."""
    runner = web.AppRunner(fake.app(), handler_cancellation=True, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    bound_host, bound_port = runner.addresses[0][:2]
    fake.attach(f"http://{bound_host}:{bound_port}/v1", runner.cleanup)
    try:
        yield fake
    finally:
        await fake.stop()


async def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    fake: FakeUpstream | None = None,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve a fake until cancelled; ``ready`` gets its base URL once it listens."""
    async with running(fake or FakeUpstream(), host, port) as served:
        if ready is not None:
            ready(served.url)
        await asyncio.Event().wait()


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m tests.fake_upstream --port N``: prints its base URL, serves until killed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--chunk-delay", type=float, default=0.0)
    parser.add_argument("--stream-chunks", type=int, default=4)
    parser.add_argument("--accept-unknown-models", action="store_true")
    args = parser.parse_args(argv)
    fake = FakeUpstream(
        chunk_delay=args.chunk_delay,
        stream_chunks=args.stream_chunks,
        accept_unknown_models=args.accept_unknown_models,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, fake, lambda url: print(url, flush=True)))


if __name__ == "__main__":
    main()
