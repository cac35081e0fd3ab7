"""How handoff judged one request: the decision the engine makes and the store records."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)  # not frozen: built every turn (see TurnRecord)
class Decision:
    """How handoff judged one request (see the decision engine)."""

    action: str  # "passthrough" | "compressed" | "rejected" | "unknown-window"
    window: int | None = None
    budget: int | None = None
    tokens: int | None = None  # prompt tokens counted for the original request
    forwarded_tokens: int | None = None
    exact: bool = True
    policies: tuple[str, ...] = ()  # policies that changed something, in order
    steps: tuple[Mapping[str, Any], ...] = ()  # per-policy detail: removed counts, notes

    def as_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (by hand: ``dataclasses.asdict`` deep-copies)."""
        return {
            "action": self.action,
            "window": self.window,
            "budget": self.budget,
            "tokens": self.tokens,
            "forwarded_tokens": self.forwarded_tokens,
            "exact": self.exact,
            "policies": self.policies,
            "steps": self.steps,
        }

    def as_list(self) -> list[Any]:
        """The fields in order, for the writer's frames: orjson writes a list far faster
        than the dataclass or :meth:`as_dict`."""
        return [self.action, self.window, self.budget, self.tokens, self.forwarded_tokens,
                self.exact, self.policies, self.steps]  # fmt: skip

    @classmethod
    def from_list(cls, values: Sequence[Any]) -> Decision:
        action, window, budget, tokens, forwarded_tokens, exact, policies, steps = values
        return cls(action, window, budget, tokens, forwarded_tokens, exact, tuple(policies),
                   tuple(steps))  # fmt: skip
