"""The map in ``proxy/store/__init__.py`` names every module and every table."""

from __future__ import annotations

import pkgutil
from pathlib import Path

import proxy.store
from proxy.store.db import connect


def test_the_map_names_every_store_module() -> None:
    """A module added to ``proxy/store`` is placed in the map, in double backquotes."""
    doc = proxy.store.__doc__ or ""
    modules = [m.name for m in pkgutil.iter_modules(proxy.store.__path__)]
    assert modules
    assert [m for m in modules if f"``{m}``" not in doc] == []


def test_the_map_names_every_table(tmp_path: Path) -> None:
    """Every table a fresh store has (FTS5's own shadow tables aside) is in the schema map."""
    db = connect(tmp_path / "s.db")
    try:
        tables = [
            r[0]
            for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not r[0].startswith(("messages_fts_", "sqlite_"))
        ]
    finally:
        db.close()
    doc = proxy.store.__doc__ or ""
    assert "turns" in tables
    assert [t for t in tables if f"``{t}" not in doc] == []
