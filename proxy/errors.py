"""The errors handoff itself answers with, each rendered in its route's error shape
(OpenAI's, :func:`openai_shape`; Anthropic's on the Messages routes, :func:`anthropic_shape`).

::

    HandoffError                     any error handoff answers itself
    ├── ClientError                  the request is at fault (4xx)
    │   ├── InvalidRequest           400 invalid_request_error (bad JSON, bad fields)
    │   ├── ContextTooLarge          400 context_length_exceeded (the output reservation alone)
    │   ├── Unfittable               400 code handoff_unfittable: nothing handoff may cut makes
    │   │                            it fit (worded so clients do not "compact and retry")
    │   ├── MalformedHttp            400 invalid_http: HTTP aiohttp cannot parse, a bad body
    │   ├── Unauthorized             401 (missing or wrong x-handoff-key)
    │   ├── Forbidden                403 permission_error (a cross-site request, the admin view)
    │   ├── NoRoute                  404 no upstream serves this model
    │   ├── BodyTooLarge             413 body over server.max_body_bytes
    │   ├── UnsupportedEncoding      415 a Content-Encoding handoff cannot decompress
    │   ├── MisdirectedHost          421 a Host this handoff does not answer to
    │   ├── WebSocketRefused         426 a WebSocket upgrade (Codex then falls back to HTTP)
    │   └── HeadTooLarge             431 a line or header over 8,190 bytes, over 128 headers
    ├── UpstreamError                the upstream could not be reached or answered too late
    │   ├── UpstreamUnreachable      502
    │   └── UpstreamTimeout          504
    ├── StoreUnavailable             503 the store cannot write and store.required is set
    └── TooManyConnections           503 server.max_connections are open (sent at accept)

Errors the *upstream* returns are not here: they are relayed as they came.
Every route's wrapper (:func:`proxy.server.endpoint.error_response`) turns these into responses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson


class HandoffError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


class ClientError(HandoffError):
    status = 400
    type = "invalid_request_error"


class InvalidRequest(ClientError):
    pass


class ContextTooLarge(ClientError):
    code = "context_length_exceeded"


class Unfittable(ClientError):
    """The pinned messages alone (system prompt, newest user turn) cannot fit. Not an
    overflow to clients: its code and words differ, because agent CLIs answer an
    overflow by compacting and resending, which cannot help here (one looped 629 times)."""

    code = "handoff_unfittable"


class Unauthorized(ClientError):
    status = 401
    type = "authentication_error"
    code = "invalid_handoff_key"


class Forbidden(ClientError):
    status = 403
    type = "permission_error"


class NoRoute(ClientError):
    status = 404
    code = "model_not_found"


class MisdirectedHost(ClientError):
    status = 421
    code = "host_not_allowed"


class BodyTooLarge(ClientError):
    status = 413
    code = "request_too_large"


class MalformedHttp(ClientError):
    code = "invalid_http"


class UnsupportedEncoding(ClientError):
    status = 415
    code = "unsupported_content_encoding"


class WebSocketRefused(ClientError):
    status = 426
    code = "websocket_not_supported"


class HeadTooLarge(ClientError):
    status = 431
    code = "request_head_too_large"


class UpstreamError(HandoffError):
    type = "upstream_error"


class UpstreamUnreachable(UpstreamError):
    status = 502
    code = "upstream_unreachable"


class UpstreamTimeout(UpstreamError):
    status = 504
    code = "upstream_timeout"


class StoreUnavailable(HandoffError):
    status = 503
    type = "server_error"
    code = "store_unavailable"


class TooManyConnections(HandoffError):
    status = 503
    code = "too_many_connections"


ErrorShape = Callable[[HandoffError], dict[str, Any]]
"""How a route answers handoff's own errors: OpenAI's shape, or its wire format's."""


def openai_shape(err: HandoffError) -> dict[str, Any]:
    return err.body()


_ANTHROPIC_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                    413: "request_too_large"}  # fmt: skip


def anthropic_shape(err: HandoffError) -> dict[str, Any]:
    """Anthropic Messages' error body: ``{"type": "error", "error": {"type", "message"}}``,
    the type named as Anthropic names it for the status (the SDKs read only these)."""
    kind = _ANTHROPIC_TYPES.get(err.status)
    if kind is None:
        kind = "invalid_request_error" if err.status < 500 else "api_error"
    return {"type": "error", "error": {"type": kind, "message": err.message}}


def error_body(
    message: str, type_: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_bytes(err: HandoffError) -> bytes:
    return orjson.dumps(err.body())
