"""Values remembered by object identity, from one turn to the next."""

from __future__ import annotations

import copy

from policies.identity_memo import IdentityMemo


def test_an_equal_object_is_not_the_same_object() -> None:
    """Only the very object that was seen hits; an equal copy misses."""
    seen = IdentityMemo()
    msg = {"role": "user", "content": "hi"}
    seen.put(msg, 7)
    assert seen.get(msg) == 7
    assert seen.get(copy.deepcopy(msg)) is None


def test_the_next_turn_keeps_what_this_one_used() -> None:
    """``next()`` carries this turn's entries, including those taken from the last turn,
    and drops what this turn did not use."""
    first = IdentityMemo()
    kept, dropped = {"role": "user", "content": "a"}, {"role": "user", "content": "b"}
    first.put(kept, 1)
    first.put(dropped, 2)
    second = first.next()
    assert len(second) == 0 and second.get(kept) == 1  # taken along on use
    third = second.next()
    assert third.get(kept) == 1
    assert third.get(dropped) is None
