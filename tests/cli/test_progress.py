"""Long work reports progress on stderr: on a terminal, or when asked; stdout stays clean."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from proxy.cli.progress import Progress
from proxy.store.read import SqliteReader
from tests.cli.test_sessions import cli
from tests.store.test_fixtures import conversation, write


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture
def long_session(tmp_path: Path) -> Path:
    path = tmp_path / "s.db"
    write(path, conversation(30))
    return path


def test_export_progress_when_asked(long_session: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--progress counts the turns read on stderr; the export on stdout is untouched."""
    sid = SqliteReader(long_session).list_sessions()[0]["id"]
    assert cli("sessions", "export", sid, "--progress", "--store", str(long_session)) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)["turns"]) == 30
    assert "export: 1/30 turns\n" in err and err.endswith("export: 30/30 turns\n")
    assert cli("sessions", "export", sid, "--store", str(long_session)) == 0
    assert "export:" not in capsys.readouterr().err  # (not a terminal, not asked)


def test_on_a_terminal_the_line_is_rewritten_and_ended() -> None:
    """A terminal gets one line, rewritten with a carriage return, ended at close."""
    term = Terminal()
    progress = Progress("import", "files", stream=term, every_s=0.0)
    for n in range(1, 4):
        progress(n, 3)
    progress.close()
    assert term.getvalue() == ("\rimport: 1/3 files\rimport: 2/3 files\rimport: 3/3 files\n")


def test_not_a_terminal_and_not_asked_says_nothing() -> None:
    """Piped, and without --progress, nothing is written."""
    pipe = io.StringIO()
    progress = Progress("export", "turns", stream=pipe)
    progress(1, 2)
    progress(2, 2)
    progress.close()
    assert pipe.getvalue() == ""
