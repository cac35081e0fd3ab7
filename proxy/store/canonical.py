"""Content addressing: a message's identity is the sha256 of its canonical JSON.

Canonical means orjson with sorted keys, so two dicts with the same content hash
the same however the client ordered the keys. A history is addressed by a running
chain hash, ``c[k] = sha256(c[k-1] + digest(m[k]))``, so every prefix of a history
has its own 32-byte address and "does this request extend that turn?" is one
index lookup.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

DIGEST_SIZE = 32


def canonical(obj: Mapping[str, Any]) -> bytes:
    """The canonical JSON bytes of ``obj`` (sorted keys, no whitespace)."""
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


def digest(body: bytes) -> bytes:
    return hashlib.sha256(body).digest()


def chain(digests: Iterable[bytes]) -> list[bytes]:
    """The chain hash of every prefix: element ``k-1`` addresses the first ``k`` items."""
    out: list[bytes] = []
    prev = b""
    for d in digests:
        prev = hashlib.sha256(prev + d).digest()
        out.append(prev)
    return out


def extend_chain(prev: bytes, d: bytes) -> bytes:
    """The chain hash of a history ``prev`` addresses, with one more message."""
    return hashlib.sha256(prev + d).digest()


def pack_body(body: bytes) -> bytes:
    """The stored form of canonical JSON: zlib when that is smaller (JSON starts with ``{``)."""
    if len(body) < 96:
        return body
    packed = zlib.compress(body, 6)
    return packed if len(packed) < len(body) else body


def unpack_body(stored: bytes) -> bytes:
    """The canonical JSON bytes of a stored body."""
    return stored if stored[:1] in (b"{", b"[") else zlib.decompress(stored)
