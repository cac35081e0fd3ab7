"""Which model writes a conversation's summary: one that can read what it summarizes.

The configured ``compression.summarize.model``, else the model with the largest window
that the conversation used on this route (a switch down to a small model is exactly
when a summary is needed, and the small model cannot read the history). The dropped
part is split into pieces that fit the chosen window (:class:`~proxy.decide.summarizer.
Summarizer`), so no call is larger than the model that reads it; a model whose window
cannot hold even the instructions, a summary and its answer is not chosen at all.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from policies.chain import Compression
from proxy.decide.windows import ModelInfo

SUMMARY_HEADER = "x-handoff-summary"


@dataclass(frozen=True, slots=True)
class SummarizerChoice:
    """``model`` None: no summary, and ``why`` says so; else the window it reads with
    (None: unknown, one piece) and how its tokens are counted."""

    model: str | None
    window: int | None = None
    count: Callable[[str], int] | None = None
    why: str = ""


class RouteModels:
    """The models each conversation (by key) used on each route; a bounded LRU."""

    def __init__(self, capacity: int = 4096) -> None:
        self.capacity = capacity
        self._seen: OrderedDict[tuple[str, str], tuple[str, ...]] = OrderedDict()

    def saw(self, key: str, upstream: str, model: str) -> None:
        slot = (key, upstream)
        models = self._seen.pop(slot, ())
        self._seen[slot] = models if model in models else (*models, model)
        if len(self._seen) > self.capacity:
            self._seen.popitem(last=False)

    def used(self, key: str, upstream: str) -> tuple[str, ...]:
        return self._seen.get((key, upstream), ())


def choose(
    configured: str | None,
    used: Iterable[str],
    lookup: Callable[[str], ModelInfo | None],
    least_window: int,
) -> tuple[str | None, int | None, str]:
    """(model, its window, why none): the configured model whatever its window (the user
    chose it; unknown windows read in one piece), else the largest known window among
    ``used`` if it holds at least ``least_window`` tokens."""
    if configured:
        info = lookup(configured)
        return configured, info.context_window if info else None, ""
    known = [(info.context_window, m) for m in used if (info := lookup(m)) is not None]
    if not known:
        return None, None, "no model this conversation used here has a known window"
    window, model = max(known)
    if window < least_window:
        return (
            None,
            None,
            (
                f"the largest window this conversation used here ({model}, {window:,} tokens) "
                f"cannot hold a summary call ({least_window:,}); set compression.summarize.model"
            ),
        )
    return model, window, ""


def least_window(max_tokens: int) -> int:
    """The smallest window a summarizer model needs: its instructions, a summary so far,
    the answer (``max_tokens`` each at most), and some text to read."""
    return 3 * max_tokens + 1024


def summary_said(result: Compression, unused: str, in_chain: bool) -> str:
    """The ``x-handoff-summary`` header: whether the dropped messages got a summary, and
    why not when not; "" when nothing was dropped or summaries are not in the chain."""
    if not in_chain:
        return ""
    for step in result.steps:
        if step.policy == "summarize":
            note = step.note
            if "summary not used: " in note:
                return "not used: " + note.split("summary not used: ", 1)[1].rstrip(")")
            return f"used: {note}" if note else ""
    dropped = any(s.policy == "truncate" and s.removed_messages for s in result.steps)
    return f"not used: {unused}" if dropped and unused else ""


def header_value(said: str) -> str:
    """``said`` as a header value: ASCII, at most 300 characters."""
    return said.encode("ascii", "replace").decode()[:300]
