"""The layout is the map: each stage imports only stages before it, never one after."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS = ("policies", "proxy", "ingress", "upstream", "decide", "store", "server", "cli")
"""In pipeline order. ``proxy`` stands for the shared top-level modules (config, errors,
log, process_tuning); ``policies`` are pure and depend on nothing in ``proxy/``."""


def layer(module: str) -> int | None:
    """The layer a dotted module name belongs to, None outside the product."""
    parts = module.split(".")
    if parts[0] == "policies":
        return 0
    if parts[0] != "proxy":
        return None
    if len(parts) > 1 and parts[1] in LAYERS:
        return LAYERS.index(parts[1])
    return 1


def imports(path: Path) -> list[str]:
    """The product modules ``path`` imports (at any depth in the module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
        elif isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
    return [m for m in out if layer(m) is not None]


def test_no_stage_imports_a_later_one() -> None:
    """A module never imports from a stage later in the pipeline than its own."""
    backwards = []
    for path in sorted([*ROOT.glob("proxy/**/*.py"), *ROOT.glob("policies/**/*.py")]):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        own = layer(module)
        assert own is not None
        for imported in imports(path):
            theirs = layer(imported)
            assert theirs is not None
            if theirs > own:
                backwards.append(f"{module} imports {imported}")
    assert backwards == []
