"""Values derived from parsed JSON, remembered by object identity from one turn to the next.

A parsed message is never mutated, and a resent history's messages are the very
objects of the last turn's parse (``proxy.ingress.incremental_parse``). So what was derived from a
message last turn (its token count, its digest, its elision stub) still holds
this turn if the object is the same, and a turn only pays for its new messages.

A :class:`IdentityMemo` keeps each entry with a strong reference to its object, so an
``id`` is never reused while its entry lives, and checks ``is`` on every hit. It
is generational: this turn's table takes last turn's entries as they are used,
and :meth:`next` starts the following turn from this one's, so what a turn no
longer uses is dropped after it.
"""

from __future__ import annotations

from typing import Any

Entries = dict[int, tuple[Any, Any]]


class IdentityMemo:
    """One kind of derived value, by object identity, for this turn and the last."""

    __slots__ = ("now", "then")

    def __init__(self, then: Entries | None = None) -> None:
        self.now: Entries = {}
        self.then: Entries = then if then is not None else {}

    def get(self, obj: Any) -> Any | None:
        """What was put for ``obj`` this turn or the last, else None."""
        key = id(obj)
        hit = self.now.get(key)
        if hit is None:
            hit = self.then.get(key)
            if hit is None or hit[0] is not obj:
                return None
            self.now[key] = hit
        elif hit[0] is not obj:
            return None
        return hit[1]

    def put(self, obj: Any, value: Any) -> None:
        self.now[id(obj)] = (obj, value)

    def next(self) -> IdentityMemo:
        """A recall for the next turn, starting from what this one used."""
        return IdentityMemo(self.now)

    def __len__(self) -> int:
        return len(self.now)
