"""``handoff sessions remember`` and ``recall`` against a seeded store, asserting the output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.store import export as export_mod
from proxy.store import portable
from proxy.store.admin import import_document
from proxy.store.read import SqliteReader
from tests.cli.test_sessions import cli
from tests.cli.test_sessions import store as store  # (the seeded store fixture)
from tests.store.test_export import SCHEMA


def _sid(path: Path) -> str:
    """The seeded conversation (not the other workspace's one-turn session)."""
    return next(r["id"] for r in SqliteReader(path).list_sessions() if r["workspace"] != "other")


def test_remember_writes_and_prints_the_memory(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The memory is written (reason ``command``) and printed with its sections."""
    sid = _sid(store)
    assert cli("sessions", "remember", sid, "--store", str(store)) == 0
    out = capsys.readouterr().out
    assert f"memory of {sid}" in out and "## Task goal" in out
    mem = SqliteReader(store).memory(sid)
    assert mem is not None and mem["reason"] == "command" and mem["source"] == "digest"


def test_recall_prints_what_would_be_inserted_and_only_for_its_workspace(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Recall prints the marked message for the workspace asked; another has nothing."""
    info = SqliteReader(store).list_sessions()
    mine = next(r for r in info if r["workspace"] != "other")
    cli("sessions", "remember", mine["id"], "--store", str(store))
    capsys.readouterr()
    assert cli("sessions", "recall", "--workspace", mine["workspace"], "--store", str(store)) == 0
    out = capsys.readouterr().out
    assert mine["id"] in out and "[handoff: recalled memory" in out
    assert cli("sessions", "recall", "--workspace", "other", "--store", str(store)) == 1
    assert "nothing to recall" in capsys.readouterr().err


def test_a_memory_travels_with_the_portable_export(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Export carries the memory; import into a fresh store brings it back."""
    sid = _sid(store)
    cli("sessions", "remember", sid, "--store", str(store))
    doc = export_mod.export(SqliteReader(store), sid, "portable")
    assert isinstance(doc, dict) and doc["memory"]["reason"] == "command"
    portable.validate(json.loads(json.dumps(doc)))
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(doc, json.loads(SCHEMA.read_text()))
    fresh = tmp_path / "fresh.db"
    new = import_document(fresh, doc)
    assert SqliteReader(fresh).memory(new)["text"] == doc["memory"]["text"]  # type: ignore[index]
