"""Each importer reads its format's fixture into the store's chat messages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.store import portable
from proxy.store.errors import InvalidDocument
from proxy.store.importers import registry
from proxy.store.importers.base import Conversation
from tests.store import importer_fixtures as fx


def _one(path: Path, kind: str) -> Conversation:
    importer = registry.detect(path)
    assert importer is not None and importer.kind == kind
    reading = importer.read(path)
    assert len(reading.conversations) >= 1
    return reading.conversations[0]


def test_codex_rollout(tmp_path: Path) -> None:
    """Items become messages: developer → system, an image part, reasoning on the call
    that followed it, function/custom/local-shell calls with their outputs; the model
    comes from turn_context; event_msg lines add nothing; the compaction is noted."""
    conv = _one(fx.codex_rollout(tmp_path), "codex")
    assert conv.key == f"codex:{fx.CODEX_ID}"
    roles = [m["role"] for m in conv.messages]
    assert conv.title == "why does the build fail? see screenshot"  # not the injected block
    assert roles == ["system", "user", "user", "assistant", "tool", "assistant", "tool", "assistant",
                     "user", "assistant", "tool", "assistant"]  # fmt: skip
    del conv.messages[1], conv.models[1]
    assert conv.messages[1]["content"][1]["image_url"]["url"].startswith("data:image/png")
    call = conv.messages[2]
    assert call["reasoning_content"] == "Look at the Makefile first."
    assert call["tool_calls"][0]["function"]["name"] == "shell"
    assert conv.messages[4]["tool_calls"][0]["function"]["arguments"].startswith("*** Begin")
    assert conv.messages[9] == {"role": "tool", "tool_call_id": "call_c", "content": "ok\n[image]"}
    assert conv.models[2] == "gpt-5-codex" and conv.models[1] is None
    assert conv.notes and "compacted" in conv.notes[0]


def test_codex_malformed_line_is_named(tmp_path: Path) -> None:
    """A broken line is reported with its file and line number; the rest is read."""
    path = fx.codex_rollout(tmp_path, bad_line=True)
    reading = registry.IMPORTERS["codex"].read(path)
    assert [p.where for p in reading.problems] == [f"{path}:5"]
    assert len(reading.conversations[0].messages) == 12


def test_claude_code_transcript(tmp_path: Path) -> None:
    """The main chain only (no sidechain, no snapshot or system records), one reply
    from three records of the same message id, tool_result as a tool message, the
    summary as title, the model per reply."""
    conv = _one(fx.claude_transcript(tmp_path), "claude-code")
    assert conv.key == f"claude-code:{fx.CLAUDE_ID}" and conv.title == "Add a config file"
    assert [m["role"] for m in conv.messages] == ["user", "assistant", "tool", "assistant", "user"]
    reply = conv.messages[1]
    assert reply["content"] == "I'll create config.toml."
    assert reply["reasoning_content"] == "A TOML file fits."
    assert reply["tool_calls"][0]["id"] == "toolu_1"
    assert conv.messages[0]["content"][1]["image_url"]["url"] == f"data:image/png;base64,{fx.PNG}"
    assert conv.models[1] == "claude-sonnet-4-5" and conv.models[3] == "claude-opus-4-1"
    assert all("sub-agent" not in str(m) for m in conv.messages)


def test_chatgpt_current_branch(tmp_path: Path) -> None:
    """The branch ending at current_node (the edit, not the old question); the null root
    and hidden system node skipped; a python call and its output paired; thoughts kept on
    the reply; a broken conversation reported by its index."""
    path = fx.chatgpt_export(tmp_path)
    reading = registry.IMPORTERS["chatgpt"].read(path)
    first, second = reading.conversations
    assert first.key == "chatgpt:c-1" and first.title == "Plotting"
    assert "old question" not in str(first.messages)
    instructions = {"role": "system", "content": "I am a data analyst.\n\nAnswer with code."}
    assert first.messages.pop(0) == instructions  # hidden custom instructions, but sent
    assert [m["role"] for m in first.messages] == ["user", "assistant", "tool", "assistant"]
    assert first.messages[0]["content"][0]["image_url"]["url"] == "file-service://file-1"
    call_id = first.messages[1]["tool_calls"][0]["id"]
    assert first.messages[2]["tool_call_id"] == call_id
    assert first.messages[3]["reasoning_content"] == "Use matplotlib."
    assert second.models == [None, "gpt-4o-mini"]
    assert [p.where for p in reading.problems] == [f"{path}:[2]"]


def test_plain_json_formats(tmp_path: Path) -> None:
    """OpenAI JSON is read as it is; Anthropic JSON's system, tool_use/tool_result and
    image source become the OpenAI shapes; both named by a digest of their content."""
    o = _one(fx.openai_json(tmp_path), "openai")
    assert o.messages[3] == {"role": "tool", "tool_call_id": "c1", "content": "a cat"}
    a = _one(fx.anthropic_json(tmp_path), "anthropic")
    assert a.messages[0] == {"role": "system", "content": "Be brief."}
    assert a.messages[1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "https://x/m.png"},
    }
    assert a.messages[2]["tool_calls"][0]["function"]["arguments"] == '{"city":"Oslo"}'
    assert a.messages[3] == {"role": "tool", "tool_call_id": "t1", "content": "rain"}
    assert _one(fx.anthropic_json(tmp_path), "anthropic").key == a.key


def test_portable_v1_is_upgraded() -> None:
    """A version 1 document gains ``source``; a newer version is refused with the fix."""
    v1 = {"format": portable.FORMAT, "format_version": 1, "name": "import:codex:x"}
    assert portable.upgrade(v1)["source"] == {"kind": "codex", "id": "x"}
    with pytest.raises(InvalidDocument, match="upgrade handoff"):
        portable.validate({"format": portable.FORMAT, "format_version": 9})


def test_unknown_file_is_not_detected(tmp_path: Path) -> None:
    """A JSON file of no known shape matches no importer."""
    path = tmp_path / "x.json"
    path.write_text('{"hello": 1}')
    assert registry.detect(path) is None


def test_claude_code_across_a_compaction(tmp_path: Path) -> None:
    """A compact_boundary links the chain on through logicalParentUuid (noted); a
    sub-agent's transcript of sidechain records only holds no conversation."""
    conv = _one(fx.claude_compacted(tmp_path), "claude-code")
    assert [m["content"] for m in conv.messages][1:] == ["first", "one", "second"]
    assert conv.title == "first"  # not the isMeta caveat
    assert conv.notes == ["Claude Code compacted the history here"]
    sub = registry.IMPORTERS["claude-code"].read(tmp_path / "agent-1234.jsonl")
    assert not sub.conversations and not sub.problems


