"""``elide-arguments``: the bulk in old tool-call arguments (file contents written,
patches) is replaced by a marker; the call, its name and its small arguments (the
path, the command) stay, and the arguments stay a JSON object."""

from __future__ import annotations

from typing import Any

import orjson

from policies.base import Mark, Message
from policies.fitting import Fitting
from policies.rewriting import RewriteLevel
from policies.units import HANDOFF_MARK, called_function

BULKY_CHARS = 300
"""An argument value longer than this is bulk; shorter ones are kept as they are."""


def slim_arguments(arguments: str) -> str | None:
    """``arguments`` with each bulky string value replaced by a marker, or None when
    none is bulky. Arguments that are not a JSON object are one bulky value."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        if len(arguments) <= BULKY_CHARS:
            return None
        return orjson.dumps({"handoff_elided": _marker(arguments)}).decode()
    slim, changed = {}, False
    for key, value in parsed.items():
        if isinstance(value, str) and len(value) > BULKY_CHARS:
            slim[key], changed = _marker(value), True
        elif not isinstance(value, str) and len(orjson.dumps(value)) > BULKY_CHARS:
            slim[key], changed = _marker(orjson.dumps(value).decode()), True
        else:
            slim[key] = value
    return orjson.dumps(slim).decode() if changed else None


def _marker(value: str) -> str:
    lines = value.count("\n") + 1
    return f"{HANDOFF_MARK}{len(value):,} characters, {lines:,} lines left out]"


class ElideArguments(RewriteLevel):
    """Slim the bulky arguments of old tool calls, oldest first."""

    name = "elide-arguments"
    verb = "slimmed the tool-call arguments of"

    def applies(self, fit: Fitting, i: int, mark: Mark) -> bool:
        m = fit.msgs[i]
        return m.get("role") == "assistant" and isinstance(m.get("tool_calls"), list)

    def rewrite(self, message: Message, mark: Mark, fit: Fitting) -> dict[str, Any] | None:
        calls, changed = [], False
        for call in message.get("tool_calls") or ():
            fn = called_function(call)
            args = fn.get("arguments")
            slim = slim_arguments(args) if isinstance(args, str) else None
            if slim is not None:
                call, changed = {**call, "function": {**fn, "arguments": slim}}, True
            calls.append(call)
        return {**message, "tool_calls": calls} if changed else None
