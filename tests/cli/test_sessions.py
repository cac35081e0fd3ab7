"""``handoff sessions …`` against a seeded store, asserting what it prints."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from proxy.cli import sessions as sessions_cli
from proxy.store.read import SqliteReader
from tests.store.test_fixtures import compressed, conversation, turn, write


def cli(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    sessions_cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    return int(args.func(args))


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A session of 4 turns: a handoff at turn 3 and a compressed turn 4; plus one other."""
    path = tmp_path / "s.db"
    turns = conversation(3, model_for=lambda i: "gpt-4o" if i < 2 else "llama-8k")
    last = turns[-1]
    history = [*last.messages, dict(last.reply or {}), {"role": "user", "content": "go on"}]
    turns.append(
        compressed(
            history,
            {"role": "assistant", "content": "done"},
            model="llama-8k",
            started_at=1_700_000_100.0,
        )
    )
    turns.append(
        turn(
            [{"role": "user", "content": "mango salad recipe"}],
            None,
            workspace="other",
            status=502,
            error={"message": "bad gateway"},
        )
    )
    write(path, turns)
    return path


def _sid(store: Path, workspace: str = "ws") -> str:
    return str(SqliteReader(store).list_sessions(workspace=workspace)[0]["id"])


def test_list_table(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The table shows both sessions with turns, models, handoffs and tokens."""
    assert cli("sessions", "list", "--store", str(store)) == 0
    out = capsys.readouterr().out
    sid = _sid(store)
    line = next(line for line in out.splitlines()[1:] if sid.startswith(line.split()[0]))
    assert "gpt-4o, llama-8k" in line and " 4 " in line and " 1 " in line and "5000" in line
    assert "mango salad recipe" in out


def test_list_json_filters(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints the rows; --model and --search narrow them."""
    cli("sessions", "list", "--store", str(store), "--json", "--search", "mango")
    assert [r["workspace"] for r in json.loads(capsys.readouterr().out)] == ["other"]
    cli("sessions", "list", "--store", str(store), "--json", "--model", "llama-8k")
    assert [r["turns"] for r in json.loads(capsys.readouterr().out)] == [4]
    cli("sessions", "list", "--store", str(store), "--json", "--since", "2001-01-01")
    assert len(json.loads(capsys.readouterr().out)) == 2


def test_show_timeline_marks_handoff_and_compression(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One row per turn; the handoff and the summarised turn are visible."""
    sid = _sid(store)
    assert cli("sessions", "show", sid[-6:], "--store", str(store)) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("│")]
    assert len(rows) == 4
    assert "⇄ gpt-4o → llama-8k" in rows[2]
    assert "compressed" in rows[3] and "summarize" in rows[3] and "900" in rows[3]


def test_show_turn_in_full(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--turn N prints the original history, what was forwarded, and the reply."""
    cli("sessions", "show", _sid(store), "--turn", "4", "--store", str(store))
    out = capsys.readouterr().out
    assert "original history (8 messages)" in out
    assert "forwarded (4 messages)" in out and "Summary: kiwis were discussed." in out
    assert "reply: assistant: done" in out


def test_diff_marks_kept_dropped_inserted(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The diff lists dropped originals with '-', the summary with '+', kept with ' '."""
    cli("sessions", "diff", _sid(store), "--turn", "4", "--store", str(store))
    lines = capsys.readouterr().out.splitlines()[1:]
    assert [line[0] for line in lines] == [" "] + ["-"] * 5 + ["+", " ", " "]
    assert lines[6].startswith("+ [new] system: Summary")


def test_unknown_session_exits_1(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An unknown id is an error naming it."""
    assert cli("sessions", "show", "nope", "--store", str(store)) == 1
    assert "no session 'nope'" in capsys.readouterr().err


def test_export_formats(store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """openai gives a ready messages array; markdown marks the handoff; -o writes a file."""
    sid = _sid(store)
    cli("sessions", "export", sid, "--format", "openai", "--turn", "2", "--store", str(store))
    body = json.loads(capsys.readouterr().out)
    assert body["model"] == "gpt-4o" and [m["role"] for m in body["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    out = tmp_path / "c.md"
    cli("sessions", "export", sid, "--format", "markdown", "-o", str(out), "--store", str(store))
    text = out.read_text()
    assert "**handoff gpt-4o → llama-8k**" in text and "**tool call** `lookup`" in text


def test_import_round_trip_and_errors(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An export imports into another store; a malformed file exits 2 naming the field."""
    sid = _sid(store)
    doc = tmp_path / "c.json"
    cli("sessions", "export", sid, "-o", str(doc), "--store", str(store))
    other = tmp_path / "other.db"
    assert cli("sessions", "import", str(doc), "--store", str(other)) == 0
    assert f"imported {sid}" in capsys.readouterr().out
    data = json.loads(doc.read_text())
    data["turns"][1]["decision"]["window"] = "big"
    doc.write_text(json.dumps(data))
    assert cli("sessions", "import", str(doc), "--store", str(tmp_path / "third.db")) == 2
    assert "turns[1].decision.window: expected int or null, got str" in capsys.readouterr().err


def test_prune(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """prune --older-than deletes sessions idle that long."""
    assert cli("sessions", "prune", "--older-than", "1d", "--store", str(store), "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"deleted_sessions": 2}
    assert SqliteReader(store).list_sessions() == []


def test_recorded_text_is_printed_not_obeyed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rich markup and terminal escapes in what clients sent are shown as text: ``[/b]``
    once crashed ``list``, and an escape sequence could rewrite the terminal or link."""
    path = tmp_path / "s.db"
    link = "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\ \x1b[2J"
    hostile = f"[/bold] [link=https://evil.example]x[/link] {link}"
    reply = {"role": "assistant", "content": link}
    messages = [{"role": "user", "content": hostile}]
    write(path, [turn(messages, reply, workspace="[red]ws\x1b[0m", model="[/m]")])
    sid = SqliteReader(path).list_sessions()[0]["id"]
    for argv in (
        ["list"],
        ["show", sid],
        ["show", sid, "--turn", "1"],
        ["diff", sid, "--turn", "1"],
    ):
        assert cli("sessions", *argv, "--store", str(path)) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\\x1b" in out, (argv, out)
        assert "[/" in out
