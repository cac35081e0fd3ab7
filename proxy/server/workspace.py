"""Who is asking: the workspace a request's snapshots belong to, and the one it may read.

A client's workspace is derived from its API key, a truncated salted digest of it
(``key-…``; ``default`` for a client with no key), so only the key's holder writes to it
or reads it. ``x-handoff-workspace: NAME`` picks a sub-workspace under it
(``key-…/NAME``), never another key's workspace. The key itself is never stored or
logged; only the digest is.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Mapping

_SALT = b"handoff-workspace-v1:"


def home_workspace(headers: Mapping[str, str]) -> str:
    """The workspace the request's key owns, sub-workspaces included: all it may read."""
    key = _api_key(headers)
    return _key_workspace(key) if key else "default"


def workspace_for(headers: Mapping[str, str]) -> str:
    """Where the request's turn is recorded: its key's workspace, or the sub-workspace
    ``x-handoff-workspace`` names under it."""
    home = home_workspace(headers)
    sub = headers.get("x-handoff-workspace", "").strip().strip("/")
    return f"{home}/{sub[:128]}" if sub else home


@functools.lru_cache(maxsize=256)
def _key_workspace(key: str) -> str:
    """Remembered (in memory only) for the keys in use: sha256 through OpenSSL is slow
    with the CPU's caches cold, as they are after a long history."""
    return "key-" + hashlib.sha256(_SALT + key.encode()).hexdigest()[:16]


def _api_key(headers: Mapping[str, str]) -> str:
    auth = headers.get("Authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return (
        headers.get("api-key", "").strip()
        or headers.get("x-api-key", "").strip()  # Anthropic's
        or auth.strip()
    )


SESSION_HEADERS: tuple[str, ...] = (
    "x-handoff-session",  # handoff's own: the id its x-handoff-session answer header gave
    "x-session-id",  # opencode
    "x-claude-code-session-id",  # Claude Code
    "session-id",  # Codex
    "session_id",  # Codex (Responses), other builds
    "conversation_id",  # Codex, older builds
    "thread-id",  # Codex (Responses) threads
)
"""Request headers in which a client names its own conversation, first found wins, for
every wire format (chat, Responses, Messages). A client with another header adds it here."""


def session_hint(
    headers: Mapping[str, str], body: Mapping[str, object], from_body: bool
) -> str | None:
    """The conversation id the client sent (:data:`SESSION_HEADERS`; with ``from_body``,
    ``metadata.session_id`` or ``user``), cut to 256 characters; None when it sent none."""
    for name in SESSION_HEADERS:
        explicit = headers.get(name, "").strip()
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
