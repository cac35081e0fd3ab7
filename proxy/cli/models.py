"""``handoff models``: the known context windows, or why one name gets its window.

``handoff models [--json]`` lists built-in and configured windows;
``handoff models NAME [--json] [--store PATH]`` explains which entry matched and by
which rule, the encoding used and whether counts are exact, the budget of a default
request, and from the store (``--store``, else the configured one) the calibration
factor and the limits learned: windows upstreams named when refusing a prompt, and the
windows turns were planned with. Exit status 1: NAME is unknown.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Column, Table

from proxy.config import Settings, load_settings
from proxy.decide.budget import compute_budget
from proxy.decide.tokens import Calibration, TokenCounter
from proxy.decide.windows import ModelInfo, WindowRegistry
from proxy.store.calibration import LIMITS_KEY
from proxy.store.limits import learned_limits
from proxy.store.read import SqliteReader


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "models",
        help="list known context windows, or explain one model's",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("name", nargs="?", help="a model name as a client would send it")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--store", metavar="PATH", help="the store to read (default: from config)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace, calibration: Calibration | None = None) -> int:
    """Entry point; ``calibration`` is the persisted one when the caller has a store."""
    settings = load_settings(getattr(args, "config", None))
    registry = WindowRegistry(settings.models, settings.tokens.default_context_window)
    given = getattr(args, "store", None)
    store = _store_path(settings, given)
    if given and store is None:
        print(f"error: no store at {given} (give the proxy's store file)", file=sys.stderr)
        return 1
    stored = _stored(store)
    registry.limits.load(stored.get(LIMITS_KEY) or {})  # windows named in overflow errors
    if args.name is None:
        return _list(registry, args.json)
    if calibration is None and stored:
        calibration = Calibration()
        calibration.load(stored)
    report = describe(args.name, registry, settings, TokenCounter(0), calibration)
    if report["known"] or store is not None:
        report["learned"] = learned_limits(store, args.name) if store is not None else None
    if args.json:
        sys.stdout.write(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        _print_report(report)
    return 0 if report["known"] else 1


def _store_path(settings: Settings, given: str | None) -> Path | None:
    """``--store``, else the configured store; None when there is no such file."""
    if given:
        path = Path(given).expanduser()
        return path if path.is_file() else None
    path = settings.store_path()
    return path if settings.store.enabled and path.is_file() else None


def _stored(path: Path | None) -> dict[str, Any]:
    """What the proxy persisted in its store besides turns (calibration, learned windows)."""
    return {} if path is None else SqliteReader(path).load_calibration()


def describe(
    name: str,
    registry: WindowRegistry,
    settings: Settings,
    counter: TokenCounter,
    calibration: Calibration | None,
) -> dict[str, Any]:
    """Everything ``handoff models NAME`` shows, as plain data."""
    info = registry.lookup(name)
    report: dict[str, Any] = {
        "model": name,
        "known": info is not None,
        "explanation": registry.explain(name),
    }
    if info is None:
        return report
    mc = counter.for_model(name, info.tokenizer)
    ov = registry.override_for(name)
    budget = compute_budget(info, {}, settings.tokens, mc.exact, ov.margin if ov else None)
    report.update(
        context_window=info.context_window,
        max_output_tokens=info.max_output_tokens,
        source=info.source,
        matched=info.matched,
        encoding=mc.encoding_name,
        exact=mc.exact,
        default_budget={
            "reserved_output": budget.reserved_output,
            "margin": budget.margin,
            "budget": budget.budget,
        },
        calibration=(
            {"factor": calibration.factor(name), "samples": calibration.samples(name)}
            if calibration is not None and calibration.samples(name)
            else None
        ),
    )
    return report


def _list(registry: WindowRegistry, as_json: bool) -> int:
    entries = registry.entries()
    if as_json:
        rows = [_row(e) for e in entries]
        sys.stdout.write(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode() + "\n")
        return 0
    table = Table("window", "max output", "tokenizer", "source")
    table.columns.insert(0, Column("model", overflow="fold"))
    for e in entries:
        table.add_row(
            e.name,
            f"{e.context_window:,}",
            f"{e.max_output_tokens:,}",
            e.tokenizer or "(nearest, approximate)",
            e.source,
        )
    Console(soft_wrap=True).print(table)
    return 0


def _row(e: ModelInfo) -> dict[str, Any]:
    return {
        "model": e.name,
        "context_window": e.context_window,
        "max_output_tokens": e.max_output_tokens,
        "tokenizer": e.tokenizer,
        "source": e.source,
    }


def _print_report(report: dict[str, Any]) -> None:
    console = Console(soft_wrap=True, highlight=False)
    console.print(report["explanation"], markup=False)
    if not report["known"]:
        return
    exact = "exact" if report["exact"] else "approximate"
    console.print(f"encoding: {report['encoding']} ({exact} counts)", markup=False)
    b = report["default_budget"]
    console.print(
        f"prompt budget without max_tokens: {b['budget']:,} "
        f"(window {report['context_window']:,} - output {b['reserved_output']:,} "
        f"- margin {b['margin']:,})",
        markup=False,
    )
    cal = report["calibration"]
    if cal:
        console.print(
            f"calibration: x{cal['factor']:.3f} from {cal['samples']} upstream replies",
            markup=False,
        )
    else:
        console.print("calibration: no upstream replies observed yet", markup=False)
    _print_learned(console, report.get("learned"))


def _print_learned(console: Console, learned: dict[str, Any] | None) -> None:
    if learned is None:
        console.print("learned limits: no store to read (--store PATH)", markup=False)
        return
    for o in learned["overflows"]:
        limit = f"{o['limit']:,}" if o["limit"] else "unnamed"
        console.print(
            f"learned limit: {o['upstream']} refused {o['refusals']} prompt(s) as too long"
            f" (limit {limit})",
            markup=False,
        )
    windows = ", ".join(f"{w['window']:,} ({w['turns']} turns)" for w in learned["windows"])
    console.print(f"windows planned with: {windows or 'none recorded'}", markup=False)
