"""Which context window applies to a model name, and why.

Precedence, highest first: a limit the upstream named in an overflow error
(:mod:`~proxy.decide.windows.learned`, while no larger window has been configured or
discovered since), a config override that sets ``context_window``
(``[models."NAME"]``, globs allowed), a window an upstream reported (its models
listing or its server's own endpoint), the built-in table,
``tokens.default_context_window``. A
config override without a window still sets ``max_output_tokens``/``tokenizer``
on top of whatever window applies. Unknown models give ``None``: the proxy then
passes the request through untouched.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from proxy.config import ModelOverride
from proxy.decide.windows.builtin import BuiltinEntry, load_builtin
from proxy.decide.windows.learned import LearnedLimits
from proxy.decide.windows.matching import best_match, candidates, glob_matches

_MAX_CACHED = 4096
"""Distinct (model, upstream) lookups remembered; the cache starts over past this."""


@dataclass(frozen=True)
class ModelInfo:
    """The limits that apply to one model name.

    ``source`` is ``builtin``, ``config``, ``discovered:<upstream>``,
    ``learned:<upstream>`` (named in its overflow error) or ``default``;
    ``matched`` is the table key, config pattern or listed id that gave the window.
    ``tokenizer`` is a tiktoken encoding name, ``estimate``, or None (nearest).
    """

    name: str
    context_window: int
    max_output_tokens: int
    tokenizer: str | None
    source: str
    matched: str


@dataclass(frozen=True, slots=True)
class _Resolution:
    info: ModelInfo
    reasons: tuple[str, ...]


class WindowRegistry:
    """Looks up windows; ``learn`` adds what upstreams report (safe from any thread)."""

    def __init__(
        self,
        overrides: Mapping[str, ModelOverride] | None = None,
        default_context_window: int | None = None,
        builtin: list[BuiltinEntry] | None = None,
    ) -> None:
        self._overrides = {k.strip().lower(): v for k, v in (overrides or {}).items()}
        self._default = default_context_window
        self._builtin = load_builtin() if builtin is None else builtin
        index: dict[str, BuiltinEntry] = {}
        for entry in self._builtin:
            for key in (entry.name, *entry.aliases):
                index.setdefault(key, entry)
        self._index = MappingProxyType(index)
        self._discovered: Mapping[str, Mapping[str, int]] = MappingProxyType({})
        self._lookups: dict[tuple[str, str | None], ModelInfo | None] = {}
        self._override_cache: dict[str, ModelOverride | None] = {}
        self.limits = LearnedLimits()

    def learn_limit(self, model: str, upstream: str, limit: int) -> bool:
        """An upstream refused ``model`` naming ``limit`` as its window: use it from now
        on (True if it is news; it is then persisted through ``limits.on_change``)."""
        current = self.lookup(model, upstream)
        against = current.context_window if current is not None else None
        if not self.limits.learn(upstream, model, limit, against):
            return False
        self.forget_lookups()
        return True

    def forget_lookups(self) -> None:
        """Resolve every name afresh (after :attr:`limits` changed under it)."""
        self._lookups = {}

    def learn(self, upstream_name: str, windows: Mapping[str, int]) -> None:
        """Remember the windows an upstream listed (replacing its earlier listing)."""
        clean = {k.strip().lower(): int(v) for k, v in windows.items() if int(v) > 0}
        merged = dict(self._discovered)
        merged[upstream_name] = MappingProxyType(clean)
        self._discovered = MappingProxyType(merged)  # one atomic rebind
        self._lookups = {}  # what was resolved before may resolve differently now

    def lookup(self, model: str, upstream: str | None = None) -> ModelInfo | None:
        """The limits for ``model``, or None when nobody knows it and there is no default.

        Cached per (model, upstream): every request asks, and name matching is not free."""
        key = (model, upstream)
        try:
            return self._lookups[key]
        except KeyError:
            pass
        res = self._resolve(model, upstream)
        info = res.info if res else None
        if len(self._lookups) >= _MAX_CACHED:
            self._lookups = {}
        self._lookups[key] = info
        return info

    def explain(self, model: str, upstream: str | None = None) -> str:
        """Human text: which entry matched, by which rule, and what overrode what."""
        res = self._resolve(model, upstream)
        if res is None:
            return (
                f"{model!r}: unknown model. No built-in entry, config override or "
                "discovered window matches, and tokens.default_context_window is unset, "
                "so requests pass through untouched. Add [models."
                f'"{model}"] context_window = N to your config.'
            )
        i = res.info
        head = (
            f"{model!r}: context window {i.context_window}, max output {i.max_output_tokens}, "
            f"from {i.source} entry {i.matched!r}"
        )
        return "\n".join((head, *(f"  - {r}" for r in res.reasons)))

    def override_for(self, model: str) -> ModelOverride | None:
        """The merged config override for ``model`` (e.g. for its ``margin``), if any."""
        try:
            return self._override_cache[model]
        except KeyError:
            pass
        pats = glob_matches(model, self._overrides)
        merged = _merge([self._overrides[p] for p in pats]) if pats else None
        if len(self._override_cache) >= _MAX_CACHED:
            self._override_cache = {}
        self._override_cache[model] = merged
        return merged

    def entries(self) -> list[ModelInfo]:
        """Every known window: built-in, then discovered, then config (literal names)."""
        out = [
            ModelInfo(e.name, e.context_window, e.max_output_tokens, e.tokenizer, "builtin", e.name)
            for e in self._builtin
        ]
        for upstream, windows in self._discovered.items():
            for name in sorted(windows):
                info = self.lookup(name, upstream)
                if info is not None:
                    out.append(info)
        for pattern, ov in self._overrides.items():
            if ov.context_window is not None:
                out.append(
                    ModelInfo(
                        pattern,
                        ov.context_window,
                        ov.max_output_tokens or output_share(ov.context_window),
                        ov.tokenizer,
                        "config",
                        pattern,
                    )
                )
        return out

    def _resolve(self, model: str, upstream: str | None) -> _Resolution | None:
        reasons: list[str] = []
        window: tuple[int, str, str] | None = None  # (tokens, source, matched)
        max_out: int | None = None
        tokenizer: str | None = None
        explicit_out = False  # a config override sets max_output_tokens

        match = best_match(model, self._index)
        if match is not None:
            e = self._index[match.key]
            window = (e.context_window, "builtin", match.key)
            max_out, tokenizer = e.max_output_tokens, e.tokenizer
            reasons.append(f"built-in: {match.describe()} (figures from {e.source_url})")

        found = self._discovered_window(model, upstream)
        if found is not None:
            tokens, up, listed = found
            window = (tokens, f"discovered:{up}", listed)
            reasons.append(f"upstream {up!r} lists {listed!r} with a {tokens}-token window")

        pats = glob_matches(model, self._overrides)
        if pats:
            ov = _merge([self._overrides[p] for p in pats])
            reasons.append(f"config [models.{pats[0]!r}] applies: {_fields(ov)}")
            if ov.context_window is not None:
                window = (ov.context_window, "config", pats[0])
            max_out = ov.max_output_tokens or max_out
            explicit_out = ov.max_output_tokens is not None
            tokenizer = ov.tokenizer or tokenizer

        learned = self.limits.get(upstream, model) if self.limits else None
        if learned is not None:
            lim, up = learned
            if lim.applies(window[0] if window else None):
                window = (lim.limit, f"learned:{up}", model)
                reasons.append(f"upstream {up!r} named a {lim.limit}-token window in an error")
            else:
                reasons.append(
                    f"the {lim.limit}-token window upstream {up!r} once named gives way to "
                    "a larger one configured or discovered since"
                )
        if window is None and self._default is not None:
            window = (self._default, "default", "tokens.default_context_window")
            reasons.append("no entry matches: using tokens.default_context_window")
        if window is None:
            return None
        tokens, source, matched = window
        if source != "builtin" and match is not None:
            reasons.append(f"the {source} window beats the built-in {match.key!r}")
        own_max_out = explicit_out or source == "builtin"  # a figure for this very window
        if max_out is None or (not own_max_out and max_out > tokens // 2):
            # No figure of its own for this window (a config entry with only a window, a
            # learned or discovered one): a quarter of it, so the prompt keeps the rest.
            max_out = output_share(tokens)
        info = ModelInfo(model, tokens, max_out, tokenizer, source, matched)
        return _Resolution(info, tuple(reasons))

    def _discovered_window(self, model: str, upstream: str | None) -> tuple[int, str, str] | None:
        """Exact listed id (or its provider-less form); the smallest if upstreams disagree."""
        forms = [c.name for c in candidates(model)[:2]]
        pools = self._discovered
        if upstream is not None:
            pools = {upstream: pools[upstream]} if upstream in pools else {}
        hits = [
            (windows[form], up, form)
            for up, windows in pools.items()
            for form in forms
            if form in windows
        ]
        return min(hits) if hits else None


def output_share(window: int) -> int:
    """The output a window reserves when nothing says how much: a quarter of it (then
    capped by ``tokens.default_max_output_tokens``, 4,096 by default). An 8k local model
    keeps 6k for the prompt; from 16k up the cap decides."""
    return max(1, window // 4)


def _merge(overrides: list[ModelOverride]) -> ModelOverride:
    """Most specific first: each field comes from the most specific override that sets it."""
    fields: dict[str, object] = {}
    for ov in reversed(overrides):
        fields.update(ov.model_dump(exclude_none=True))
    return ModelOverride.model_validate(fields)


def _fields(ov: ModelOverride) -> str:
    return ", ".join(f"{k} = {v!r}" for k, v in ov.model_dump(exclude_none=True).items())
