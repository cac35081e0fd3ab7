"""``n`` = 2: every choice is stored, streamed or not, and shown; the history goes on with
choice 0 (``reply``), which exports keep."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from proxy.cli.main import main as cli_main
from proxy.store.read import SqliteReader
from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream
from tests.server.test_records_retry import sessions, until


@pytest.mark.parametrize("writer", ["thread", "process"])
@pytest.mark.parametrize("stream", [False, True])
async def test_every_choice_is_stored_and_shown(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    stream: bool,
    writer: str,
) -> None:
    """Two choices through the openai SDK: both in the record and in ``sessions show``."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "writer": writer})
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-n", max_retries=0)
    messages: list[dict[str, str]] = [{"role": "user", "content": "two takes please"}]
    got: dict[int, str] = {}
    if stream:
        events = await client.chat.completions.create(
            model="gpt-4o",
            messages=messages,
            n=2,
            stream=True,  # type: ignore[arg-type]
        )
        async for chunk in events:
            for c in chunk.choices:
                got[c.index] = got.get(c.index, "") + (c.delta.content or "")
    else:
        reply = await client.chat.completions.create(model="gpt-4o", messages=messages, n=2)  # type: ignore[arg-type]
        got = {c.index: c.message.content or "" for c in reply.choices}
    await client.close()
    assert sorted(got) == [0, 1] and got[0] != got[1]
    await until(lambda: sum(s["turns"] for s in sessions(db)) == 1)
    (session,) = sessions(db)
    turn = SqliteReader(db).turn(session["id"], 1)
    assert [c["index"] for c in turn["choices"]] == [0, 1]
    assert [c["message"]["content"] for c in turn["choices"]] == [got[0], got[1]]
    assert turn["reply"]["content"] == got[0]  # the history goes on with choice 0
    assert cli_main(["sessions", "show", session["id"], "--turn", "1", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    assert "choice 1:" in out and "(take 2)" in out
    # Exports go on with choice 0, the history's reply.
    assert (
        cli_main(["sessions", "export", session["id"], "--format", "openai", "--store", str(db)])
        == 0
    )
    exported = capsys.readouterr().out
    assert got[0] in exported and "(take 2)" not in exported
