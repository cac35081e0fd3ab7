"""Threading as the client means it, through the real proxy: a rerun is one new session, a
client's own session id threads its requests, and titles are what the person wrote."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from proxy.cli.main import main as cli_main
from proxy.server.workspace import SESSION_HEADERS
from proxy.store.read import SqliteReader
from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream
from tests.server.test_records_retry import sessions, until


async def _run(client: openai.AsyncOpenAI, questions: list[str], **extra: Any) -> None:
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for q in questions:
        history.append({"role": "user", "content": q})
        reply = await client.chat.completions.create(
            model="gpt-4o",
            messages=history,  # type: ignore[arg-type]
            **extra,
        )
        history.append(reply.choices[0].message.model_dump(exclude_none=True))


async def test_rerun_of_a_conversation_is_one_new_session(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """Three identical runs of four turns: three sessions of four turns (was nine)."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db)})
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-ci", max_retries=0)
    for _ in range(3):
        await _run(client, [f"step {i}" for i in range(4)])
    await client.close()
    await until(lambda: sum(s["turns"] for s in sessions(db)) == 12)
    found = sessions(db)
    assert sorted(s["turns"] for s in found) == [4, 4, 4]
    forks = [s for s in found if SqliteReader(db).session(s["id"]).get("parent_session")]
    assert len(forks) == 2  # each rerun forks once, at its first turn


@pytest.mark.parametrize("header", SESSION_HEADERS)
async def test_client_session_header_threads(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, header: str
) -> None:
    """Two unrelated conversations under one client session id are one session."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db)})
    client = openai.AsyncOpenAI(
        base_url=proxy.url,
        api_key="sk-agent",
        max_retries=0,
        default_headers={header: "ses_abc123"},
    )
    await _run(client, ["first question"])
    await _run(client, ["an unrelated second question"])
    await client.close()
    await until(lambda: sum(s["turns"] for s in sessions(db)) == 2)
    (session,) = sessions(db)
    assert session["turns"] == 2


async def test_title_skips_client_injected_text(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A reminder block, then the person's words: the title is the words."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db)})
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-qwen", max_retries=0)
    messages: Any = [
        {"role": "system", "content": "You are Qwen Code."},
        {"role": "user", "content": "<environment_context>cwd=/src</environment_context>"},
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "<system-reminder>The following skills are…</system-reminder>",
                },
                {"type": "text", "text": "Fix the flaky login test please"},
            ],
        },
    ]
    await client.chat.completions.create(model="gpt-4o", messages=messages)
    await client.close()
    await until(lambda: len(sessions(db)) == 1)
    assert sessions(db)[0]["title"] == "Fix the flaky login test please"


async def test_side_call_is_attached_and_marked(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """opencode's title call (its own small system prompt, no tools, same x-session-id) lands
    in the session it serves, marked as a side call; the conversation goes on there."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db)})
    client = openai.AsyncOpenAI(
        base_url=proxy.url,
        api_key="sk-oc",
        max_retries=0,
        default_headers={"x-session-id": "ses_opencode1"},
    )
    tools: Any = [{"type": "function", "function": {"name": "read", "parameters": {}}}]
    history: Any = [
        {"role": "system", "content": "You are opencode."},
        {"role": "user", "content": "refactor the parser"},
    ]
    first = await client.chat.completions.create(model="gpt-4o", messages=history, tools=tools)
    title_call: Any = [
        {"role": "system", "content": "Generate a short title."},
        {"role": "user", "content": "refactor the parser"},
    ]
    await client.chat.completions.create(model="gpt-4o", messages=title_call)
    history += [first.choices[0].message.model_dump(exclude_none=True)]
    history += [{"role": "user", "content": "go on"}]
    await client.chat.completions.create(model="gpt-4o", messages=history, tools=tools)
    await client.close()
    await until(lambda: sum(s["turns"] for s in sessions(db)) == 3)
    (session,) = sessions(db)
    timeline = SqliteReader(db).session(session["id"])["timeline"]
    assert [t["side_call"] for t in timeline] == [False, True, False]
    assert session["title"] == "refactor the parser"
    assert cli_main(["sessions", "show", session["id"], "--store", str(db)]) == 0
    assert capsys.readouterr().out.count("side call") == 1
