"""The portable format: lossless round trip, hand validation, and the shipped schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.store import admin, portable
from proxy.store.errors import InvalidDocument
from proxy.store.export import export
from proxy.store.read import SqliteReader
from tests.store.test_fixtures import compressed, conversation, turn, write

SCHEMA = Path(__file__).resolve().parents[2] / "schemas" / "portable-v2.schema.json"


def _doc(tmp_path: Path) -> dict[str, Any]:
    turns = conversation(5, model_for=lambda i: "a" if i < 3 else "b")
    last = turns[-1]
    history = [*last.messages, dict(last.reply or {}), {"role": "user", "content": "more"}]
    turns.append(
        compressed(history, {"role": "assistant", "content": "ok"}, model="b", started_at=2e9)
    )
    write(tmp_path / "a.db", [*turns, turn([{"role": "user", "content": "x"}], None)])
    reader = SqliteReader(tmp_path / "a.db")
    sid = reader.list_sessions(model="b")[0]["id"]
    out = export(reader, sid, "portable", now=0.0)
    assert isinstance(out, dict)
    return out


def test_round_trip_is_lossless(tmp_path: Path) -> None:
    """export → import → export gives the same messages, turns and decisions."""
    doc = _doc(tmp_path)
    sid = admin.import_document(tmp_path / "b.db", json.loads(json.dumps(doc)))
    again = export(SqliteReader(tmp_path / "b.db"), sid, "portable", now=0.0)
    assert again == doc
    assert doc["turns"][-1]["decision"]["policies"] == ["summarize"]
    assert doc["turns"][-1]["forwarded"][1] == {
        "insert": {"role": "system", "content": "Summary: kiwis were discussed."}
    }
    assert doc["system_prompt"] == "You are terse." and doc["models"] == ["a", "b"]


def test_export_up_to_a_turn(tmp_path: Path) -> None:
    """--turn N exports the first N turns and that turn's history and reply."""
    doc = _doc(tmp_path)
    reader = SqliteReader(tmp_path / "a.db")
    part = export(reader, doc["conversation_id"], "portable", turn=2, now=0.0)
    assert isinstance(part, dict)
    assert len(part["turns"]) == 2 and len(part["messages"]) == 5


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("format_version",), 3, "format_version"),
        (("messages", 0, "message", "role"), 5, "messages[0].message.role"),
        (("turns", 0, "status"), "200", "turns[0].status"),
        (("turns", 5, "forwarded", 0, "keep"), [0, 999], "turns[5].forwarded[0].keep"),
        (("turns", 2, "history_length"), -1, "turns[2].history_length"),
        (("turns", 1, "reply"), [], "turns[1].reply"),
    ],
)
def test_validation_names_the_field(
    tmp_path: Path, path: tuple[Any, ...], value: Any, field: str
) -> None:
    """A malformed document is rejected with the offending field named."""
    doc = _doc(tmp_path)
    target: Any = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(InvalidDocument) as err:
        portable.validate(doc)
    assert err.value.field == field


def test_missing_field_named(tmp_path: Path) -> None:
    """A missing required field is named."""
    doc = _doc(tmp_path)
    del doc["turns"][0]["model"]
    with pytest.raises(InvalidDocument, match=r"turns\[0\]\.model: required field is missing"):
        portable.validate(doc)


def test_schema_accepts_an_export(tmp_path: Path) -> None:
    """The shipped JSON Schema is valid 2020-12 and accepts a real export."""
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(_doc(tmp_path))
