"""The fake upstream's state and its aiohttp application: recorded requests, faults."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from tests.fake_upstream.anthropic import MessagesFake, answer_count, answer_messages
from tests.fake_upstream.constants import (
    CREATED,
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_MODELS,
    JSON,
    NOT_JSON_BODY,
    ContextErrorStyle,
    CountTokens,
)
from tests.fake_upstream.errors import ApiError, context_error, model_not_found, openai_error
from tests.fake_upstream.local_servers import add_local_routes
from tests.fake_upstream.replies import (
    authorization_fingerprint,
    build_completion,
    estimate_tokens,
    requested_completion,
    sse,
    stream_events,
)
from tests.fake_upstream.responses import (
    CountInput,
    ResponseMaker,
    failed_events,
    overflow_error,
    response_events,
    sse_event,
    strings_tokens,
    validate_responses,
)
from tests.fake_upstream.validation import validate_chat


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
    EMPTY_STREAM = "empty_stream"
    """200 text/event-stream with no event at all (llama-cpp-python's overflow)."""


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


class _EmptyStream(Exception):
    """Answer 200 text/event-stream and end it with no event."""


FAKE_KEY = web.AppKey("fake_upstream", object)


class FakeUpstream:
    """State and behaviour of one fake upstream; ``app()`` builds its aiohttp application.

    Tests tune attributes between requests: ``chunk_delay`` (seconds between SSE events),
    ``stream_chunks`` (pieces per content), ``fault`` (applies to every chat request),
    ``inject(...)`` (faults for the next chat requests), ``context_error_style``,
    ``extra_headers`` (added to every answer, e.g. the CORS headers OpenAI's API sends).
    ``overflow_as_empty_stream``: a streamed request over the window is answered 200 with
    no event at all, as llama-cpp-python does. ``close_kept_alive``: a second request on a
    connection that was answered on before is dropped unread, as a server that closed
    its idle keep-alive connection; counted in ``dropped``, not in ``requests``.
    ``local_server``: also serve that server's own window endpoints (llama.cpp
    ``/props``, Ollama ``/api/version|tags|show``, LM Studio ``/api/v0/models``), each
    reporting ``models``' windows as that server does (see ``local_servers``).
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
        linger_after_done: float = 0.0,
        canned: Mapping[str, str] | None = None,
        overflow_as_empty_stream: bool = False,
        close_kept_alive: bool = False,
        local_server: Literal["llamacpp", "ollama", "lmstudio"] | None = None,
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
        self.canned = dict(canned or {})
        """Model → the content every answer of that model has (instead of an echo)."""
        self.overflow_as_empty_stream = overflow_as_empty_stream
        self.close_kept_alive = close_kept_alive
        self.local_server = local_server
        self.dropped = 0
        self._answered: set[object] = set()  # client (host, port): one per connection
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
        self.anthropic = MessagesFake(windows=self.models)
        """The Anthropic Messages routes' settings and script (``tests.fake_upstream.anthropic``)."""
        self.responder = ResponseMaker(tool_trigger)
        self.count_input: CountInput = strings_tokens
        self.overflow_in_stream = False  # a Responses overflow as response.failed
        self.linger = linger_after_done  # seconds a stream stays open after its last event

    # -- wiring

    def app(self) -> web.Application:
        """A fresh application serving this fake's routes."""
        app = web.Application(client_max_size=1 << 30)
        app[FAKE_KEY] = self
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_messages)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1/models/{model}", self._model)
        app.router.add_route("*", "/v1/{tail:.*}", self._echo)
        if self.local_server is not None:
            add_local_routes(app, self.local_server, self.models, self._record)
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

    @property
    def responses_requests(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.path.endswith("/responses")]

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

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        recorded = await self._record(request)
        return await answer_messages(self.anthropic, _json_or_none(recorded.body), request)

    async def _count_messages(self, request: web.Request) -> web.StreamResponse:
        recorded = await self._record(request)
        return await answer_count(self.anthropic, _json_or_none(recorded.body))

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if self.close_kept_alive and peer in self._answered:
            self.dropped += 1
            self._notify()
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError
        self._answered.add(peer)
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
        except _EmptyStream:
            return await self._stream(request, headers, [], None)

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
            if self.overflow_as_empty_stream and body.get("stream") is True:
                raise _EmptyStream
            raise context_error(self.context_error_style, window, prompt, completion)
        reply = build_completion(body, prompt, self.tool_trigger)
        if body["model"] in self.canned:
            for choice in reply["choices"]:
                choice["message"]["content"] = self.canned[body["model"]]
        mid = fault if fault is not None and fault.kind in _MID_FAULTS else None
        if body.get("stream") is True:
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            events = stream_events(reply, self.stream_chunks, usage)
            return await self._stream(request, headers, [*map(sse, events), sse("[DONE]")], mid)
        return await self._send_json(request, headers, reply, mid)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        recorded = await self._record(request)
        headers = self._headers(request, recorded)
        try:
            try:
                body = json.loads(recorded.body)
            except ValueError:
                raise openai_error("We could not parse the JSON body of your request.") from None
            body = validate_responses(body, self.responder.issued)
            window = self._window(body["model"])
            prompt = self.count_input(body)
            out = body.get("max_output_tokens") or 0
            overflow = prompt + out > window
            if overflow and not (self.overflow_in_stream and body.get("stream")):
                raise overflow_error()
        except ApiError as error:
            return web.json_response(error.body, status=error.status, headers=headers)
        response = self.responder.response(body, prompt)
        if not body.get("stream"):
            return web.json_response(response, headers=headers)
        if overflow:
            events = failed_events(response, overflow_error().body["error"])
        else:
            events = response_events(response, self.stream_chunks)
        try:
            return await self._stream(request, headers, [sse_event(e) for e in events], None)
        except (ClientGone, ConnectionResetError, asyncio.CancelledError):
            self.cancelled.append(recorded)
            self._notify()
            raise

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
        if kind is FaultKind.EMPTY_STREAM:
            raise _EmptyStream
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
        if self.linger:
            await self._pause(request, self.linger)
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


def _json_or_none(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None
