"""``elide-tool-results``: swap old, large tool outputs for a stub saying what went.

The cheapest step for agent sessions: structure and pairing stay, only the bulk
goes. Eligible are tool results (and, with ``elide_arguments``, tool-call
arguments) of at least ``min_tokens`` that stand before the newest ``keep`` tool
results and before the tail. They are elided oldest first, as far as needed.

The state is one boundary, ``CutState.elided_upto``: everything eligible before it
is elided. It is reused while the history still starts the same and only moves
forward, leaving ``step_tokens`` of headroom, so earlier stubs stay byte-identical.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from policies.base import CutState, Message, PolicyContext, PolicyResult
from policies.cuts import ARGS_KEY, content_digest, fingerprint, prefix_hash, size
from policies.identity_memo import IdentityMemo
from policies.units import HANDOFF_MARK, TOOL_ROLES, as_dicts, called_function, tail_start


def _kb(n: int) -> str:
    return f"{n:,} B" if n < 1024 else f"{n / 1024:,.0f} KB"


def tool_stub(message: Message, tokens: int, memo: IdentityMemo | None = None) -> dict[str, Any]:
    """The tool message with its content replaced by a stub (other fields kept)."""
    content = message.get("content")
    call = message.get("tool_call_id") or message.get("name") or "?"
    fp, nbytes = content_digest(content, memo)
    text = (
        f"{HANDOFF_MARK}tool output elided — {tokens:,} tokens, {_kb(nbytes)}; "
        f"call_id {call}; sha256:{fp}]"
    )
    return {**message, "content": text}


def _args_stub(call: Any, tokens: int) -> Any:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
        return call
    args = fn["arguments"]
    note = f"arguments elided — {tokens:,} tokens; sha256:{fingerprint(args)}"
    return {**call, "function": {**fn, "arguments": orjson.dumps({ARGS_KEY: note}).decode()}}


def _is_stub(message: Message) -> bool:
    content = message.get("content")
    if message.get("role") in TOOL_ROLES:
        return isinstance(content, str) and content.startswith(HANDOFF_MARK)
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return False
    return any(f'"{ARGS_KEY}"' in str(called_function(c).get("arguments")) for c in calls)


class ElideToolResults:
    """Replace old large tool results (optionally arguments) with short stubs."""

    name = "elide-tool-results"

    def __init__(self, keep: int = 3, min_tokens: int = 200, elide_arguments: bool = False):
        self.keep = keep
        self.min_tokens = min_tokens
        self.elide_arguments = elide_arguments

    async def apply(self, messages: Sequence[Message], ctx: PolicyContext) -> PolicyResult:
        msgs = as_dicts(messages)
        if ctx.count(msgs) <= ctx.budget:
            return PolicyResult(msgs, changed=False)
        return self._run(msgs, ctx, extend=True)

    def replay(self, messages: Sequence[Message], ctx: PolicyContext) -> PolicyResult:
        """Re-apply the previous turn's elisions only (no new ones)."""
        return self._run(as_dicts(messages), ctx, extend=False)

    def _run(self, msgs: list[dict[str, Any]], ctx: PolicyContext, extend: bool) -> PolicyResult:
        stubs = self._candidates(msgs, ctx)
        upto = self._previous_upto(msgs, ctx)
        n = sum(1 for i in stubs if i < upto)
        if extend and ctx.count(self._elide(msgs, stubs, n)) > ctx.budget:
            n = self._how_many(msgs, stubs, n, ctx)
        if n == 0:
            return PolicyResult(msgs, changed=False)
        out = self._elide(msgs, stubs, n)
        upto = max(upto, list(stubs)[n - 1] + 1)
        before, after = ctx.count(msgs), ctx.count(out)
        state = CutState(cut=0, elided_upto=upto, elided_hash=prefix_hash(msgs[:upto], ctx.memo))
        return PolicyResult(
            out,
            changed=True,
            removed_tokens=before - after,
            note=f"elided {n} old tool output(s)",
            cut=state,
        )

    def _how_many(
        self,
        msgs: list[dict[str, Any]],
        stubs: dict[int, dict[str, Any]],
        n: int,
        ctx: PolicyContext,
    ) -> int:
        """Fewest elisions (at least ``n``) leaving step headroom, else fitting, else all."""
        for limit in (ctx.budget - ctx.step_tokens, ctx.budget):
            lo, hi = n, len(stubs) + 1
            while lo < hi:
                mid = (lo + hi) // 2
                if ctx.count(self._elide(msgs, stubs, mid)) <= limit:
                    hi = mid
                else:
                    lo = mid + 1
            if lo <= len(stubs):
                return lo
        return len(stubs)

    @staticmethod
    def _elide(
        msgs: list[dict[str, Any]], stubs: dict[int, dict[str, Any]], n: int
    ) -> list[dict[str, Any]]:
        chosen = dict(list(stubs.items())[:n])
        return [chosen.get(i, m) for i, m in enumerate(msgs)]

    def _candidates(
        self, msgs: list[dict[str, Any]], ctx: PolicyContext
    ) -> dict[int, dict[str, Any]]:
        """Eligible messages, oldest first, mapped to their stubbed versions."""
        tools = [i for i, m in enumerate(msgs) if m.get("role") in TOOL_ROLES]
        protect = tail_start(msgs)
        if self.keep and tools:
            protect = min(protect, tools[-self.keep] if len(tools) >= self.keep else tools[0])
        out: dict[int, dict[str, Any]] = {}
        for i, m in enumerate(msgs[:protect]):
            stub = self._stub(m, ctx)
            if stub is not None:
                out[i] = stub
        return out

    def _stub(self, m: dict[str, Any], ctx: PolicyContext) -> dict[str, Any] | None:
        """``m``'s stub if it is worth eliding, remembered per message (a resent history
        is stubbed once: its messages are last turn's objects, see ``Memo``)."""
        known = ctx.memo.stubs.get(m)
        if known is not None:
            return known[0]  # type: ignore[no-any-return]
        stub = self._new_stub(m, ctx)
        ctx.memo.stubs.put(m, (stub,))
        return stub

    def _new_stub(self, m: dict[str, Any], ctx: PolicyContext) -> dict[str, Any] | None:
        if _is_stub(m):
            return None
        if m.get("role") in TOOL_ROLES:
            tokens = size(ctx, m)
            stub = tool_stub(m, tokens, ctx.memo.contents)
        elif self.elide_arguments and m.get("role") == "assistant" and m.get("tool_calls"):
            calls = m["tool_calls"]
            tokens = size(ctx, m) - size(ctx, {**m, "tool_calls": []})
            stub = {**m, "tool_calls": [_args_stub(c, tokens) for c in calls]}
        else:
            return None
        ok = tokens >= self.min_tokens and size(ctx, stub) < size(ctx, m)
        return stub if ok else None

    @staticmethod
    def _previous_upto(msgs: list[dict[str, Any]], ctx: PolicyContext) -> int:
        prev = ctx.previous
        if prev is None or not 0 < prev.elided_upto <= len(msgs):
            return 0
        same = prefix_hash(msgs[: prev.elided_upto], ctx.memo) == prev.elided_hash
        return prev.elided_upto if same else 0
