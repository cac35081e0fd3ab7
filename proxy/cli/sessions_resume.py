"""``handoff sessions resume ID --model M``: a session's full history, fitted to M's
window by the proxy's engine, as a request body for another tool or server
(``--format openai|responses|anthropic|ollama``, or ``native``: the format the session
was recorded in; ``-o FILE``). What it had to drop goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from proxy.cli.resume_fit import dropped, fit
from proxy.config import load_settings
from proxy.errors import HandoffError
from proxy.store.export import BODY_FORMATS, body, history
from proxy.store.jsonout import dumps_text
from proxy.store.messages import message_text, squeeze
from proxy.store.read import SqliteReader

SHOWN = 12
"""The dropped messages named one by one on stderr; the rest are counted."""


def register(sub: Any, common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "resume",
        parents=[common],
        help="a session's history fitted to another model's window",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("id")
    p.add_argument("--model", required=True, help="the model to resume on")
    p.add_argument("--format", choices=BODY_FORMATS, default="openai")
    p.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")


def run(args: argparse.Namespace, store: Path) -> int:
    settings = load_settings(getattr(args, "config", None))
    reader = SqliteReader(store)
    messages, wire = history(reader, args.id)
    try:
        plan = asyncio.run(fit(settings, args.model, messages, reader.load_calibration()))
    except HandoffError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    sent = plan.forwarded if plan.forwarded is not None else messages
    _say(args.model, plan.decision, messages, sent)
    text = dumps_text(body(args.format, args.model, sent, {}, wire), indent=True) + "\n"
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


def _say(model: str, decision: Any, history: list[Any], sent: list[Any]) -> None:
    def err(line: str) -> None:
        print(line, file=sys.stderr)

    if decision is None or decision.window is None:
        err(f"{model}: window unknown; the history is unchanged (add it under [models])")
        return
    tokens = f"{decision.tokens} tokens" if decision.tokens is not None else "within budget"
    if decision.action != "compressed":
        err(f"fits {model} ({tokens}, budget {decision.budget}): nothing dropped")
        return
    gone, new = dropped(history, sent)
    err(
        f"compressed for {model}: {decision.tokens} → {decision.forwarded_tokens} tokens "
        f"(budget {decision.budget}) by {', '.join(decision.policies)}; "
        f"{len(gone)} of {len(history)} messages dropped or rewritten, {len(new)} inserted"
    )
    for step in decision.steps:
        err(
            f"  {step['policy']}: {step['removed_messages']} messages, "
            f"{step['removed_tokens']} tokens" + (f" ({step['note']})" if step["note"] else "")
        )
    for i in gone[:SHOWN]:
        m = history[i]
        err(f"  - [{i}] {m.get('role', '?')}: {squeeze(message_text(m), 100)}")
    if len(gone) > SHOWN:
        err(f"  - … and {len(gone) - SHOWN} more (handoff sessions diff shows a recorded turn)")
    for m in new:
        err(f"  + {m.get('role', '?')}: {squeeze(message_text(m), 100)}")
