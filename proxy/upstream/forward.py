"""Talking to an upstream and relaying its answer, bytes as they are.

``send`` opens the upstream request and maps connection failures and timeouts to
:class:`UpstreamUnreachable` / :class:`UpstreamTimeout`; a request that fails on a
kept-alive connection before any byte of an answer (the server had closed it, as
llama.cpp does after a refused stream) is sent once more on another connection. A JSON answer up to
``server.max_answer_bytes`` is read whole (so the caller may inspect and keep it,
e.g. for a context-length retry); a larger one, and an SSE answer, is relayed chunk
by chunk as it arrives, never re-serialised.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp
import orjson
import structlog
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from proxy.errors import UpstreamTimeout, UpstreamUnreachable, error_body
from proxy.upstream import kept_alive
from proxy.upstream.routing import HOP_BY_HOP, Upstream

# Response headers the proxy sets itself (the body may have been decompressed), and the
# upstream's CORS grant: which pages may read handoff's answers is handoff's to say.
_DROP_RESPONSE = HOP_BY_HOP | {
    *("content-length", "content-encoding", "server", "date"),
    *("access-control-allow-origin", "access-control-allow-credentials"),
}


log = structlog.get_logger("handoff.forward")


async def send(
    up: Upstream,
    method: str,
    url: URL,
    headers: CIMultiDict[str],
    body: bytes | None,
    timeout: aiohttp.ClientTimeout,
) -> aiohttp.ClientResponse:
    """Open a request to ``up``; returns the response once its headers arrived.

    The caller must ``close()`` it (not ``release()``): an unfinished stream must drop
    the connection so the upstream sees the cancel at once instead of generating on.
    A plain coroutine, not a context manager: every await in the handler resumes
    through each frame of the chain, so a shallower one is cheaper per request."""
    assert up.session is not None, "upstream session not started"
    try:
        kept_alive.forget()
        try:
            return await _request(up, method, url, headers, body, timeout)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
            if not kept_alive.reused() or isinstance(e, aiohttp.ClientConnectorError):
                raise
            # The server closed a kept-alive connection it had answered on before: it
            # never read this request. Once more, on another (aiohttp dropped this one).
            log.info("upstream_connection_stale", upstream=up.name, error=type(e).__name__)
            return await _request(up, method, url, headers, body, timeout)
    except TimeoutError:
        raise UpstreamTimeout(
            f"Upstream {up.name!r} did not answer in time (timeouts.connect_s / "
            "timeouts.read_s). Check that it is up, or raise the timeouts."
        ) from None
    except (aiohttp.ClientConnectorCertificateError, aiohttp.ClientSSLError) as e:
        raise UpstreamUnreachable(
            f"TLS with upstream {up.name!r} at {up.base_url} failed: {e}. If it uses a "
            "private CA or a self-signed certificate, set ca_bundle for it."
        ) from None
    except aiohttp.ClientConnectorError as e:
        raise UpstreamUnreachable(
            f"Cannot connect to upstream {up.name!r} at {up.base_url}: {e.os_error or e}. "
            "Check that it is running and that base_url is right."
        ) from None
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
        raise UpstreamUnreachable(
            f"Upstream {up.name!r} closed the connection before answering ({type(e).__name__})."
        ) from None
    except aiohttp.ClientError as e:
        raise UpstreamUnreachable(f"Upstream {up.name!r} failed: {type(e).__name__}: {e}") from None


async def _request(
    up: Upstream,
    method: str,
    url: URL,
    headers: CIMultiDict[str],
    body: bytes | None,
    timeout: aiohttp.ClientTimeout,
) -> aiohttp.ClientResponse:
    assert up.session is not None
    return await up.session.request(
        method,
        url,  # from up.url(): checked, and sent as built
        headers=headers,
        data=body,
        timeout=timeout,
        allow_redirects=False,
        ssl=up.ssl_context(),
    )


def is_sse(resp: aiohttp.ClientResponse) -> bool:
    """From the raw header: ``resp.content_type`` parses it in full, per request."""
    ctype = resp.headers.get("Content-Type", "")
    return ctype[:17].lower() == "text/event-stream" and ctype[17:18] in ("", ";", " ")


async def read_bounded(
    up: Upstream, resp: aiohttp.ClientResponse, limit: int
) -> tuple[bytes, bool]:
    """The answer's body and True; or, once it passes ``limit`` bytes, what was read so far
    and False: the caller relays the rest (:func:`relay_rest`) instead of holding it."""
    parts: list[bytes] = []
    size = 0
    try:
        while chunk := await resp.content.readany():
            parts.append(chunk)
            size += len(chunk)
            if size > limit:
                return b"".join(parts), False
    except TimeoutError:
        raise UpstreamTimeout(
            f"Upstream {up.name!r} stopped sending its answer (timeouts.read_s)."
        ) from None
    except aiohttp.ClientError as e:
        raise UpstreamUnreachable(
            f"Upstream {up.name!r} broke off its answer: {type(e).__name__}."
        ) from None
    return b"".join(parts), True


async def first_chunk(up: Upstream, resp: aiohttp.ClientResponse) -> bytes:
    """The stream's first bytes, read before the client's response starts; b"" when the
    upstream ended it with no event at all (llama.cpp's answer to an overflowing stream:
    a failed attempt, which must not be relayed as an empty success)."""
    try:
        return await resp.content.readany()
    except TimeoutError:
        raise UpstreamTimeout(
            f"Upstream {up.name!r} sent no event in time (timeouts.read_s)."
        ) from None
    except aiohttp.ClientError as e:
        raise UpstreamUnreachable(
            f"Upstream {up.name!r} broke off its stream before any event: {type(e).__name__}."
        ) from None


@functools.lru_cache(maxsize=1024)
def _relayed(name: str) -> bool:
    """Cached by the name as the upstream spelled it (the same few on every answer)."""
    return name.lower() not in _DROP_RESPONSE


def response_headers(resp: aiohttp.ClientResponse, extra: Mapping[str, str]) -> CIMultiDict[str]:
    out = CIMultiDict([(k, v) for k, v in resp.headers.items() if _relayed(k)])
    if extra:
        out.update(extra)
    return out


@dataclass(slots=True)
class StreamOutcome:
    bytes_out: int = 0
    cancelled: bool = False
    upstream_error: str | None = None
    complete: bool = False
    """The upstream's final event (or the body's last byte) was written to the client: what
    the client does next (close at once, as the openai SDK does after ``[DONE]``) cannot
    make the answer cancelled."""


def _never() -> bool:
    return False


async def relay_stream(
    request: web.Request,
    up: Upstream,
    resp: aiohttp.ClientResponse,
    extra_headers: Mapping[str, str],
    tee: Callable[[bytes], None],
    outcome: StreamOutcome,
    head: bytes = b"",
    finished: Callable[[], bool] = _never,
) -> web.StreamResponse:
    """Relay an SSE body chunk by chunk, ``head`` (:func:`first_chunk`) first. A client
    that goes away cancels this task (handler cancellation); the caller then closes
    the upstream response. ``finished`` says whether the events teed so far include the
    stream's final one."""
    out = web.StreamResponse(status=resp.status, headers=response_headers(resp, extra_headers))
    out.headers["X-Accel-Buffering"] = "no"
    out.headers.setdefault("Cache-Control", "no-cache")
    if head:
        tee(head)
    return await _relay(request, up, resp, out, head, tee, outcome, finished)


