"""Who is asking: the workspace a request's snapshots belong to.

A workspace is named by the client (``x-handoff-workspace``) or derived from a hash
of its API key, so that two keys never see each other's sessions. The key itself
is never stored or logged; only a truncated salted digest is.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping

_SALT = b"handoff-workspace-v1:"


def workspace_for(headers: Mapping[str, str]) -> str:
    explicit = headers.get("x-handoff-workspace", "").strip()
    if explicit:
        return explicit[:128]
    key = _api_key(headers)
    if not key:
        return "default"
    return _key_workspace(key)


@functools.lru_cache(maxsize=256)
def _key_workspace(key: str) -> str:
    """Remembered (in memory only) for the keys in use: sha256 through OpenSSL took
    ~80 µs a request with the CPU's caches cold, as they are after a long history."""
    return "key-" + hashlib.sha256(_SALT + key.encode()).hexdigest()[:16]


def _api_key(headers: Mapping[str, str]) -> str:
    auth = headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return headers.get("api-key", "").strip() or auth.strip()


def session_hint(
    headers: Mapping[str, str], body: Mapping[str, object], from_body: bool
) -> str | None:
    explicit = headers.get("x-handoff-session", "").strip()
    if explicit:
        return explicit[:256]
    if from_body:
        meta = body.get("metadata")
        if (
            isinstance(meta, dict)
            and isinstance(meta.get("session_id"), str)
            and meta["session_id"]
        ):
            return str(meta["session_id"])[:256]
        user = body.get("user")
        if isinstance(user, str) and user:
            return user[:256]
    return None
