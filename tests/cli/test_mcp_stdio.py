"""``handoff mcp`` as a real subprocess, driven by the MCP SDK's own stdio client: every
tool answers, and bad input to each is an error result, never a crash."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.store.test_fixtures import conversation, write

HANDOFF = Path(sys.executable).with_name("handoff")
LONG = [
    {"role": "system", "content": "Be brief."},
    *[
        m
        for i in range(30)
        for m in (
            {"role": "user", "content": f"question {i}: " + "words " * 60},
            {"role": "assistant", "content": f"answer {i}: " + "more " * 60},
        )
    ],
    {"role": "user", "content": "and now?"},
]


@pytest.fixture
def server(tmp_path: Path) -> StdioServerParameters:
    db = tmp_path / "s.db"
    write(db, conversation(3))
    config = tmp_path / "c.toml"
    config.write_text('[models."tiny-2k"]\ncontext_window = 2048\nmax_output_tokens = 256\n')
    return StdioServerParameters(
        command=str(HANDOFF),
        args=["--config", str(config), "mcp", "--store", str(db)],
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )


async def _ok(client: Client, tool: str, args: dict[str, Any]) -> Any:
    r = await client.call_tool(tool, args)
    assert not r.is_error, (tool, r.content)
    return r.structured_content


async def _bad(client: Client, tool: str, args: dict[str, Any], says: str) -> None:
    r = await client.call_tool(tool, args)
    assert r.is_error, (tool, args)
    text = r.content[0].text  # type: ignore[union-attr]
    assert says in text, text


async def test_every_tool_over_stdio(server: StdioServerParameters) -> None:
    """Lists the nine tools; each gives its answer, and an error result for bad input."""
    async with Client(server) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert names == {
            "model_context_window", "list_known_models", "count_tokens", "migrate_session",
            "list_sessions", "show_session", "export_session", "recall", "remember",
        }  # fmt: skip
        win = await _ok(c, "model_context_window", {"model": "tiny-2k"})
        assert (win["context_window"], win["source"]) == (2048, "config")
        await _bad(c, "model_context_window", {"model": "no-such-model"}, "unknown model")

        models = (await _ok(c, "list_known_models", {"filter": "gpt-4o*"}))["result"]
        assert models and all(m["model"].startswith("gpt-4o") for m in models)
        await _bad(c, "list_known_models", {"filter": 7}, "valid string")

        counted = await _ok(c, "count_tokens", {"messages": LONG[:2], "model": "gpt-4o"})
        assert counted["exact"] is True and counted["tokens"] > 60
        await _bad(c, "count_tokens", {"messages": "hi", "model": "gpt-4o"}, "valid list")
        await _bad(c, "count_tokens", {"messages": [{"content": "x"}], "model": "gpt-4o"}, "role")

        fitted = await _ok(c, "migrate_session", {"messages": LONG, "target_model": "tiny-2k"})
        assert fitted["decision"] == "compressed" and fitted["steps"]
        assert fitted["messages"][-1] == LONG[-1] and len(fitted["messages"]) < len(LONG)
        same = await _ok(c, "migrate_session", {"messages": LONG[:3], "target_model": "gpt-4o"})
        assert same["decision"] == "passthrough" and same["messages"] == LONG[:3]
        await _bad(c, "migrate_session", {"messages": LONG, "target_model": ""}, "model")

        (session,) = (await _ok(c, "list_sessions", {}))["result"]
        await _bad(c, "list_sessions", {"since": "yesterday-ish"}, "since")
        sid = session["id"]
        shown = await _ok(c, "show_session", {"id": sid})
        assert len(shown["timeline"]) == 3
        one = await _ok(c, "show_session", {"id": sid, "turn": 2})
        assert one["history"]
        await _bad(c, "show_session", {"id": sid, "turn": 99}, "99")
        await _bad(c, "show_session", {"id": "feedfacefeedface"}, "no session")

        doc = await _ok(c, "export_session", {"id": sid, "format": "portable"})
        assert doc["document"]["conversation_id"] == sid
        md = await _ok(c, "export_session", {"id": sid, "format": "markdown"})
        assert isinstance(md["document"], str) and sid in md["document"]
        responses = await _ok(c, "export_session", {"id": sid, "format": "responses"})
        assert responses["document"]["input"] and "messages" not in responses["document"]
        native = await _ok(c, "export_session", {"id": sid, "format": "native"})
        assert native["document"]["messages"]  # (recorded as chat)
        await _bad(c, "export_session", {"id": sid, "format": "pdf"}, "format")

        nothing = await _ok(c, "recall", {})
        assert nothing["message"] is None
        mem = await _ok(c, "remember", {"session_id": sid})
        assert mem["source"] == "digest" and "## Task goal" in mem["text"]
        await _bad(c, "remember", {"session_id": "feedfacefeedface"}, "no session")
        got = await _ok(c, "recall", {"query": "question"})
        assert got["sessions"] == [sid] and got["message"].startswith("[handoff: recalled")
        await _bad(c, "recall", {"query": ["not", "text"]}, "valid string")
