"""The snapshot store's interface: what the proxy records, and what readers ask.

The proxy talks to a store only through :class:`Store` (record, health, lag, the
token-count calibration, a reader, start and close); the CLI, the ``/handoff/v1``
inspection API and tomorrow's web inspector and MCP server read through
:class:`StoreReader`. SQLite is the embedded default, and how it keeps up (a writer
process, caches) is its own business; a shared PostgreSQL store for teams implements
these two protocols and nothing more.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.decide.decision import Decision
from proxy.ingress.incremental_parse import Resends
from proxy.upstream.sse import choices_of, read_answer


def request_params(body: Mapping[str, Any]) -> dict[str, Any]:
    """A chat request's fields other than ``messages`` and ``model`` (tools, sampling…)."""
    return {k: v for k, v in body.items() if k not in ("messages", "model")}


@dataclass(slots=True)
class TurnRecord:
    """One chat request and its outcome, as the proxy hands it to the store.

    Treated as immutable (:func:`settled` makes a new one), but not ``frozen``: a
    frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``,
    several times slower, paid on the request path and twice a turn in the writer.
    """

    workspace: str  # x-handoff-workspace, or a hash of the API key (never the key)
    started_at: float  # unix time
    model: str
    upstream: str
    messages: Sequence[Mapping[str, Any]]  # the client's full history, as sent
    status: int = 0
    latency_ms: float = 0.0
    streamed: bool = False
    session_hint: str | None = None  # explicit conversation id from header/body
    decision: Decision | None = None
    forwarded: Sequence[Mapping[str, Any]] | None = None  # None when sent unchanged
    reply: Mapping[str, Any] | None = None  # the assistant message assembled
    usage: Mapping[str, Any] | None = None
    finish_reason: str | None = None
    error: Mapping[str, Any] | None = None  # upstream or proxy error body
    cancelled: bool = False  # client went away before the reply completed
    raw_response: bytes | None = None  # SSE bytes, only if configured
    request_params: Mapping[str, Any] = field(default_factory=dict)  # other body fields
    raw_request: bytes | None = None
    """The request body as received, when ``messages`` and ``request_params`` are its own:
    a store in another process re-reads them from it instead of having them serialised
    again (a client resends both, tools included, every turn)."""
    resends: Resends | None = field(default=None, repr=False, compare=False)
    """The earlier ``raw_request`` this one was found to repeat while it was parsed, for
    how many messages, and the bytes parsed besides: a store in another process that
    holds that body's parse ships only those bytes, and its writer neither rebuilds
    nor re-parses the body."""
    answer: bytes | None = None
    """A non-streamed answer's body as the upstream sent it, when the proxy had no need
    to parse it: the store's writer reads ``reply``, ``finish_reason``, ``usage`` and
    ``error`` from it (:func:`settled`), off the request path."""
    extends: tuple[list[Any], int] | None = field(default=None, repr=False, compare=False)
    """``(earlier, n)``: ``messages`` starts with ``earlier``'s first ``n`` messages, the
    very objects (the writer's decode builds it so). A cache holding ``earlier`` then
    knows that prefix without comparing it."""
    wire: str = "chat"
    """The wire format the client spoke (``chat``, ``responses``, ``anthropic``): the
    messages are chat-shaped whatever it was, and an export writes them back in it."""
    session_id: str | None = None
    """The session the proxy announced (``x-handoff-session``, see
    ``proxy.server.session_ids``): a new session takes this id; a turn threaded into
    another session records it as that session's alias."""
    choices: Sequence[Mapping[str, Any]] | None = None
    """Every choice (``index``, ``message``, ``finish_reason``) when the client asked for
    several (``n`` > 1); ``reply`` stays choice 0, the one histories go on with."""


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One session's structured memory, as the store keeps it (one per session, the
    newest replacing the last)."""

    workspace: str
    session_id: str
    memory: Mapping[str, Any]  # the sections (``policies.memory.SessionMemory.as_dict``)
    text: str  # the memory as recall inserts it (Markdown)
    source: str  # "digest" (built from the session) or "llm" (refined by the summarizer)
    reason: str  # what wrote it: "turns", "compressed", "handoff", "asked", "command"
    turns: int  # the user turns it covers
    updated_at: float = field(default_factory=time.time)
    of_turn: float | None = None
    """With ``session_id`` empty: the memory is of the session the writer threaded the
    turn begun at this time (in ``workspace``) into, which the writer names."""


def settled(turn: TurnRecord) -> TurnRecord:
    """``turn`` with what its unparsed ``answer`` says read into its fields."""
    if turn.answer is None:
        return turn
    return dataclasses.replace(turn, answer=None, **answer_fields(turn.status, turn.answer))


def answer_fields(status: int, answer: bytes) -> dict[str, Any]:
    """What an unparsed answer says, as the record's fields: the reply, finish_reason,
    usage and error."""
    reply, finish_reason, usage, error = read_answer(status, answer)
    return {
        "reply": reply,
        "finish_reason": finish_reason,
        "usage": usage,
        "error": error,
        "choices": choices_of(answer) if status < 400 else None,
    }


@dataclass(frozen=True, slots=True)
class StoreHealth:
    ok: bool
    path: str
    queue_depth: int = 0
    write_failures: int = 0  # failures since start: failed writes (retried), drops, deaths
    lost_turns: int = 0  # turns that will never be written: dropped, or held by a dead writer
    last_error: str | None = None
    writer: str = "thread"  # or "process <pid>": where the SQLite writes run
    oldest_unwritten_s: float | None = None  # age of the oldest turn not yet committed
    slowest_write_s: float = 0.0  # the longest a turn took from record() to disk, since start


def age_s(since: float | None) -> float | None:
    """Seconds since ``since`` (a ``time.monotonic()``), None for None."""
    return None if since is None else max(0.0, time.monotonic() - since)


class Store(Protocol):
    def record(self, turn: TurnRecord) -> None:
        """Queue a turn for writing. Never blocks and never raises."""

    def health(self) -> StoreHealth: ...

    def lag_s(self) -> float:
        """Seconds the oldest turn not yet on disk has waited, 0.0 when none waits.
        Lock-free and cheap: asked before every chat request (``store_gate``)."""

    def save_calibration(self, data: Mapping[str, Any]) -> None:
        """Queue the token-count calibration for writing (non-blocking, as :meth:`record`)."""

    def load_calibration(self) -> dict[str, Any]:
        """The calibration saved last (blocking: called off the event loop, at start)."""
        ...

    def reader(self) -> StoreReader:
        """Read-only queries over what this store has written (``/handoff/v1``)."""
        ...

    async def start(self) -> None: ...

    def save_memory(self, memory: MemoryRecord) -> None:
        """Queue a session's memory for the writer's next transaction, replacing its last
        (non-blocking, as :meth:`record`; queued after the turns recorded before it)."""

    async def close(self) -> None:
        """Drain everything queued, then close."""

    def load_limits(self) -> dict[str, Any]:
        """The windows upstreams named in overflow errors, as last saved (empty when
        none): :meth:`proxy.decide.windows.learned.LearnedLimits.snapshot`'s shape."""

    def save_limits(self, data: Mapping[str, Any]) -> None:
        """Queue the learned windows for writing, next to calibration (non-blocking):
        called when one is learned, so a restart does not pay the refusal again."""

    def load_summary(self, key: str) -> str | None:
        """A summary written earlier, by the hash of what it summarized (blocking: call it
        in a thread); None when there is none."""

    def save_summary(self, key: str, text: str) -> None:
        """Queue a summary for writing (non-blocking), so a restart does not pay again."""


