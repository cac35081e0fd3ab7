"""Where a chat body's ``messages`` array and its elements sit in the body's bytes.

Only offsets come from here, found with the stdlib's C scanner; values are always
orjson's (see ``resent``). The stdlib scanner accepts every document orjson
accepts, and where a JSON value ends is fixed by the grammar, not by the parser,
so the offsets are exact. Anything unexpected (not an object, no ``messages``
array, the key twice, nesting beyond the recursion limit) gives None, and the
caller parses the whole body instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass

# The stdlib decoder's C parts, which typeshed does not declare.
_scan: Callable[[str, int], tuple[object, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_SPACE = re.compile(r"[ \t\n\r]*")  # JSON's whitespace
_FAILED = (ValueError, RecursionError, IndexError, StopIteration)  # StopIteration: no value


@dataclass(slots=True)  # not frozen: built every turn (see TurnRecord)
class Layout:
    """Byte offsets in a body: ``open`` is the ``messages`` array's ``[``, ``ends[k]`` is
    where its element ``k`` ends, ``close`` is its ``]``."""

    open: int
    ends: list[int]
    close: int


def layout(body: bytes, key: str = "messages") -> Layout | None:
    """The layout of a whole body whose only ``key`` member holds an array, or None."""
    try:
        text = body.decode()
        i = _ws(text, 0)
        if text[i] != "{":
            return None
        found: Layout | None = None
        i = _ws(text, i + 1)
        while text[i] != "}":
            name, i = _key(text, i)
            if name != key:
                i = _scan(text, i)[1]
            elif found is not None or text[i] != "[":
                return None  # twice (orjson keeps the last one), or not an array
            else:
                ends, close = _elements(text, i + 1)
                opened, *ends, closed = _byte_offsets(body, text, [i, *ends, close])
                found = Layout(opened, ends, closed)
                i = close + 1
            i = _next_member(text, i)
        return found
    except _FAILED:
        return None


def element_start(body: bytes, lay: Layout, k: int) -> int:
    """Where element ``k`` of the array ``lay`` describes starts (past ``[`` or ``,`` and
    any whitespace)."""
    i = lay.open + 1 if k == 0 else lay.ends[k - 1]
    while body[i] in b" \t\r\n,":
        i += 1
    return i


def elements_from(body: bytes, at: int) -> tuple[list[int], int] | None:
    """Scan array elements from byte ``at`` (just past a ``[`` or ``,``) to the ``]``:
    (where each ends, where the ``]`` is), as byte offsets; None if that is not JSON."""
    try:
        rest = body[at:]
        text = rest.decode()
        ends, close = _elements(text, 0)
        *ends, close = (at + b for b in _byte_offsets(rest, text, [*ends, close]))
        return ends, close
    except _FAILED:
        return None


def has_key_after(body: bytes, close: int, key: str) -> bool | None:
    """Does the top-level object have ``key`` among the members after byte ``close``
    (the ``]`` ending a member's value)? None if that is not JSON."""
    try:
        text = body[close + 1 :].decode()
        i = _next_member(text, 0)
        while text[i] != "}":
            name, i = _key(text, i)
            if name == key:
                return True
            i = _next_member(text, _scan(text, i)[1])
        return False
    except _FAILED:
        return None


def _key(text: str, i: int) -> tuple[str, int]:
    """A member's key at ``i``: (the key, where its value starts)."""
    if text[i] != '"':
        raise ValueError("expected a key")
    key, i = _scanstring(text, i + 1)
    i = _ws(text, i)
    if text[i] != ":":
        raise ValueError("expected ':'")
    return key, _ws(text, i + 1)


def _next_member(text: str, i: int) -> int:
    """From the end of a member's value: the next key, or the object's ``}``."""
    i = _ws(text, i)
    if text[i] == ",":
        return _ws(text, i + 1)
    if text[i] != "}":
        raise ValueError("expected ',' or '}'")
    return i


def _elements(text: str, i: int) -> tuple[list[int], int]:
    """From just past ``[`` or ``,`` at ``i``: (where each element ends, where ``]`` is)."""
    ends: list[int] = []
    i = _ws(text, i)
    while text[i] != "]":
        end = _scan(text, i)[1]
        ends.append(end)
        i = _ws(text, end)
        if text[i] == ",":
            i = _ws(text, i + 1)
        elif text[i] != "]":
            raise ValueError("expected ',' or ']'")
    return ends, i


def _ws(text: str, i: int) -> int:
    """Past any whitespace at ``i``."""
    return _SPACE.match(text, i).end()  # type: ignore[union-attr]  # matches the empty string


def _byte_offsets(raw: bytes, text: str, indices: list[int]) -> list[int]:
    """Ascending str indices as byte offsets: the same numbers for ASCII (JSON as most
    clients send it), else counted in one pass."""
    if len(raw) == len(text):
        return indices
    out, prev, at = [], 0, 0
    for i in indices:
        at += len(text[prev:i].encode())
        out.append(at)
        prev = i
    return out


def with_members(body: bytes, values: dict[str, bytes]) -> bytes | None:
    """``body`` with the values of these top-level members replaced by the given JSON
    bytes, every other byte kept; None if that is not JSON or a key comes twice."""
    try:
        text = body.decode()
        i = _ws(text, 0)
        if text[i] != "{":
            return None
        spans: dict[str, tuple[int, int]] = {}
        i = _ws(text, i + 1)
        while text[i] != "}":
            key, i = _key(text, i)
            end = _scan(text, i)[1]
            if key in values:
                if key in spans:
                    return None
                spans[key] = (i, end)
            i = _next_member(text, end)
    except _FAILED:
        return None
    order = sorted(spans.values())
    cuts = _byte_offsets(body, text, [x for span in order for x in span])
    out, at = [], 0
    for (key, _), start, stop in zip(
        sorted(spans.items(), key=lambda kv: kv[1]), cuts[::2], cuts[1::2], strict=True
    ):
        out += [body[at:start], values[key]]
        at = stop
    out.append(body[at:])
    return b"".join(out)
