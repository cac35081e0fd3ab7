"""How a model name as typed maps to a table key. Pure functions, no state.

A name is reduced step by step (provider prefix, Bedrock/Vertex decorations, Ollama
tag, date and version suffixes), and each form is looked up exactly and then by its
longest key prefix that ends at a separator. The longest key wins, so
``gpt-4o-2024-05-13`` (its own entry) beats ``gpt-4o``, and ``gpt-4o`` never
matches ``gpt-4`` because ``o`` is not a separator.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

_SEPARATORS = frozenset("-:_@/")
_BEDROCK_PREFIX = re.compile(
    r"^(?:(?:us|eu|apac|global|jp|au)\.)?"
    r"(?:anthropic|meta|mistral|amazon|cohere|deepseek|qwen|openai|ai21|moonshot)\."
)
_VERSION_SUFFIX = re.compile(r"-v\d+(?::\d+)?$")  # Bedrock: -v1:0
_VERTEX_SUFFIX = re.compile(r"@[\w.-]+$")  # Vertex: claude-3-5-sonnet@20240620
_DATE_SUFFIX = re.compile(r"-(?:latest|\d{4}-\d{2}-\d{2}|\d{8}|\d{4})$")


@dataclass(frozen=True, slots=True)
class Candidate:
    """One form of the requested name, and the steps that produced it."""

    name: str
    steps: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Match:
    """A table key found for a candidate; ``exact`` is False for a prefix match."""

    key: str
    candidate: Candidate
    exact: bool

    def rank(self, order: int) -> tuple[int, bool, int]:
        return (len(self.key), self.exact, -order)

    def describe(self) -> str:
        how = "is exactly" if self.exact else "starts with"
        text = f"{self.candidate.name!r} {how} the entry {self.key!r}"
        if self.candidate.steps:
            return ", then ".join(self.candidate.steps) + ": " + text
        return text


def candidates(model: str) -> list[Candidate]:
    """Every reduced form of ``model``, most literal first."""
    name = model.strip().lower()
    out = [Candidate(name, ())]
    steps: tuple[str, ...] = ()

    def add(new: str, step: str) -> None:
        nonlocal name, steps
        if new and new != name:
            name, steps = new, (*steps, step)
            out.append(Candidate(name, steps))

    if "/" in name:
        add(name.rsplit("/", 1)[1], f"provider prefix {name.rsplit('/', 1)[0] + '/'!r} removed")
    m = _BEDROCK_PREFIX.match(name)
    if m:
        add(name[m.end() :], f"Bedrock prefix {m.group(0)!r} removed")
    for pattern, what in ((_VERSION_SUFFIX, "version"), (_VERTEX_SUFFIX, "Vertex version")):
        m = pattern.search(name)
        if m:
            add(name[: m.start()], f"{what} suffix {m.group(0)!r} removed")
    if ":" in name:
        base, tag = name.split(":", 1)
        add(base, f"Ollama tag {':' + tag!r} removed")
    while m := _DATE_SUFFIX.search(name):
        add(name[: m.start()], f"date/version suffix {m.group(0)!r} removed")
    return out


def best_match(model: str, keys: Collection[str]) -> Match | None:
    """The longest key that ``model`` (in any reduced form) equals or starts with."""
    best: Match | None = None
    best_rank: tuple[int, bool, int] | None = None
    for order, cand in enumerate(candidates(model)):
        for match in _matches(cand, keys):
            rank = match.rank(order)
            if best_rank is None or rank > best_rank:
                best, best_rank = match, rank
    return best


def _matches(cand: Candidate, keys: Collection[str]) -> Iterable[Match]:
    if cand.name in keys:
        yield Match(cand.name, cand, exact=True)
    for i in range(len(cand.name) - 1, 0, -1):
        if cand.name[i] in _SEPARATORS and cand.name[:i] in keys:
            yield Match(cand.name[:i], cand, exact=False)
            return


def glob_specificity(pattern: str) -> tuple[bool, int]:
    """Sort key for config patterns: a literal name beats any glob, then longer literals."""
    literal = sum(1 for c in pattern if c not in "*?[]")
    return (not any(c in pattern for c in "*?["), literal)


def glob_matches(model: str, patterns: Iterable[str]) -> list[str]:
    """Config patterns that match ``model`` or one of its reduced forms, most specific first."""
    forms = [c.name for c in candidates(model)]
    hits = [
        p for p in patterns if any(fnmatch.fnmatchcase(form, p.strip().lower()) for form in forms)
    ]
    return sorted(hits, key=glob_specificity, reverse=True)
