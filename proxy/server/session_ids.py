"""Which session a chat request belongs to, known in the proxy at response time.

The store's writer threads turns (``proxy.store.placement``), maybe in another process
and later; the ``x-handoff-session`` response header cannot wait for it. So the proxy
names the session itself and sends the name with the record (``TurnRecord.session_id``):

* a request that strictly extends the latest history the proxy saw in a session (the
  reply, then the client's new messages, follow it) is announced as that session, as the
  writer continues it (a session head's history is the longest match);
* a client's own session id (``session_hint``) is announced as the session it named
  before, or as the session handoff's header named (the client sent it back);
* anything else gets a freshly minted id.

The writer obeys: a new session takes the announced id; a turn the writer threads into an
existing session (a continuation this proxy did not see, e.g. after a restart) records the
announced id as an alias of it (``session_aliases``), so every id a header gave resolves
in ``handoff sessions show``. The state lives in the store; this memory only spares the
request path from asking it, and is bounded by ``max_sessions``.
"""

from __future__ import annotations

import collections
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from proxy.store.ids import new_session_id


def _key(workspace: str, n: int, last: Any) -> Hashable:
    """A cheap key for a history: its workspace, length and last message's text."""
    content = last.get("content") if type(last) is dict else None
    return (workspace, n, content if type(content) is str else None)


class SessionIds:
    """The proxy's memory of each recent session's latest history, by a cheap key."""

    def __init__(self, max_sessions: int = 256) -> None:
        self.max_sessions = max_sessions
        self._latest: collections.OrderedDict[str, tuple[Hashable, Sequence[Any]]] = (
            collections.OrderedDict()
        )
        self._by_key: dict[Hashable, list[str]] = {}
        self._hints: collections.OrderedDict[tuple[str, str], str] = collections.OrderedDict()

    def announce(
        self, workspace: str, hint: str | None, messages: Sequence[Mapping[str, Any]]
    ) -> str:
        """The session id to announce for a request (see the module docstring)."""
        if hint:
            if hint in self._latest:
                return hint
            sid = self._hints.get((workspace, hint))
            if sid is None:
                sid = self._hints[(workspace, hint)] = new_session_id()
                if len(self._hints) > self.max_sessions:
                    self._hints.popitem(last=False)
            return sid
        # The longest remembered latest history that this request strictly extends: the
        # writer continues that session too (its head's history is the longest match).
        for n in range(len(messages) - 1, 0, -1):
            for sid in reversed(self._by_key.get(_key(workspace, n, messages[n - 1]), ())):
                if list(messages[:n]) == list(self._latest[sid][1]):
                    return sid
        return new_session_id()

    def answered(self, sid: str, workspace: str, messages: Sequence[Mapping[str, Any]]) -> None:
        """Remember ``messages`` as ``sid``'s latest history (held by reference)."""
        self._forget(sid)
        if not messages:
            return
        key = _key(workspace, len(messages), messages[-1])
        self._latest[sid] = (key, messages)
        self._by_key.setdefault(key, []).append(sid)
        if len(self._latest) > self.max_sessions:
            self._forget(next(iter(self._latest)))

    def _forget(self, sid: str) -> None:
        old = self._latest.pop(sid, None)
        if old is not None:
            sids = self._by_key[old[0]]
            sids.remove(sid)
            if not sids:
                del self._by_key[old[0]]
