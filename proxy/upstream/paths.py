"""Request paths: which a client may have forwarded below an upstream's base URL, and
which spellings an upstream may take for its chat endpoint.

The path is forwarded as the client sent it, escapes and all, so it is checked in that
form and decoded once: it may hold no ``.`` or ``..`` segment once decoded (``;``
parameters and padding ignored, as some servers ignore them, and an escaped ``/``
taken as a slash, as some servers take it), no backslash (plain or escaped), no
control or non-ASCII character, and no ``%`` once decoded (an escape inside an
escape: a server that decodes twice would see what this check did not). A path that
passes cannot climb above the base however a server decodes and normalises it; one
that fails is refused, never repaired. An escaped ``/`` alone is allowed: the openai
SDK sends a model id such as ``meta-llama/Llama-3.1-8B`` as ``meta-llama%2FLlama-3.1-8B``.
"""

from __future__ import annotations

from urllib.parse import unquote

from proxy.errors import InvalidRequest


def check_path(raw: str) -> str:
    """``raw``: a path below ``/v1`` as received (``/chat/completions``), percent-escapes
    intact. Returns it decoded once; raises :class:`InvalidRequest` if it could leave the
    base path. A few ``in`` tests for a plain path."""
    text = raw
    if "%" in raw:
        if "%5c" in raw.lower():
            raise _refused("holds an encoded '\\'")
        try:
            text = unquote(raw, errors="strict")
        except UnicodeDecodeError:
            raise _refused("decodes to something other than UTF-8") from None
        if "%" in text:
            raise _refused("holds an escape inside an escape ('%25…')")
        if not (text.isascii() and text.isprintable()):
            raise _refused("decodes to a control or non-ASCII character")
    if "\\" in text:
        raise _refused("holds a backslash")
    if "/." in text and any(_dots(segment) for segment in text.split("/")):
        raise _refused("holds a '.' or '..' segment")
    return text


def _dots(segment: str) -> bool:
    """Is this segment only dots, once ``;parameters`` and spaces are dropped?"""
    bare = segment.split(";", 1)[0].strip()
    return bool(bare) and not bare.strip(".")


def names_chat(text: str) -> bool:
    """Could an upstream take ``text`` (a path below ``/v1``, decoded) for its chat
    endpoint, if it merges slashes, ignores case, a trailing slash, ``;`` parameters
    or padding? Then handoff must handle it as a chat request, not pass it through."""
    if "chat" not in text.lower():
        return False
    parts = [p.split(";", 1)[0].strip().lower() for p in text.split("/")]
    return [p for p in parts if p] == ["chat", "completions"]


def _refused(why: str) -> InvalidRequest:
    return InvalidRequest(
        f"The request path {why}: handoff forwards only paths that stay below the "
        "upstream's base URL, spelled plainly. Send the path without it."
    )
