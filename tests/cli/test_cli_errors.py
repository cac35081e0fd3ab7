"""What the CLI says when it cannot do what it was asked: one line, a non-zero exit,
no traceback; and flags accepted before or after the command."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.cli.main import main
from tests.server.test_shutdown import ROOT

HANDOFF = [sys.executable, "-m", "proxy.cli"]


def _run(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*HANDOFF, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_port_in_use_is_one_line_and_exit_1() -> None:
    """A port another program holds: no banner, no traceback, one line naming the fix."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        out = _run(
            "serve", "--port", str(port), "--no-store", "--upstream", "http://127.0.0.1:9/v1"
        )
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and "listening" not in out.stdout
    line = [ln for ln in out.stderr.splitlines() if ln.startswith("handoff:")]
    assert len(line) == 1 and "port is in use" in line[0] and "--port" in line[0]


def test_missing_config_file_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """--config naming no file is exit 2 with the path, before the command runs."""
    assert main(["--config", "/nonexistent/handoff.toml", "models"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "/nonexistent/handoff.toml" in err and "does not exist" in err


def test_unreadable_store_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file that is not a store: one line that says so and what to do, exit 1."""
    bad = tmp_path / "not-a.db"
    bad.write_text("this is not an sqlite file\n" * 20)
    assert main(["sessions", "list", "--store", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not a handoff store" in err and "Traceback" not in err


def test_store_and_config_go_before_or_after_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``handoff --store X sessions list`` and ``handoff sessions list --store X`` are one."""
    missing = tmp_path / "none.db"
    for argv in (["--store", str(missing), "sessions", "list"],
                 ["sessions", "list", "--store", str(missing)]):  # fmt: skip
        assert main(argv) == 1
        assert f"no store at {missing}" in capsys.readouterr().err
