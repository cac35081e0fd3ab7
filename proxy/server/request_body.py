"""Reading a request body: bounded by ``server.max_body_bytes``, decoded from its
``Content-Encoding`` (gzip or deflate) so that what handoff forwards is plain bytes.

handoff decodes bodies itself (the app turns aiohttp's request decompression off): a
body that does not decode, a truncated one included, is then a 400 in OpenAI's shape
from handoff rather than a plain-text one from aiohttp's parser, and the connection
stays usable. The limit bounds the decoded bytes as they come, so a small compressed
bomb stops at it too.
"""

from __future__ import annotations

import zlib

from aiohttp import web

from proxy.errors import BodyTooLarge, InvalidRequest, UnsupportedEncoding
from proxy.server.unreadable import unreadable_body

_GZIP = 16 + zlib.MAX_WBITS


async def read_limited(request: web.Request, limit: int) -> bytes:
    """The whole body, decoded, or :class:`BodyTooLarge` as soon as it passes ``limit``."""
    decoder = _decoder(request.headers.get("Content-Encoding"))
    # Compressed, a body may be a little larger than decoded (stored blocks, headers).
    wire_limit = limit if decoder is None else limit + (limit >> 10) + 1024
    if request.content_length is not None and request.content_length > wire_limit:
        raise _too_large(request.content_length, limit)
    chunks: list[bytes] = []
    size = wire = 0
    try:
        while chunk := await request.content.readany():
            if decoder is not None:
                wire += len(chunk)
                if wire > wire_limit:
                    raise _too_large(wire, limit)
                chunk = decoder.feed(chunk, limit - size)
            size += len(chunk)
            if size > limit:
                raise _too_large(size, limit)
            chunks.append(chunk)
    except web.RequestPayloadError as e:  # bad chunking, a body cut short
        raise unreadable_body(e, request.headers.get("Content-Encoding")) from None
    if decoder is not None:
        decoder.finish()
    return b"".join(chunks)


def _decoder(header: str | None) -> _Decoder | None:
    if header is None:
        return None
    encoding = header.strip().lower()
    if encoding in ("gzip", "deflate"):
        return _Decoder(encoding)
    if encoding in ("identity", ""):
        return None
    raise UnsupportedEncoding(
        f"handoff cannot decompress a request body in Content-Encoding: {header}. Send it "
        "uncompressed, or compressed with gzip or deflate."
    )


class _Decoder:
    """Decodes a gzip body (members one after another) or a deflate one (a zlib stream,
    or raw deflate as many clients send it, told apart by its first byte as aiohttp
    does), chunk by chunk, never producing more than it is given room for."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self._z: zlib._Decompress | None = None  # the member being decoded

    def feed(self, data: bytes, room: int) -> bytes:
        out: list[bytes] = []
        while data:
            if self._z is None:
                wbits = _GZIP if self.encoding == "gzip" else zlib.MAX_WBITS
                if self.encoding == "deflate" and data[0] & 0x0F != 8:
                    wbits = -zlib.MAX_WBITS
                self._z = zlib.decompressobj(wbits)
            try:
                part = self._z.decompress(data, room + 1)
            except zlib.error as e:
                raise self._undecodable(str(e)) from None
            out.append(part)
            room -= len(part)
            if room < 0:
                break  # over the limit: the caller refuses the body
            if not self._z.eof:
                break  # all of data taken in; more to come
            data = self._z.unused_data
            self._z = None
            if data and self.encoding != "gzip":
                raise self._undecodable("data follows the end of the compressed stream")
        return b"".join(out)

    def finish(self) -> None:
        if self._z is not None:
            raise self._undecodable("the compressed stream ends early")

    def _undecodable(self, why: str) -> InvalidRequest:
        return InvalidRequest(
            f"The request body could not be decompressed as Content-Encoding: {self.encoding} "
            f"({why}). Send the whole compressed body, or send it uncompressed without that "
            "header.",
            code="invalid_content_encoding",
        )


def _too_large(size: int, limit: int) -> BodyTooLarge:
    return BodyTooLarge(
        f"The request body ({size:,} bytes or more) exceeds handoff's limit of {limit:,} "
        "bytes (server.max_body_bytes)."
    )
