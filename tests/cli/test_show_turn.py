"""``sessions show --turn N``: every message in full, images summarised, ``--max-chars``."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest

from proxy.store.read import SqliteReader
from tests.cli.test_sessions import cli
from tests.store.test_fixtures import turn, write

LONG = " ".join(f"line{i}" for i in range(120)) + "\nand a second paragraph, kept whole"
PNG = base64.b64encode(b"\x89PNG" + bytes(34 * 1024 - 4)).decode()


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """One turn: a long text, a pasted image, a linked image, a tool call and its result."""
    path = tmp_path / "s.db"
    history = [
        {"role": "system", "content": LONG},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is in these?"},
                {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}},
                {"type": "image_url", "image_url": {"url": "https://cdn.example.com/cat.jpg",
                                                    "detail": "low"}},
            ],
        },
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "lookup", "arguments": '{"q": "cats"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "two cats"},
    ]  # fmt: skip
    write(path, [turn(history, {"role": "assistant", "content": "A cat, twice. " * 30})])
    return path


def _show(store: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> str:
    sid = SqliteReader(store).list_sessions()[0]["id"]
    assert cli("sessions", "show", sid, "--turn", "1", "--store", str(store), *extra) == 0
    return capsys.readouterr().out


def test_every_message_is_shown_in_full(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Long text and the reply are not cut; a second paragraph keeps its own line."""
    out = _show(store, capsys)
    assert "line0 line1" in out and "line119" in out
    assert "\n      and a second paragraph, kept whole" in out
    assert "reply: assistant: " + "A cat, twice. " * 29 + "A cat, twice." in out
    assert '→ lookup({"q": "cats"})' in out and "tool (call_1): two cats" in out


def test_images_are_summarised_by_type_and_size_or_host(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pasted image is its media type and size, a linked one its host; no base64 shown."""
    out = _show(store, capsys)
    assert "[image/png 34 KB]" in out
    assert "[image from cdn.example.com, detail low]" in out
    assert PNG[:40] not in out


def test_max_chars_cuts_each_message_and_says_how_much(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--max-chars N keeps N characters of each message and counts the rest."""
    out = _show(store, capsys, "--max-chars", "20")
    assert "system: line0 line1 line2 li… (" in out and "more characters)" in out
    assert "line119" not in out and "two cats" in out  # (short enough already)
    cut = len(LONG) - 20
    assert f"… ({cut:,} more characters)" in out
