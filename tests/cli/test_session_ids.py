"""``sessions list`` shows short unique ids that fit 80 columns; every command takes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.cells import cell_len

from proxy.store.read import SqliteReader
from tests.cli.test_sessions import cli
from tests.store.test_fixtures import turn, write

LONG_TITLE = "please look at this very long first message that no table column can hold " * 3


@pytest.fixture
def crowded(tmp_path: Path) -> Path:
    """Eight sessions begun within moments (their ids share the time digits), in two
    workspaces with long names, with long titles and several models."""
    path = tmp_path / "s.db"
    turns = []
    for i in range(8):
        messages = [{"role": "user", "content": f"{i} {LONG_TITLE}"}]
        reply = {"role": "assistant", "content": "ok"}
        workspace = f"key-{i % 2}123456789abcdef"
        turns.append(turn(messages, reply, workspace=workspace, model="claude-3-5-sonnet"))
        more = [*messages, reply, {"role": "user", "content": "more"}]
        turns.append(turn(more, reply, workspace=workspace, model="gpt-4o"))
    write(path, turns)
    return path


def _shown_ids(out: str) -> list[str]:
    return [line.split()[0] for line in out.splitlines()[1:] if line.strip()]


def test_list_at_80_columns_shows_whole_short_ids_that_resolve(
    crowded: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 80 columns no line is wider, and each id cell is a whole unique start of its
    session's id (six characters at least), one length for all, that `show` accepts."""
    monkeypatch.setenv("COLUMNS", "80")
    assert cli("sessions", "list", "--store", str(crowded)) == 0
    out = capsys.readouterr().out
    assert max(map(cell_len, out.splitlines())) <= 80
    full = [s["id"] for s in SqliteReader(crowded).list_sessions()]
    shown = _shown_ids(out)
    assert len(shown) == len(full) == 8
    assert len({len(s) for s in shown}) == 1 and len(shown[0]) >= 6
    for short, sid in zip(shown, full, strict=True):
        assert sid.startswith(short) and "…" not in short
        assert [o for o in full if o != sid and (o.startswith(short) or o.endswith(short))] == []
    assert cli("sessions", "show", shown[3], "--store", str(crowded), "--json") == 0
    assert json.loads(capsys.readouterr().out)["id"] == full[3]
    assert "please look at" in out  # the title keeps room


def test_list_json_keeps_the_full_ids(crowded: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints each whole id (24 hex digits)."""
    assert cli("sessions", "list", "--store", str(crowded), "--json") == 0
    ids = [r["id"] for r in json.loads(capsys.readouterr().out)]
    assert len(ids) == 8 and all(len(i) == 24 for i in ids)


@pytest.mark.parametrize("command", [["show"], ["show", "--turn", "1"], ["diff", "--turn", "1"],
                                     ["export"]])  # fmt: skip
def test_every_command_takes_a_unique_prefix_and_refuses_an_ambiguous_one(
    crowded: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    """A unique start works; a start two sessions share is one line naming them, exit 1."""
    ids = sorted(s["id"] for s in SqliteReader(crowded).list_sessions())
    a, b = ids[0], ids[1]
    common = next(i for i in range(len(a)) if a[i] != b[i])
    name, *rest = command
    assert cli("sessions", name, a[: common + 1], *rest, "--store", str(crowded)) == 0
    capsys.readouterr()
    assert cli("sessions", name, a[:common], *rest, "--store", str(crowded)) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "matches several sessions" in err
    assert a in err and b in err and "give more of the id" in err
