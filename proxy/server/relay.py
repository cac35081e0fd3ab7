"""Every other path under ``/v1/``: forwarded as it is (method, path and query as sent,
headers, body).

The upstream is chosen by the body's ``model`` when it is JSON and names one
(``/v1/embeddings``, ``/v1/responses``…), else the default upstream. A POST to a
spelling of the chat endpoint (``/v1/chat/completions/``, ``/v1//chat/completions``…)
is a chat request, handled as one: compressed, recorded, and refused when the store
is required and cannot write.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from proxy.errors import InvalidRequest
from proxy.server.exchange import chat_completions
from proxy.server.request_body import read_limited
from proxy.server.request_log import request_fields
from proxy.server.services import SERVICES
from proxy.upstream.forward import (
    StreamOutcome,
    is_sse,
    read_bounded,
    relay_rest,
    relay_stream,
    response_headers,
    send,
)
from proxy.upstream.paths import check_path, names_chat


async def passthrough(request: web.Request) -> web.StreamResponse:
    raw = request.rel_url.raw_path
    if not raw.startswith("/v1/"):  # the router matched it decoded (/%76%31/…)
        raise InvalidRequest("Spell the /v1/ at the start of the request path plainly.")
    tail = raw[3:]
    decoded = check_path(tail)  # refused before the body is read; up.url checks it again
    if request.method == "POST" and names_chat(decoded):
        return await chat_completions(request)
    svc = request.app[SERVICES]
    body = (
        await read_limited(request, svc.settings.server.max_body_bytes)
        if request.can_read_body
        else None
    )
    kind = "anthropic" if "anthropic-version" in request.headers else "openai"
    up = svc.router.route(_model_of(body), kind) if body else svc.router.default(kind)
    fields = request_fields(request)
    fields["upstream"] = up.name
    url = up.url(tail, request.rel_url.raw_query_string)
    headers = up.request_headers(request.headers)
    resp = await send(up, request.method, url, headers, body, svc.timeout)
    try:
        fields["upstream_status"] = resp.status
        if is_sse(resp):
            return await relay_stream(request, up, resp, {}, lambda _: None, StreamOutcome())
        data, whole = await read_bounded(up, resp, svc.settings.server.max_answer_bytes)
        if not whole:
            return await relay_rest(request, up, resp, {}, data, StreamOutcome())
    finally:
        resp.close()  # drops an unfinished stream's connection: the upstream stops
    return web.Response(status=resp.status, body=data, headers=response_headers(resp, {}))


def _model_of(body: bytes) -> str | None:
    if not body.lstrip().startswith(b"{"):
        return None
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    model = parsed.get("model") if isinstance(parsed, dict) else None
    return model if isinstance(model, str) else None
