"""Session memories through the running proxy: written at each trigger, off the request path."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest

from policies.memory import SECTIONS
from proxy.store.read import SqliteReader
from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream
from tests.fixtures_upstream import FakeUpstreamFactory
from tests.server.memory_waits import memories_in, until


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {
        "id": f"c_{name}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


async def _play(
    client: openai.AsyncOpenAI, asks: list[str], model: str | list[str] = "gpt-4o", **kw: Any
) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for i, ask in enumerate(asks):
        history.append({"role": "user", "content": ask})
        m = model if isinstance(model, str) else model[i]
        reply = await client.chat.completions.create(model=m, messages=history, **kw)  # type: ignore[arg-type]
        history.append({"role": "assistant", "content": reply.choices[0].message.content})
    return history


WORK = [
    "Add rate limiting to src/admin.py with a token bucket.",
    *[f"step {i}: keep going" for i in range(2, 9)],
]


async def test_a_memory_at_eight_turns_then_as_the_session_doubles(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """No memory at 7 user turns; one at 8 (deterministic, goal = the first request); at 16 it
    covers 16 turns; none at 24 (the next is due at 32: a long session costs a few writes)."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "writer": "thread"})
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-one", max_retries=0)
    history = await _play(client, WORK[:7])
    await until(lambda: SqliteReader(db).list_sessions())
    await asyncio.sleep(0.5)
    assert memories_in(db) == []
    history.append({"role": "user", "content": WORK[7]})
    await client.chat.completions.create(model="gpt-4o", messages=history)  # type: ignore[arg-type]
    (mem,) = await until(lambda: memories_in(db))
    assert (mem["reason"], mem["turns"], mem["source"]) == ("turns", 8, "digest")
    assert mem["memory"]["goal"] == WORK[0]
    assert all(f"## {s}" in mem["text"] for s in SECTIONS)
    more = [f"later {i}" for i in range(9, 17)]
    history.append({"role": "assistant", "content": "ok"})
    for ask in more:
        history.append({"role": "user", "content": ask})
        r = await client.chat.completions.create(model="gpt-4o", messages=history)  # type: ignore[arg-type]
        history.append({"role": "assistant", "content": r.choices[0].message.content})
    await until(lambda: any(m["turns"] == 16 for m in memories_in(db)))
    for ask in [f"later {i}" for i in range(17, 25)]:
        history.append({"role": "user", "content": ask})
        r = await client.chat.completions.create(model="gpt-4o", messages=history)  # type: ignore[arg-type]
        history.append({"role": "assistant", "content": r.choices[0].message.content})
    await asyncio.sleep(0.5)
    assert [m["turns"] for m in memories_in(db)] == [16]
    await client.close()


@pytest.mark.parametrize("writer", ["thread", "process"])
async def test_a_memory_when_the_user_asks(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, writer: str
) -> None:
    """ "remember this" (and 记住) writes the memory at once, with either store writer."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "writer": writer})
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-one", max_retries=0)
    await _play(client, ["Use port 8443 for the admin API.", "remember this"])
    (mem,) = await until(lambda: memories_in(db))
    assert (mem["reason"], mem["turns"]) == ("asked", 2)
    assert mem["memory"]["goal"] == "Use port 8443 for the admin API."
    await _play(client, ["Rename the CLI flag to --port.", "记住"])
    await until(lambda: len(memories_in(db)) == 2)
    await client.close()


async def test_a_memory_when_handed_to_another_model_or_compressed(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A switch of model writes it; so does the first compressed turn."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(
        fake_upstream.url,
        store={"path": str(db), "writer": "thread"},
        models={"small-8k": {"context_window": 8192}},
    )
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-one", max_retries=0)
    await _play(client, ["one", "two", "three"], model=["gpt-4o", "gpt-4o", "gpt-4o-mini"])
    (mem,) = await until(lambda: memories_in(db))
    assert (mem["reason"], mem["turns"]) == ("handoff", 3)
    big = "x " * 5000  # three of these overflow small-8k (with its quarter kept for output)
    await _play(client, [f"a {big}", f"b {big}", f"c {big}", "d"], model="small-8k")
    found = await until(lambda: [m for m in memories_in(db) if m["reason"] == "compressed"])
    assert found[0]["turns"] >= 3
    await client.close()


async def test_the_llm_refines_the_memory_and_its_failure_keeps_the_digest(
    fake_upstream_factory: FakeUpstreamFactory, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """With the summarizer configured, its answer (every section) is the memory; a model
    that fails or answers without the sections leaves the deterministic memory."""
    text = "\n\n".join(f"## {s}\nfrom the llm" for s in SECTIONS)
    models = {"gpt-4o": 128_000, "mem-llm": 128_000, "mem-bad": 128_000}
    fake = await fake_upstream_factory(models=models, canned={"mem-llm": text, "mem-bad": "nope"})
    for model, source in (("mem-llm", "llm"), ("mem-bad", "digest"), ("mem-missing", "digest")):
        db = tmp_path / f"{model}.db"
        proxy = await make_proxy(
            fake.url,
            store={"path": str(db), "writer": "thread"},
            compression={"summarize": {"enabled": True, "model": model}},
        )
        client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-one", max_retries=0)
        await _play(client, ["Build the parser.", "save"])
        (mem,) = await until(lambda db=db: memories_in(db))
        assert mem["source"] == source, model
        if source == "llm":
            assert mem["text"] == text and mem["memory"]["llm"]["Task goal"] == "from the llm"
        else:
            assert mem["memory"]["goal"] == "Build the parser."
        await client.close()
    asked = [r.json()["model"] for r in fake.chat_requests]
    assert {"mem-llm", "mem-bad", "mem-missing"} <= set(asked)


async def test_memories_never_cross_workspaces(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A memory belongs to the workspace of its session, and only it lists it."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "writer": "thread"})
    one = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-one", max_retries=0)
    two = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-two", max_retries=0)
    await _play(one, ["first key's work", "remember this"])
    await _play(two, ["second key's work", "remember this"])
    mems = await until(lambda: len(memories_in(db)) == 2 and memories_in(db))
    by_ws = {m["workspace"]: m for m in mems}
    assert len(by_ws) == 2
    reader = SqliteReader(db)
    for ws, mem in by_ws.items():
        (only,) = reader.memories(ws)
        assert only["session_id"] == mem["session_id"]
        assert reader.within(ws).memories(next(w for w in by_ws if w != ws)) == []
    await one.close()
    await two.close()


async def test_a_memory_is_redacted_as_messages_are(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """With store.redact, a key in the conversation is masked in its memory too."""
    db = tmp_path / "h.db"
    secret = "sk-proj-" + "A1b2C3d4" * 6
    proxy = await make_proxy(
        fake_upstream.url, store={"path": str(db), "writer": "thread", "redact": True}
    )
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-one", max_retries=0)
    await _play(client, [f"Deploy with the key {secret} to staging.", "remember this"])
    (mem,) = await until(lambda: memories_in(db))
    assert secret not in mem["text"] and secret not in json.dumps(mem["memory"])
    await client.close()
