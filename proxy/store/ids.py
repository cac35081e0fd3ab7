"""Session ids: creation time first, so new sessions go at the end of every index.

An id is the creation time in microseconds (13 hex digits) followed by 44 random
bits (11 hex digits). Random ids put every new session at a random place in the
``sessions`` primary key and in ``session_messages``, so each insert touched its own
page and the writer's cost a turn grew with the store; time-ordered ids keep the pages
being written few and hot (figures in bench/NOTES.md).

Ids must be unique, not secret: the store and its API are guarded by file
permissions and ``server.access_key``, not by unguessable ids. So the random part
comes from :mod:`random` (reseeded in forked children), not a system call per id.
"""

from __future__ import annotations

import random
import time

ID_LENGTH = 24


def new_session_id() -> str:
    """A fresh session id; ids sort by creation time (to the microsecond)."""
    return f"{time.time_ns() // 1000:013x}{random.getrandbits(44):011x}"
