"""Answers for requests handoff cannot read: HTTP that aiohttp's parser refuses (a line
over its limit, too many headers, a bad method or header, an unsupported Content-Encoding)
and bodies that do not decompress.

Each becomes a :class:`~proxy.errors.ClientError`, so it is answered in OpenAI's error
shape like every other bad request. The message says what was wrong and what to send
instead; it never quotes the request, whose line and headers may hold secrets (aiohttp's
own plain-text answers echo them).
"""

from __future__ import annotations

from aiohttp import http_exceptions as hx

from proxy.errors import (
    BodyTooLarge,
    ClientError,
    HeadTooLarge,
    InvalidRequest,
    MalformedHttp,
    UnsupportedEncoding,
)

CODINGS = frozenset({"gzip", "x-gzip", "deflate", "br", "zstd", "compress", "identity"})
"""Content-Encoding names an answer may repeat; any other value is the client's own text."""


_CHUNKED = (
    "The request's chunked body is malformed (Transfer-Encoding: chunked); "
    "send a valid chunked body, or a Content-Length."
)


def unreadable_request(exc: hx.HttpProcessingError) -> ClientError:
    """What to answer a request aiohttp's parser refused with ``exc``."""
    if isinstance(exc, hx.LineTooLong):
        return HeadTooLarge(
            "The request line or a header is longer than handoff reads (8,190 bytes). "
            "Long values belong in the request body."
        )
    if isinstance(exc, hx.ContentEncodingError):
        return UnsupportedEncoding(
            "handoff cannot decompress this request body's Content-Encoding; send it "
            "uncompressed, or compressed with gzip or deflate."
        )
    if isinstance(exc, hx.TransferEncodingError):
        return MalformedHttp(_CHUNKED)
    if isinstance(exc, hx.BadStatusLine):  # BadHttpMethod too: often TLS sent to plain HTTP
        return MalformedHttp(
            "The request line is not valid HTTP/1.1. handoff serves plain HTTP: check "
            "that the URL starts with http://, not https://."
        )
    if isinstance(exc, hx.InvalidURLError):
        return MalformedHttp("The request's URL is not valid; percent-encode what it holds.")
    if "too many headers" in exc.message.lower():  # a plain BadHttpMessage
        return HeadTooLarge("The request has more headers than handoff reads (128).")
    if isinstance(exc, hx.InvalidHeader) or "header" in exc.message.lower():
        return MalformedHttp(
            "The request's headers are not valid HTTP (a bad name or value, or a repeated "
            "Content-Length)."
        )
    return MalformedHttp("The request is not valid HTTP/1.1, so handoff cannot read it.")


def unreadable_body(exc: BaseException, content_encoding: str | None) -> ClientError:
    """What to answer a request whose body could not be read: ``exc`` is the
    :class:`aiohttp.web.RequestPayloadError` the body raised (its cause says why)."""
    cause = exc.__cause__
    if isinstance(cause, hx.DecompressSizeError):
        return BodyTooLarge("The request body decompresses to more than handoff reads.")
    if isinstance(cause, hx.TransferEncodingError):
        return MalformedHttp(_CHUNKED)
    if isinstance(cause, hx.ContentLengthError):
        return MalformedHttp("The request body ended before its Content-Length.")
    if isinstance(cause, hx.ContentEncodingError) or content_encoding:
        return undecodable_body(content_encoding)
    return MalformedHttp("The request body could not be read.")


def undecodable_body(content_encoding: str | None) -> InvalidRequest:
    """A body declared compressed that does not decompress (or decompresses to nothing)."""
    named = (content_encoding or "").strip().lower()
    what = f"{named} data" if named in CODINGS else "in the Content-Encoding it declares"
    return InvalidRequest(
        f"The request body could not be decompressed: it is not valid {what}, or it is "
        "cut short. Send the whole compressed body, or send it uncompressed without a "
        "Content-Encoding header.",
        code="invalid_content_encoding",
    )