def test_plain_json_detection_reads_the_structure(tmp_path: Path) -> None:
    """OpenAI JSON whose text mentions Anthropic words stays OpenAI; a top-level
    ``system`` or a tool_use block makes it Anthropic."""
    path = tmp_path / "a.json"
    path.write_text(json.dumps([{"role": "user", "content": '"thinking" "source" tool_use'}]))
    assert getattr(registry.detect(path), "kind", None) == "openai"
    path.write_text(json.dumps({"system": "s", "messages": [{"role": "user", "content": "x"}]}))
    assert getattr(registry.detect(path), "kind", None) == "anthropic"


def test_codex_legacy_rollout(tmp_path: Path) -> None:
    """An early rollout: a bare meta line (id, instructions), then bare items; an
    output written as ``{"content", "success"}``."""
    lines = [
        {"id": "old-1", "timestamp": "2025-04-01T00:00:00Z", "instructions": "Be careful."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "ls"}]},
        {"type": "function_call", "name": "shell", "arguments": "{}", "call_id": "c"},
        {
            "type": "function_call_output",
            "call_id": "c",
            "output": {"content": "a b", "success": True},
        },
    ]
    path = tmp_path / "rollout-2025-04-01-old-1.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    conv = _one(path, "codex")
    assert conv.key == "codex:old-1"
    assert conv.messages[0] == {"role": "system", "content": "Be careful."}
    assert conv.messages[-1] == {"role": "tool", "tool_call_id": "c", "content": "a b"}
