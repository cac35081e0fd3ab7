"""The memory keeper folds a session's digest items as it grows: the same items, to the
item, as extracting the whole history again."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from policies.digest import items
from policies.memory import build_memory
from proxy.server.memory_keeper import _Drafts
from tests.strategies import conversations


@settings(max_examples=60, deadline=None)
@given(conversations(), st.data())
def test_folded_items_equal_the_whole_extraction(msgs: list[Any], data: st.DataObject) -> None:
    """Histories of one conversation at growing lengths, one edited on the way (a copy
    with its last user message changed): each time the items of history + reply, and the
    memory built on them, equal those of the whole list."""
    drafts = _Drafts()
    cuts = sorted(data.draw(st.lists(st.integers(1, len(msgs)), min_size=1, max_size=4)))
    edit = data.draw(st.booleans())
    for i, n in enumerate(cuts):
        history, reply = copy.deepcopy(msgs[: n - 1]), msgs[n - 1]
        if edit and i == len(cuts) - 1:
            for m in reversed(history):
                if m.get("role") == "user" and isinstance(m.get("content"), str):
                    m["content"] = "Rewrite everything in Rust instead. " + m["content"]
                    break
        whole = [*history, reply]
        found = drafts.items(history, reply)
        assert found == items(whole)
        assert build_memory(whole, found=found) == build_memory(whole)
