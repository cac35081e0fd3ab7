"""The ``handoff`` command: ``serve`` and the inspection commands.

Each command lives in its own module with a ``register(subparsers)`` function that
adds its parser and sets ``func``; this module only assembles them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from proxy.cli import demo, mcp, models, plan, serve, sessions, simulate
from proxy.config import ConfigError
from proxy.log import configure_logging

COMMANDS = (serve, models, plan, sessions, demo, simulate, mcp)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="handoff",
        description="A local OpenAI-compatible proxy that keeps one conversation going "
        "across models with different context windows.",
    )
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="TOML config file (default: $HANDOFF_CONFIG, else the user config dir)",
    )
    parser.add_argument(
        "--store", metavar="PATH", help="snapshot store (SQLite) for the commands that use one"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.register(sub)
    for command in _leaf_parsers(sub):
        # `handoff serve --config X` as well as `handoff --config X serve` (and --store
        # likewise); SUPPRESS so an absent flag does not overwrite the top-level one.
        command.add_argument(
            "--config", metavar="PATH", default=argparse.SUPPRESS, help="TOML config file"
        )
        for action in command._actions:
            if "--store" in action.option_strings:
                action.default = argparse.SUPPRESS
    return parser


def _leaf_parsers(sub: Any) -> list[argparse.ArgumentParser]:
    leaves: list[argparse.ArgumentParser] = []
    for parser in dict.fromkeys(sub.choices.values()):
        nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        leaves += _leaf_parsers(nested[0]) if nested else [parser]
    return leaves


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging("console")  # to stderr; `serve` reconfigures from its settings
    func: Any = args.func
    try:
        return int(func(args))
    except ConfigError as e:
        print(f"handoff: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
