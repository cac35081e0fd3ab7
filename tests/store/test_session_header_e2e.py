"""``x-handoff-session`` on every chat response names the session the turn is stored in,
known before the store's writer has threaded it (see ``proxy.server.session_ids``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

from proxy.store.read import SqliteReader
from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream
from tests.server.test_records_retry import sessions, until


async def _conversation(
    client: openai.AsyncOpenAI, questions: list[str], stream: bool
) -> list[str]:
    """Run the questions as one conversation; the header of each answer."""
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    ids = []
    for q in questions:
        history.append({"role": "user", "content": q})
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt-4o",
            messages=history,  # type: ignore[arg-type]
            stream=stream,  # type: ignore[arg-type]
        )
        ids.append(raw.headers["x-handoff-session"])
        parsed: Any = raw.parse()
        if stream:
            text = "".join([c.choices[0].delta.content or "" async for c in parsed if c.choices])
        else:
            text = parsed.choices[0].message.content
        history.append({"role": "assistant", "content": text})
    return ids


@pytest.mark.parametrize("writer", ["thread", "process"])
@pytest.mark.parametrize("stream", [False, True])
async def test_header_names_the_stored_session(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, writer: str, stream: bool
) -> None:
    """Two conversations of three turns: each answer's header is its stored session's id."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "writer": writer})
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-h", max_retries=0)
    first = await _conversation(client, ["a", "b", "c"], stream)
    second = await _conversation(client, ["x", "y", "z"], stream)
    await client.close()
    assert len(set(first)) == 1 and len(set(second)) == 1 and first[0] != second[0]
    await until(lambda: sum(s["turns"] for s in sessions(db)) == 6)
    stored = {s["id"]: s["turns"] for s in sessions(db)}
    assert stored == {first[0]: 3, second[0]: 3}


async def test_header_sent_back_threads_and_alias_resolves(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A client that sends the header back threads into that session; after a restart (no
    memory) a continuation's announced id is an alias that resolves to the stored session."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db)})
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-h", max_retries=0)
    (sid,) = await _conversation(client, ["first"], stream=False)
    await client.close()
    again = openai.AsyncOpenAI(
        base_url=proxy.url,
        api_key="sk-h",
        max_retries=0,
        default_headers={"x-handoff-session": sid},
    )
    assert await _conversation(again, ["unrelated, but the same session"], False) == [sid]
    await again.close()
    await until(lambda: sum(s["turns"] for s in sessions(db)) == 2)
    assert [s["turns"] for s in sessions(db)] == [2]
    await proxy.server.close()  # drains the writer

    restarted = await make_proxy(fake_upstream.url, store={"path": str(db)})
    client = openai.AsyncOpenAI(base_url=restarted.url, api_key="sk-h", max_retries=0)
    history: Any = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "unrelated, but the same session"},
        {"role": "assistant", "content": "Echo: unrelated, but the same session"},
        {"role": "user", "content": "after the restart"},
    ]
    raw = await client.chat.completions.with_raw_response.create(model="gpt-4o", messages=history)
    await client.close()
    alias = raw.headers["x-handoff-session"]
    await until(lambda: sum(s["turns"] for s in sessions(db)) == 3)
    assert alias != sid  # the restarted proxy could not know; the writer threads it
    assert SqliteReader(db).resolve(alias) == sid
    assert [s["turns"] for s in sessions(db)] == [3]
