"""``handoff sessions import``: detection, folders, idempotence, problems, round trips."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from proxy.store.export import export
from proxy.store.read import SqliteReader
from tests.cli.test_sessions import cli
from tests.store import importer_fixtures as fx
from tests.store.test_export import SCHEMA

FIXTURES: dict[str, Callable[[Path], Path]] = {
    "codex": fx.codex_rollout,
    "claude-code": fx.claude_transcript,
    "chatgpt": fx.chatgpt_export,
    "openai": fx.openai_json,
    "anthropic": fx.anthropic_json,
}


def _sessions(store: Path) -> list[dict[str, Any]]:
    """Every session's portable export, without what differs between stores by nature."""
    reader = SqliteReader(store)
    docs = []
    for row in sorted(reader.list_sessions(), key=lambda r: r["id"]):
        doc = export(reader, row["id"], "portable", now=0.0)
        assert isinstance(doc, dict)
        docs.append(doc)
    return docs


@pytest.mark.parametrize("kind", sorted(FIXTURES))
def test_round_trip(kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """import → export portable → import into a fresh store gives the same sessions;
    the kind is detected, and importing again adds nothing."""
    src = FIXTURES[kind](tmp_path / "src")
    first = tmp_path / "a.db"
    assert cli("sessions", "import", str(src), "--store", str(first)) == 0
    out = capsys.readouterr()
    assert f"({kind}:" in out.out
    docs = _sessions(first)
    assert docs and all(d["source"]["kind"] == kind for d in docs)
    assert all(d["workspace"] == "default" for d in docs)
    for d in docs:  # the shipped schema accepts them
        jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(d)
    assert cli("sessions", "import", str(src), "--store", str(first), "--from", kind) == 0
    assert "already in this store" in capsys.readouterr().err
    assert _sessions(first) == docs
    folder = tmp_path / "exported"
    folder.mkdir()
    for d in docs:
        (folder / f"{d['conversation_id']}.json").write_text(json.dumps(d))
    second = tmp_path / "b.db"
    assert cli("sessions", "import", str(folder), "--store", str(second)) == 0
    assert _sessions(second) == docs


def test_imported_sessions_show_and_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An imported Claude Code session is an ordinary session: one turn a reply, the
    model change a handoff, exports in the other formats."""
    store = tmp_path / "s.db"
    cli("sessions", "import", str(fx.claude_transcript(tmp_path)), "--store", str(store))
    sid = SqliteReader(store).list_sessions()[0]["id"]
    info = SqliteReader(store).session(sid)
    assert info["title"] == "Add a config file"
    assert [t["model"] for t in info["timeline"]] == [
        "claude-sonnet-4-5",
        "claude-opus-4-1",
        "claude-opus-4-1",
    ]
    assert info["timeline"][1]["handoff"] == {"from": "claude-sonnet-4-5", "to": "claude-opus-4-1"}
    capsys.readouterr()
    assert cli("sessions", "export", sid, "--format", "anthropic", "--store", str(store)) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["messages"][0]["content"][1]["source"]["type"] == "base64"


def test_folder_walk_reports_problems(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A folder of mixed files: each kind detected, a malformed line named by file and
    line with the rest imported, an unknown file skipped with why."""
    root = tmp_path / "mixed"
    rollout = fx.codex_rollout(root, bad_line=True)
    fx.claude_transcript(root)
    (root / "notes.json").write_text('{"hello": 1}')
    fx.claude_compacted(root / "c")
    store = tmp_path / "s.db"
    assert cli("sessions", "import", str(root), "--store", str(store)) == 0
    out = capsys.readouterr()
    assert out.out.count("imported ") == 3
    assert f"{rollout}:5: not valid JSON" in out.err
    assert "notes.json: skipped: not a format handoff imports" in out.err
    assert "agent-1234.jsonl: skipped: no claude-code conversation in it" in out.err
    assert "3 imported, 0 already in the store, 3 problem(s)" in out.err


def test_nothing_importable_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2 when nothing could be imported: a missing path, a file of another kind."""
    store = tmp_path / "s.db"
    assert cli("sessions", "import", str(tmp_path / "nope"), "--store", str(store)) == 2
    path = fx.openai_json(tmp_path)
    assert cli("sessions", "import", str(tmp_path), "--from", "codex", "--store", str(store)) == 2
    assert f"{path}: skipped: not codex" in capsys.readouterr().err


def test_progress_and_workspace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many files print progress on stderr; --key-env imports into that key's workspace."""
    root = tmp_path / "many"
    root.mkdir()
    for i in range(12):
        (root / f"{i:02d}.json").write_text(json.dumps([{"role": "user", "content": f"q{i}"}]))
    monkeypatch.setenv("MY_KEY", "sk-test")
    store = tmp_path / "s.db"
    assert (
        cli("sessions", "import", str(root), "--key-env", "MY_KEY", "--store", str(store), "--json")
        == 0
    )
    out = capsys.readouterr()
    assert "progress: 12/12 files" in out.err
    assert len(json.loads(out.out)["imported"]) == 12
    workspaces = {r["workspace"] for r in SqliteReader(store).list_sessions()}
    assert len(workspaces) == 1 and workspaces.pop().startswith("key-")


def test_portable_v1_file_is_upgraded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An export written by a handoff of format version 1 (no ``source``) imports; the
    conversation's source is read back from its name."""
    first = tmp_path / "a.db"
    cli("sessions", "import", str(fx.openai_json(tmp_path)), "--store", str(first))
    (doc,) = _sessions(first)
    old = {k: v for k, v in doc.items() if k != "source"} | {"format_version": 1}
    path = tmp_path / "v1.json"
    path.write_text(json.dumps(old))
    second = tmp_path / "b.db"
    assert cli("sessions", "import", str(path), "--store", str(second)) == 0
    assert _sessions(second) == [doc]
    assert doc["source"]["kind"] == "openai"


def test_a_grown_source_adds_its_new_turns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Claude Code session continued after its import: importing it again adds the
    new turn to the same session; once more adds nothing; a rewritten one is refused."""
    path = fx.claude_transcript(tmp_path)
    store = tmp_path / "s.db"
    assert cli("sessions", "import", str(path), "--store", str(store)) == 0
    (row,) = SqliteReader(store).list_sessions()
    more = {"type": "assistant", "uuid": "u8", "parentUuid": "u7", "sessionId": fx.CLAUDE_ID,
            "message": {"id": "msg_03", "role": "assistant", "model": "claude-opus-4-1",
                        "content": "You're welcome."}}  # fmt: skip
    path.write_text(path.read_text() + json.dumps(more) + "\n")
    capsys.readouterr()
    assert cli("sessions", "import", str(path), "--store", str(store)) == 0
    assert f"imported {row['id']} from" in capsys.readouterr().out
    (grown,) = SqliteReader(store).list_sessions()
    assert grown["turns"] == row["turns"] + 1
    last = SqliteReader(store).turn(row["id"], grown["turns"])
    assert last["reply"]["content"] == "You're welcome." and len(last["history"]) == 5
    assert cli("sessions", "import", str(path), "--store", str(store)) == 0
    assert "already in this store" in capsys.readouterr().err
    path.write_text(path.read_text().replace("Please add a config file", "Something else"))
    assert cli("sessions", "import", str(path), "--store", str(store)) == 0
    assert "has changed since, not only grown" in capsys.readouterr().err
    assert SqliteReader(store).list_sessions()[0]["turns"] == grown["turns"]
