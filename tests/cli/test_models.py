"""`handoff models`: list known windows, explain one name."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from proxy.cli import models as models_cli
from proxy.decide.decision import Decision
from proxy.decide.tokens import Calibration
from proxy.store.calibration import save_calibration
from proxy.store.db import connect
from tests.store.test_fixtures import turn, write


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


def test_store_gives_calibration_and_learned_limits(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--store PATH: the calibration saved there, the limit an upstream named when it
    refused a prompt, and the windows turns were planned with."""
    store = tmp_path / "s.db"
    refused = {"message": "This model's maximum context length is 8,192 tokens.",
               "code": "context_length_exceeded"}  # fmt: skip
    write(
        store,
        [
            turn(
                [{"role": "user", "content": "a"}],
                None,
                model="llama3-8b",
                status=400,
                error=refused,
            ),
            turn(
                [{"role": "user", "content": "b"}],
                {"role": "assistant", "content": "c"},
                model="llama3-8b",
                decision=Decision(action="compressed", window=8192),
            ),
        ],
    )
    db = connect(store)
    save_calibration(db, {"version": 1, "models": {"llama3-8b": {"factor": 1.25, "samples": 4}}})
    db.close()
    assert run(["models", "llama3-8b", "--store", str(store)], config) == 0
    out = capsys.readouterr().out
    assert "calibration: x1.250 from 4 upstream replies" in out
    assert "refused 1 prompt(s) as too long (limit 8,192)" in out
    assert "windows planned with: 8,192 (1 turns)" in out
    assert run(["models", "llama3-8b", "--json", "--store", str(store)], config) == 0
    learned = json.loads(capsys.readouterr().out)["learned"]
    assert learned["overflows"][0]["limit"] == 8192


def test_missing_store_is_an_error(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--store naming no file says so and exits 1."""
    assert run(["models", "gpt-4o", "--store", str(tmp_path / "no.db")], config) == 1
    assert "error: no store at" in capsys.readouterr().err
