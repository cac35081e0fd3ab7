"""``handoff sessions resume``: the full history fitted to another model's window by
the proxy's engine, with what it dropped said on stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.store.read import SqliteReader
from tests.cli.test_sessions import cli


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A 40-message conversation, imported; a config with a small window."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    config = tmp_path / "config.toml"
    config.write_text(
        '[models."tiny-1k"]\ncontext_window = 1024\nmax_output_tokens = 128\n'
        'tokenizer = "cl100k_base"\n'
    )
    monkeypatch.setenv("HANDOFF_CONFIG", str(config))
    messages = [{"role": "system", "content": "You are terse."}]
    for i in range(20):
        messages.append({"role": "user", "content": f"question {i}: " + "kiwi " * 60})
        messages.append({"role": "assistant", "content": f"answer {i}: " + "fruit " * 60})
    (tmp_path / "long.json").write_text(json.dumps({"model": "gpt-4o", "messages": messages}))
    path = tmp_path / "s.db"
    assert cli("sessions", "import", str(tmp_path / "long.json"), "--store", str(path)) == 0
    return path


def test_resume_on_a_small_window(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The body fits the window: system prompt and newest messages kept, older ones
    dropped, and stderr says how many and which."""
    sid = SqliteReader(store).list_sessions()[0]["id"]
    capsys.readouterr()
    assert cli("sessions", "resume", sid, "--model", "tiny-1k", "--store", str(store)) == 0
    out = capsys.readouterr()
    body = json.loads(out.out)
    assert body["model"] == "tiny-1k"
    assert body["messages"][0] == {"role": "system", "content": "You are terse."}
    assert body["messages"][-1]["content"].startswith("answer 19:")
    assert 2 < len(body["messages"]) < 41
    assert "compressed for tiny-1k:" in out.err and "messages dropped or rewritten" in out.err
    assert "- [1] user: question 0:" in out.err


def test_resume_that_fits_drops_nothing(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a large window nothing is dropped; --format ollama -o writes the body."""
    sid = SqliteReader(store).list_sessions()[0]["id"]
    out = tmp_path / "body.json"
    assert cli("sessions", "resume", sid, "--model", "gpt-4o", "--format", "ollama",
               "-o", str(out), "--store", str(store)) == 0  # fmt: skip
    assert "fits gpt-4o" in capsys.readouterr().err
    body = json.loads(out.read_text())
    assert len(body["messages"]) == 41 and body["stream"] is False


def test_resume_as_a_responses_body(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--format responses: the fitted history with its system prompt as instructions."""
    sid = SqliteReader(store).list_sessions()[0]["id"]
    assert cli("sessions", "resume", sid, "--model", "tiny-1k", "--format", "responses",
               "--store", str(store)) == 0  # fmt: skip
    body = json.loads(capsys.readouterr().out)
    assert body["model"] == "tiny-1k" and body["instructions"] == "You are terse."
    assert 2 < len(body["input"]) < 40
    last = body["input"][-1]
    assert last["role"] == "assistant" and last["content"][0]["text"].startswith("answer 19:")
