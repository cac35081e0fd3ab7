"""`handoff models`: list known windows, explain one name."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from proxy.cli import models as models_cli
from proxy.decide.tokens import Calibration


def run(argv: list[str], config: Path, calibration: Calibration | None = None) -> int:
    parser = argparse.ArgumentParser(prog="handoff")
    parser.add_argument("--config")
    models_cli.register(parser.add_subparsers())
    args = parser.parse_args(["--config", str(config), *argv])
    return models_cli.run(args, calibration) if calibration else int(args.func(args))


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    path = tmp_path / "config.toml"
    path.write_text(
        '[models."llama3*"]\ncontext_window = 8192\ntokenizer = "cl100k_base"\n'
        '[models."gpt-4o"]\nmargin = 0.25\n'
    )
    return path


def test_list_json_has_builtin_and_config(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json lists built-in and configured windows."""
    assert run(["models", "--json"], config) == 0
    rows = {r["model"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["gpt-4.1"]["context_window"] == 1_047_576
    assert rows["llama3*"] == {
        "model": "llama3*",
        "context_window": 8192,
        "max_output_tokens": 2048,  # only a window configured: a quarter of it
        "tokenizer": "cl100k_base",
        "source": "config",
    }


def test_list_table(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The table shows names and formatted windows."""
    assert run(["models"], config) == 0
    out = capsys.readouterr().out
    assert "claude-sonnet-4-5" in out and "1,047,576" in out


def test_explain_json(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """NAME --json explains the rule, encoding, exactness and default budget."""
    assert run(["models", "openai/gpt-4o-2024-08-06", "--json"], config) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["matched"] == "gpt-4o" and report["source"] == "builtin"
    assert report["encoding"] == "o200k_base" and report["exact"] is True
    assert "provider prefix 'openai/' removed" in report["explanation"]
    assert report["default_budget"] == {"reserved_output": 4096, "margin": 32_000, "budget": 91_904}
    assert report["calibration"] is None


def test_explain_config_glob_text(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A glob override is named in the explanation, with the encoding it sets."""
    assert run(["models", "llama3.1:8b"], config) == 0
    out = capsys.readouterr().out
    assert "from config entry 'llama3*'" in out
    assert "cl100k_base (exact counts)" in out


def test_explain_shows_calibration(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """With a calibration, its factor and sample count are shown."""
    cal = Calibration()
    cal.observe("claude-sonnet-4-5", 1000, 1150)
    assert run(["models", "claude-sonnet-4-5"], config, cal) == 0
    out = capsys.readouterr().out
    assert "approximate counts" in out
    assert "x1.150 from 1 upstream replies" in out


def test_unknown_model_exit_1(config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown name says how to configure it and exits 1."""
    assert run(["models", "mystery-model"], config) == 1
    out = capsys.readouterr().out
    assert "unknown model" in out and '[models."mystery-model"]' in out
