"""``handoff sessions export``: the request bodies for other APIs, ``--sent``, and the
Markdown that shows each compression."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from proxy.store.read import SqliteReader
from tests.cli import test_sessions
from tests.cli.test_sessions import _sid, cli
from tests.store import importer_fixtures as fx


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """test_sessions' seeded store: a handoff at turn 3, a compressed turn 4."""
    return Path(test_sessions.store.__wrapped__(tmp_path))  # type: ignore[attr-defined]


def _out(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    capsys.readouterr()
    assert cli(*argv) == 0
    return capsys.readouterr().out


def test_sent_is_what_the_turn_sent(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--turn 4 --sent gives the compressed turn's forwarded messages (the summary
    note in, the middle out); without --sent, its original history and reply."""
    sid = _sid(store)
    sent = json.loads(_out(capsys, "sessions", "export", sid, "--turn", "4", "--sent",
                           "--format", "openai", "--store", str(store)))  # fmt: skip
    assert sent["model"] == "llama-8k"
    assert sent["messages"][1] == {"role": "system", "content": "Summary: kiwis were discussed."}
    history = json.loads(_out(capsys, "sessions", "export", sid, "--turn", "4",
                              "--format", "openai", "--store", str(store)))  # fmt: skip
    assert len(history["messages"]) == 9 and len(sent["messages"]) == 4
    assert "Summary: kiwis" not in json.dumps(history)
    assert cli("sessions", "export", sid, "--sent", "--store", str(store)) == 2
    assert "--sent: applies to openai" in capsys.readouterr().err


def test_markdown_shows_each_compression(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The compressed turn is listed with what it dropped, the note it inserted and
    how many messages went to which model."""
    text = _out(capsys, "sessions", "export", _sid(store), "--format", "markdown",
                "--store", str(store))  # fmt: skip
    section = text.split("## Compressions", 1)[1].split("## Messages", 1)[0]
    assert "### turn 4 · llama-8k · summarize" in section
    assert "Sent 4 of 8 messages to llama-8k (5000 → 900 tokens): 5 dropped, 1 inserted." in section
    assert "- inserted (system): system: Summary: kiwis were discussed." in section
    assert section.count("- dropped [") == 5


def _imported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    store = tmp_path / "s.db"
    fx.codex_rollout(tmp_path)
    cli("sessions", "import", str(tmp_path / "sessions"), "--store", str(store))
    capsys.readouterr()
    return store, SqliteReader(store).list_sessions()[0]["id"]


def test_anthropic_body(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """System apart, tool_use / tool_result blocks, a data-URL image as a base64
    source, roles alternating, max_tokens set."""
    store, sid = _imported(tmp_path, capsys)
    body = json.loads(_out(capsys, "sessions", "export", sid, "--format", "anthropic",
                           "--store", str(store)))  # fmt: skip
    assert body["system"] == "<permissions>sandboxed</permissions>"
    assert body["max_tokens"] == 4096
    roles = [m["role"] for m in body["messages"]]
    assert all(a != b for a, b in itertools.pairwise(roles))
    first = body["messages"][0]["content"]
    assert first[0]["text"].startswith("<environment_context>")  # two user turns, merged
    assert first[2] == {
        "type": "image",
        "source": {"type": "base64", "media_type": "image/png", "data": fx.PNG},
    }
    use = body["messages"][1]["content"][0]
    assert use == {
        "type": "tool_use",
        "id": "call_a",
        "name": "shell",
        "input": {"command": ["cat", "Makefile"]},
    }
    result = body["messages"][2]["content"][0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "call_a"


def test_ollama_body(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Images as base64 in ``images``, arguments as objects, tool replies named,
    reasoning as ``thinking``."""
    store, sid = _imported(tmp_path, capsys)
    body = json.loads(_out(capsys, "sessions", "export", sid, "--format", "ollama",
                           "--store", str(store)))  # fmt: skip
    assert body["stream"] is False and body["model"] == "gpt-5-codex"
    user = body["messages"][2]
    assert user["images"] == [fx.PNG] and user["content"].startswith("why does the build")
    call = body["messages"][3]
    assert call["tool_calls"] == [
        {"function": {"name": "shell", "arguments": {"command": ["cat", "Makefile"]}}}
    ]
    assert call["thinking"] == "Look at the Makefile first."
    assert body["messages"][4]["tool_name"] == "shell"


def test_markdown_shows_reasoning_and_images(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An imported Codex session's Markdown keeps its reasoning and marks the image."""
    store, sid = _imported(tmp_path, capsys)
    text = _out(capsys, "sessions", "export", sid, "--format", "markdown", "--store", str(store))
    assert "> *reasoning:* Look at the Makefile first." in text
    assert "*[image_url]*" in text and "**tool call** `apply_patch` (call_b)" in text


def test_responses_body(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An imported Codex session as a Responses body: its leading system message (the
    importer's, from Codex's developer item) the instructions, the image an input_image,
    each call before its output by call_id, the reasoning left out; ``native`` for a session not recorded by the proxy is chat."""
    store, sid = _imported(tmp_path, capsys)
    body = json.loads(_out(capsys, "sessions", "export", sid, "--format", "responses",
                           "--store", str(store)))  # fmt: skip
    assert body["model"] == "gpt-5-codex"
    assert body["instructions"] == "<permissions>sandboxed</permissions>"
    first = body["input"][0]
    assert first["role"] == "user" and first["content"][0]["text"].startswith("<environment")
    parts = [p for i in body["input"] if i["type"] == "message" for p in i["content"]]
    assert {"type": "input_image", "image_url": f"data:image/png;base64,{fx.PNG}",
            "detail": "auto"} in parts  # fmt: skip
    kinds = [(i["type"], i.get("call_id")) for i in body["input"]]
    calls = [c for k, c in kinds if k == "function_call"]
    assert calls == ["call_a", "call_b", "call_c"]
    assert all(kinds.index(("function_call", c)) < kinds.index(("function_call_output", c))
               for c in calls)  # fmt: skip
    assert "reasoning" not in {k for k, _ in kinds} and "Makefile first" not in json.dumps(body)
    native = json.loads(_out(capsys, "sessions", "export", sid, "--format", "native",
                             "--store", str(store)))  # fmt: skip
    assert set(native) == {"model", "messages"}