async def relay_rest(
    request: web.Request,
    up: Upstream,
    resp: aiohttp.ClientResponse,
    extra_headers: Mapping[str, str],
    head: bytes,
    outcome: StreamOutcome,
) -> web.StreamResponse:
    """Relay a body too large to hold: ``head`` (what :func:`read_bounded` read), then the
    rest as it arrives, with the upstream's length when it is the body's own."""
    out = web.StreamResponse(status=resp.status, headers=response_headers(resp, extra_headers))
    if resp.content_length is not None and "Content-Encoding" not in resp.headers:
        out.content_length = resp.content_length
    return await _relay(request, up, resp, out, head, _ignore, outcome)


def _ignore(chunk: bytes) -> None:
    pass


async def _relay(
    request: web.Request,
    up: Upstream,
    resp: aiohttp.ClientResponse,
    out: web.StreamResponse,
    head: bytes,
    tee: Callable[[bytes], None],
    outcome: StreamOutcome,
    finished: Callable[[], bool] = _never,
) -> web.StreamResponse:
    try:
        await out.prepare(request)
        if head:
            await out.write(head)
            outcome.bytes_out += len(head)
            outcome.complete = finished()
        async for chunk in resp.content.iter_any():
            tee(chunk)
            await out.write(chunk)
            outcome.bytes_out += len(chunk)
            outcome.complete = finished()
        outcome.complete = True
    except (ConnectionResetError, asyncio.CancelledError):
        if outcome.complete:  # the client hung up after the final event: a whole answer
            return _kept(out)
        outcome.cancelled = True
        raise
    except (TimeoutError, aiohttp.ClientError) as e:
        outcome.upstream_error = f"{type(e).__name__}"
        if not is_sse(resp):
            # No way to say it in-band: end the connection unfinished, so the client
            # cannot take the cut body for a whole one (aiohttp's write_eof then finds
            # the transport closing and gives up quietly).
            if request.transport is not None:
                request.transport.close()
            return out
        # Headers are gone already: say it in-band, as OpenAI does, then end.
        msg = f"Upstream {up.name!r} broke off the stream ({type(e).__name__})."
        code = "upstream_timeout" if isinstance(e, TimeoutError) else "upstream_unreachable"
        event = b"data: " + orjson.dumps(error_body(msg, "upstream_error", None, code)) + b"\n\n"
        try:
            await out.write(event)
        except ConnectionResetError:
            outcome.cancelled = True
            raise
    try:
        await out.write_eof()
    except (ConnectionResetError, asyncio.CancelledError):
        if not outcome.complete:
            outcome.cancelled = True
            raise
        return _kept(out)  # the client closed first, with everything it was sent
    return out


def _kept(out: web.StreamResponse) -> web.StreamResponse:
    """``out``, answered in full, though the client closed before the handler finished: a
    cancellation that arrives then is withdrawn, so the exchange ends as complete."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        task.uncancel()
    return out
