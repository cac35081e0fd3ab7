"""``handoff plan FILE --model M``: a dry run of the decision on a saved request.

FILE holds a chat request object or a bare messages array. Prints the decision,
the budget, what each policy removed, and (``--json`` or ``--show-request``) the
exact request that would be sent. It makes no network call: summarize is skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from proxy.config import load_settings
from proxy.decide.plan import Plan
from proxy.errors import HandoffError
from proxy.ingress.chat_completions import parse_chat
from proxy.server.build import build_engine
from proxy.upstream.routing import Router, Upstream


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "plan", help="dry run: what would handoff send for this request?"
    )
    p.add_argument("file", help="JSON file: a chat request, or a messages array ('-' for stdin)")
    p.add_argument("--model", help="target model (default: the request's own)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--show-request", action="store_true", help="print the request to be sent")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    try:
        raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as e:
        print(f"handoff plan: cannot read {args.file}: {e.strerror}", file=sys.stderr)
        return 2
    try:
        body = _as_request(orjson.loads(raw), args.model)
        req = parse_chat(orjson.dumps(body))
    except (orjson.JSONDecodeError, HandoffError, ValueError) as e:
        print(f"handoff plan: {args.file}: {e}", file=sys.stderr)
        return 2
    up = Upstream(name="plan", base_url="http://plan.invalid", patterns=("*",))
    engine = build_engine(settings, Router([up]))
    try:
        plan = asyncio.run(engine.plan(req, up, count=True))  # a dry run counts
    except HandoffError as e:
        if args.json:
            print(orjson.dumps(e.body(), option=orjson.OPT_INDENT_2).decode())
        else:
            print(f"rejected ({e.status}): {e.message}")
        return 1
    explain = engine.registry.explain(req.model)
    if args.json:
        print(orjson.dumps(_as_json(plan, explain), option=orjson.OPT_INDENT_2).decode())
    else:
        _print(plan, req.model, explain, args.show_request)
    return 0


def _as_request(data: Any, model: str | None) -> dict[str, Any]:
    if isinstance(data, list):
        data = {"messages": data}
    if not isinstance(data, dict):
        raise ValueError("expected a chat request object or a messages array")
    body: dict[str, Any] = {**data, "model": model} if model else dict(data)
    if not body.get("model"):
        raise ValueError("no model: pass --model M or put 'model' in the file")
    return body


def _as_json(plan: Plan, explain: str) -> dict[str, Any]:
    d = plan.decision
    return {
        "decision": d.action if d else None,
        "window": d.window if d else None,
        "budget": d.budget if d else None,
        "tokens": d.tokens if d else None,
        "forwarded_tokens": d.forwarded_tokens if d else None,
        "exact": d.exact if d else None,
        "policies": list(d.policies) if d else [],
        "steps": list(d.steps) if d else [],
        "window_source": explain,
        "request": orjson.loads(plan.body),
    }


def _cell(value: object) -> str:
    """A table cell: numbers with separators, nothing counted as a dash (never "None")."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _print(plan: Plan, model: str, explain: str, show_request: bool) -> None:
    # Text from configs and requests is printed as it is: no rich markup ([models."x"]).
    console = Console(markup=False, highlight=False)
    d = plan.decision
    if d is None:
        console.print("no decision")
        return
    console.print(f"{d.action} for {model}", style="bold")
    console.print(explain)
    table = Table("window", "budget", "tokens", "forwarded", "exact")
    table.add_row(*(_cell(x) for x in (d.window, d.budget, d.tokens, d.forwarded_tokens, d.exact)))
    console.print(table)
    if d.steps:
        steps = Table("policy", "removed messages", "removed tokens", "note")
        for s in d.steps:
            steps.add_row(
                _cell(s.get("policy")),
                _cell(s.get("removed_messages")),
                _cell(s.get("removed_tokens")),
                _cell(s.get("note")),
            )
        console.print(steps)
    if show_request:
        print(orjson.dumps(orjson.loads(plan.body), option=orjson.OPT_INDENT_2).decode())
