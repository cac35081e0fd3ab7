"""The errors handoff itself answers with, each rendered in OpenAI's error shape.

::

    HandoffError                     any error handoff answers itself
    ├── ClientError                  the request is at fault (4xx)
    │   ├── InvalidRequest           400 invalid_request_error (bad JSON, bad fields)
    │   ├── ContextTooLarge          400 context_length_exceeded (pinned turns alone overflow)
    │   ├── Unauthorized             401 (missing or wrong x-handoff-key)
    │   ├── NoRoute                  404 no upstream serves this model
    │   ├── BodyTooLarge             413 body over server.max_body_bytes
    │   └── UnsupportedEncoding      415 a request Content-Encoding handoff cannot decode
    ├── UpstreamError                the upstream could not be reached or answered too late
    │   ├── UpstreamUnreachable      502
    │   └── UpstreamTimeout          504
    └── StoreUnavailable             503 the store cannot write and store.required is set

Errors the *upstream* returns are not here: they are relayed as they came.
Every route's wrapper (:func:`proxy.endpoint.error_response`) turns these into responses.
"""

from __future__ import annotations

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


class Unauthorized(ClientError):
    status = 401
    type = "authentication_error"
    code = "invalid_handoff_key"


class NoRoute(ClientError):
    status = 404
    code = "model_not_found"


class BodyTooLarge(ClientError):
    status = 413
    code = "request_too_large"


class UnsupportedEncoding(ClientError):
    status = 415
    code = "unsupported_content_encoding"


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


def error_body(
    message: str, type_: str, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_bytes(err: HandoffError) -> bytes:
    return orjson.dumps(err.body())
