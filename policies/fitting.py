"""One request being fitted: the client's messages, each level's mark, and what they render.

Marks count in the client's own messages (see ``policies.base``), so rendering is a
pure function of the messages and the marks: every message before a rewriting
level's mark is shown as that level writes it, the units before the dropping
level's mark are replaced by its note, and all else is the client's message as it
came (the very object). A mark holds while the history still starts with the
messages it covers (:func:`prefix_hash`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any, Protocol

import orjson

from policies.base import CutState, Mark, Message, PolicyContext
from policies.units import HANDOFF_MARK, Shape, shape

NOTE_HEADER = (
    f"{HANDOFF_MARK}earlier messages of this conversation were left out to fit the model's "
    "context window. What they held, oldest first:]"
)
"""The first line of the note that stands for dropped messages. It never changes, and
each move of the cut appends a block to the note, so a prompt cache that matches
tokens (llama.cpp, vLLM) keeps the note's start."""

RECENT_SHARE = 2
"""The newest tool results are spared while together with their calls (the units that
hold them) they take at most 1/2 the budget."""

DROP = "drop"
"""The name of the dropping levels' shared mark (truncate, summarize, middle-out)."""


def dumps(value: Any) -> bytes:
    """Canonical JSON (sorted keys); falls back to ``json`` for what orjson refuses."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode()


def prefix_hash(messages: Sequence[Message], memo: Any = None) -> str:
    """sha256 over the messages' canonical JSON digests. ``memo`` (a context's
    ``Memo``) keeps each message's digest by identity, so a resent history is hashed
    only for its new messages."""
    if memo is None:
        return hashlib.sha256(
            b"".join(hashlib.sha256(dumps(m)).digest() for m in messages)
        ).hexdigest()
    now, then = memo.digests.now, memo.digests.then  # IdentityMemo.get, inlined: per message
    out = []
    for m in messages:
        hit = now.get(id(m))
        if hit is None or hit[0] is not m:
            hit = then.get(id(m))
            if hit is None or hit[0] is not m:
                hit = (m, hashlib.sha256(dumps(m)).digest())
            now[id(m)] = hit
        out.append(hit[1])
    return hashlib.sha256(b"".join(out)).hexdigest()


class Rewriter(Protocol):
    """A level that shows some single messages before its mark in a shorter form."""

    name: str

    def applies(self, fit: Fitting, i: int, mark: Mark) -> bool:
        """Whether message ``i`` is of the kind and in the part this level rewrites,
        under ``mark`` (set when ``mark.spare`` was the newest user message)."""
        ...

    def rewrite(self, message: Message, mark: Mark, fit: Fitting) -> dict[str, Any] | None:
        """``message`` as this level shows it, or None to leave it as it is. Decided from
        the message and the mark alone (never from a token count)."""
        ...


class Fitting:
    """The messages of one request, the marks that hold for them, and their rendering."""

    def __init__(
        self,
        messages: list[dict[str, Any]],
        ctx: PolicyContext,
        rewriters: Sequence[Rewriter],
        keep: int = 3,
        pin_opening: bool = False,
    ) -> None:
        self.msgs = messages
        self.ctx = ctx
        self._base = ctx.count([])
        self.shape: Shape = shape(messages, keep, pin_opening, self._fits_recent)
        self.rewriters = list(rewriters)
        self.marks: dict[str, Mark] = {}
        if ctx.previous is not None:
            self.marks = {
                name: mark for name, mark in ctx.previous.marks.items() if self.holds(mark)
            }

    # ------------------------------------------------------------------ marks

    def holds(self, mark: Mark) -> bool:
        return 0 < mark.upto <= len(self.msgs) and self.hash_upto(mark.upto) == mark.hash

    def hash_upto(self, upto: int) -> str:
        return prefix_hash(self.msgs[:upto], self.ctx.memo)

    def mark(self, name: str, upto: int, **fields: Any) -> Mark:
        """Set ``name``'s mark at ``upto`` (with its hash, and sparing today's newest
        user message); returns it."""
        new = Mark(upto, self.hash_upto(upto), spare=self.shape.newest_user, **fields)
        self.marks[name] = new
        return new

    def state(self) -> CutState:
        return CutState(dict(self.marks))

    # ------------------------------------------------------------------ rendering

    def dropped(self) -> list[int]:
        """Indices of the messages the drop mark replaces by its note, in order."""
        mark = self.marks.get(DROP)
        if mark is None:
            return []
        units = self.shape.droppable(reach_recent=True, spare=mark.spare)
        return [i for u in units if u.stop <= mark.upto for i in u]

    def version(self, i: int, force: str | None = None) -> dict[str, Any]:
        """Message ``i`` as the rewriters' marks show it; ``force`` names a rewriter to
        apply as if its mark were past ``i``."""
        m = self.msgs[i]
        for r in self.rewriters:
            mark = self.marks.get(r.name)
            if r.name == force and (mark is None or i >= mark.upto):
                keep = mark.keep if mark else 0
                mark = Mark(i + 1, "", keep=keep, spare=self.shape.newest_user)
            if mark is not None and i < mark.upto and r.applies(self, i, mark):
                new = self._rewritten(r, m, mark)
                if new is not None:
                    m = new
        return m

    def shown_by(self, r: Rewriter, i: int, mark: Mark) -> bool:
        """Does ``r`` rewrite message ``i`` under ``mark`` (on its own)?"""
        return self._rewritten(r, self.msgs[i], mark) is not None

    def _rewritten(self, r: Rewriter, m: dict[str, Any], mark: Mark) -> dict[str, Any] | None:
        """``r``'s rewrite of ``m``, remembered by identity (and by the mark's ``keep``)."""
        stubs = self.ctx.memo.stubs
        known: dict[tuple[str, int], Any] | None = stubs.get(m)
        if known is None:
            known = {}
            stubs.put(m, known)
        key = (r.name, mark.keep)
        if key not in known:
            known[key] = r.rewrite(m, mark, self)
        return known[key]  # type: ignore[no-any-return]

    def note(self) -> dict[str, Any] | None:
        mark = self.marks.get(DROP)
        if mark is None or not self.dropped():
            return None
        return {"role": "user", "content": NOTE_HEADER + "".join(mark.blocks)}

    def render(self) -> tuple[list[dict[str, Any]], list[int | None]]:
        """The messages to send, and for each the index of the client's message it
        shows (None for the note)."""
        gone = set(self.dropped())
        first = min(gone) if gone else -1
        note = self.note()
        out: list[dict[str, Any]] = []
        origins: list[int | None] = []
        for i in range(len(self.msgs)):
            if i == first and note is not None:
                out.append(note)
                origins.append(None)
            if i not in gone:
                out.append(self.version(i))
                origins.append(i)
        return out, origins

    # ------------------------------------------------------------------ measures

    def tokens(self) -> int:
        return self.ctx.count(self.render()[0])

    def _fits_recent(self, indices: Sequence[int]) -> bool:
        """Do these messages (the units of the newest tool results) fit the recent part's
        share of the budget (half)?"""
        return sum(self.size(self.msgs[i]) for i in indices) <= self.ctx.budget // RECENT_SHARE

    def size(self, message: Message) -> int:
        """What one message adds to the prompt, by the context's own counter."""
        return self.ctx.count([message]) - self._base
