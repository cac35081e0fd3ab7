"""The layout is the map: each stage imports only stages before it, never one after.

Every import counts: at module level, inside a function, under ``if TYPE_CHECKING:``,
relative (``from ..store import x``), a stage imported as a name (``from proxy import
store``), and ``importlib.import_module("proxy.x")``. And every module lives in a stage's
folder or is one of the shared few, so the tree alone says where each stage is.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

LAYERS = ("policies", "proxy", "ingress", "upstream", "decide", "store", "server", "cli")
"""In pipeline order. ``proxy`` stands for the shared top-level modules (config, errors,
log, process_tuning); ``policies`` are pure and depend on nothing in ``proxy/``."""

SHARED = {"__init__", "config", "errors", "log", "process_tuning"}
"""The only modules directly in ``proxy/``: what every stage may use."""

TEST_ROOMS = {*LAYERS[2:], "policies", "fake_upstream", "bench", "agents"}
"""``tests/`` mirrors the stages, plus the strict fake upstream, the benches' tests and the
real agent CLIs' (``make agents``)."""


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


def _absolute(module: str, is_package: bool, level: int, name: str | None) -> str:
    """``from <level dots><name> import`` as an absolute module name, seen from ``module``."""
    if level == 0:
        return name or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (level - 1)]
    return ".".join([*base, *([name] if name else [])])


def imports(module: str, source: str, is_package: bool = False) -> list[str]:
    """The product modules ``source`` (module ``module``) imports, at any depth in it."""
    out: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = _absolute(module, is_package, node.level, node.module)
            out.append(base)
            out.extend(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and (
                (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
                or (
                    isinstance(node.func, ast.Name)
                    and node.func.id in ("import_module", "__import__")
                )
            )
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            out.append(node.args[0].value)
    return [m for m in out if layer(m) is not None]


def backwards(module: str, source: str, is_package: bool = False) -> list[str]:
    """What ``source`` imports from a stage later than its own."""
    own = layer(module)
    assert own is not None
    return [
        f"{module} imports {imported}"
        for imported in imports(module, source, is_package)
        if (layer(imported) or 0) > own
    ]


def _modules() -> list[tuple[str, Path]]:
    paths = sorted([*ROOT.glob("proxy/**/*.py"), *ROOT.glob("policies/**/*.py")])
    return [(".".join(p.relative_to(ROOT).with_suffix("").parts), p) for p in paths]


def test_no_stage_imports_a_later_one() -> None:
    """A module never imports from a stage later in the pipeline than its own."""
    found, wrong = 0, []
    for module, path in _modules():
        source = path.read_text(encoding="utf-8")
        found += len(imports(module, source, path.name == "__init__.py"))
        wrong += backwards(module, source, path.name == "__init__.py")
    assert found > 300  # (the walk sees the product's imports)
    assert wrong == []


@pytest.mark.parametrize(
    ("module", "source"),
    [
        ("proxy.decide.x", "def f():\n    from proxy.server.app import create_app\n"),
        ("proxy.decide.x", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                           "    from proxy.store.base import Store\n"),
        ("proxy.decide.x", "from ..store import base\n"),
        ("proxy.decide.x", "from ...proxy.cli import main\n"),
        ("proxy.decide.x", "from proxy import server\n"),
        ("proxy.decide.x", "import proxy.store.read as r\n"),
        ("proxy.decide.x", "import importlib\nimportlib.import_module('proxy.cli.main')\n"),
        ("proxy.config", "from proxy.ingress.chat_request import ChatRequest\n"),
        ("policies.trim", "from proxy.config import Settings\n"),
    ],
)  # fmt: skip
def test_every_kind_of_backward_import_is_caught(module: str, source: str) -> None:
    """Function-level, TYPE_CHECKING, relative, a stage imported by name, dynamic."""
    assert backwards(module, source) != []


def test_earlier_stages_and_the_own_stage_are_allowed() -> None:
    """Imports of the same stage (relative ones too) or earlier ones pass."""
    source = "from . import budget\nfrom proxy.store.base import Store\nfrom proxy import config\n"
    assert backwards("proxy.server.app", source) == []
    assert imports("proxy.decide.tokens", "from . import chat\n", is_package=True) == [
        "proxy.decide.tokens",
        "proxy.decide.tokens.chat",
    ]


def test_the_tree_is_the_map() -> None:
    """Every module of ``proxy/`` is in a stage's folder or one of the shared few, and
    ``tests/`` has a folder per stage and no others."""
    top = {p.stem for p in (ROOT / "proxy").glob("*.py")}
    assert top == SHARED
    folders = {p.name for p in (ROOT / "proxy").iterdir() if (p / "__init__.py").exists()}
    assert folders == set(LAYERS[2:])
    rooms = {p.name for p in (ROOT / "tests").iterdir() if (p / "__init__.py").exists()}
    assert set(LAYERS[2:]) <= rooms <= TEST_ROOMS