class StoreReader(Protocol):
    """Read-only queries (CLI, ``/handoff/v1``), usable while a proxy writes.

    Sessions are named by id, a unique start or end of it, or the client's own name; lookups
    raise :class:`proxy.store.errors.SessionNotFound` / ``AmbiguousSession`` /
    ``TurnNotFound``. Results are JSON-ready dicts.
    """

    def within(self, workspace: str) -> StoreReader:
        """The same store limited to ``workspace`` and its sub-workspaces: to it, every
        other session does not exist."""
        ...

    def resolve(self, ref: str) -> str: ...

    def list_sessions(
        self,
        *,
        model: str | None = None,
        since: float | None = None,
        search: str | None = None,
        workspace: str | None = None,
        limit: int = 100,
        errors: bool = False,
    ) -> list[dict[str, Any]]: ...

    def session(self, ref: str) -> dict[str, Any]: ...

    def turn(self, ref: str, n: int) -> dict[str, Any]: ...

    def turns(
        self, ref: str, upto: int | None = None, progress: Callable[[int, int], None] | None = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The session and its turns in full (up to ``upto``); ``progress(done, total)``
        after each turn read."""
        ...

    def diff(self, ref: str, n: int) -> dict[str, Any]: ...

    def load_calibration(self) -> dict[str, Any]: ...

    def memory(self, ref: str) -> dict[str, Any] | None:
        """The memory of session ``ref``, None when it has none yet."""
        ...

    def memories(self, workspace: str, *, query: str = "", limit: int = 5) -> list[dict[str, Any]]:
        """``workspace``'s memories (that workspace only), the best match to ``query``
        first and, among equals, the newest."""
        ...

    def recalled(
        self, workspace: str, opening: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], list[str]] | None:
        """The message recall put into the first turn of the conversation that opened with
        ``opening`` in ``workspace``, and the sessions it named (replayed after a restart)."""
        ...
