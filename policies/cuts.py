"""Cache-stable cuts: prefix hashes, reuse of the previous cut, and moving it by a step.

Provider prompt caches hit only while the forwarded prefix stays byte-identical,
so a cut that moves one message per turn rewrites the cache every turn. A policy
therefore reuses the previous turn's cut while the history still starts the same
and the result fits, and when it must move, moves it far enough to leave
``ctx.step_tokens`` of headroom for the turns to come.

:func:`prefix_hash` is *elision-neutral*: a tool result (or tool-call arguments)
hashes by the fingerprint of its original content, which an elision stub carries,
so eliding a message inside an already cut region does not invalidate the cut.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from policies.base import CutState, Memo, Message, PolicyContext
from policies.identity_memo import IdentityMemo
from policies.units import HANDOFF_MARK, TOOL_ROLES, Region, called_function

_FP = re.compile(r"sha256:([0-9a-f]{16})\]?\"?\}?$")
ARGS_KEY = "handoff_elided"


def dumps(value: Any) -> bytes:
    """Canonical JSON (sorted keys); falls back to ``json`` for what orjson refuses."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode()


def fingerprint(value: Any, memo: IdentityMemo | None = None) -> str:
    """Short content hash carried by elision stubs."""
    return content_digest(value, memo)[0]


def content_digest(value: Any, memo: IdentityMemo | None = None) -> tuple[str, int]:
    """``value``'s fingerprint and canonical JSON size. ``memo`` (a context's
    ``contents``) keeps them by identity: a tool result is fingerprinted for its stub
    and again for the prefix hash, and it is the bulk of a long history's bytes."""
    if memo is not None:
        hit = memo.get(value)
        if hit is not None:
            return hit  # type: ignore[no-any-return]
    raw = dumps(value)
    found = (hashlib.sha256(raw).hexdigest()[:16], len(raw))
    if memo is not None:
        memo.put(value, found)
    return found


def _fp_of(value: Any, memo: IdentityMemo | None) -> str:
    """The fingerprint of original content, read back from a stub if ``value`` is one."""
    if isinstance(value, str) and value.startswith((HANDOFF_MARK, '{"' + ARGS_KEY)):
        m = _FP.search(value)
        if m:
            return m.group(1)
    return fingerprint(value, memo)


def _canonical(m: Message, memo: IdentityMemo | None) -> Any:
    role = m.get("role")
    if role in TOOL_ROLES:
        return {**m, "content": _fp_of(m.get("content"), memo)}
    calls = m.get("tool_calls")
    if role == "assistant" and isinstance(calls, list):
        return {**m, "tool_calls": [_canonical_call(c, memo) for c in calls]}
    return m


def _canonical_call(call: Any, memo: IdentityMemo | None) -> Any:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or "arguments" not in fn:
        return call
    return {**call, "function": {**fn, "arguments": _fp_of(fn["arguments"], memo)}}


def prefix_hash(messages: Sequence[Message], memo: Memo | None = None) -> str:
    """Stable sha256 over the messages' canonical JSON digests, blind to handoff's
    elision stubs. ``memo`` (a :class:`PolicyContext`'s) keeps each message's digest
    by identity, so the several prefix checks of one compression (and, for a resent
    history, of the turns after it) hash it once."""
    if memo is None:
        digests = [hashlib.sha256(dumps(_canonical(m, None))).digest() for m in messages]
        return hashlib.sha256(b"".join(digests)).hexdigest()
    known, contents = memo.digests, memo.contents
    now, then = known.now, known.then  # IdentityMemo.get, inlined: this runs per message, often
    out = []
    for m in messages:
        hit = now.get(id(m))
        if hit is None or hit[0] is not m:
            hit = then.get(id(m))
            if hit is None or hit[0] is not m:
                hit = (m, hashlib.sha256(dumps(_canonical(m, contents))).digest())
            now[id(m)] = hit
        out.append(hit[1])
    return hashlib.sha256(b"".join(out)).hexdigest()  # the same as updating per digest


def size(ctx: PolicyContext, message: Message) -> int:
    """What one message adds to the prompt, by the context's own counter."""
    return ctx.count([message]) - ctx.count([])


def weight(ctx: PolicyContext, messages: Sequence[Message]) -> int:
    """What the messages add to the prompt together (one count, not one per message)."""
    return ctx.count(messages) - ctx.count([])


def previous_cut(
    messages: Sequence[Message],
    reg: Region,
    prev: CutState | None,
    policy: str,
    memo: Memo | None = None,
) -> int | None:
    """The previous turn's cut if ``policy`` made it and the history still starts so."""
    if prev is None or prev.policy != policy or prev.cut <= 0 or prev.cut not in reg.points:
        return None
    end = reg.end(prev.cut)
    return prev.cut if prefix_hash(messages[:end], memo) == prev.prefix_hash else None


def search_cut(
    ctx: PolicyContext, points: Sequence[int], build: Callable[[int], Sequence[Message]]
) -> int:
    """The smallest cut among ``points`` leaving ``step_tokens`` of headroom, else the
    smallest that fits, else the largest. Binary search; a fit is always verified."""
    for limit in (ctx.budget - ctx.step_tokens, ctx.budget):
        lo, hi = 0, len(points)
        while lo < hi:
            mid = (lo + hi) // 2
            if ctx.count(build(points[mid])) <= limit:
                hi = mid
            else:
                lo = mid + 1
        if lo < len(points):
            return points[lo]
    return points[-1]


def preview(message: Message, limit: int = 80) -> str:
    """A one-line glimpse of a message for omission notes."""
    content = message.get("content")
    text = ""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        text = " ".join(t for t in parts if isinstance(t, str)) or "[non-text content]"
    calls = message.get("tool_calls")
    if not text and calls and isinstance(calls, list):
        names = [str(called_function(c).get("name", "?")) for c in calls if isinstance(c, dict)]
        text = "called " + ", ".join(names)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
