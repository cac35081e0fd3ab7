"""Recall through the running proxy: a new conversation that starts over gets the memory."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import tiktoken

from proxy.decide.recall import HEADER, RECALLED_HEADER
from proxy.store.read import SqliteReader
from tests.conftest import MakeProxy, ProxyHandle
from tests.fake_upstream import FakeUpstream
from tests.server.memory_waits import memories_in, until

MARK = "[handoff: recalled memory"


async def _session(proxy: ProxyHandle, db: Path, key: str, asks: list[str]) -> None:
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key=key, max_retries=0)
    history: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for ask in asks:
        history.append({"role": "user", "content": ask})
        r = await client.chat.completions.create(model="gpt-4o", messages=history)  # type: ignore[arg-type]
        history.append({"role": "assistant", "content": r.choices[0].message.content})
    await client.close()


async def _ask(
    proxy: ProxyHandle, key: str, messages: list[dict[str, Any]], **headers: str
) -> tuple[Any, dict[str, str]]:
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key=key, max_retries=0)
    raw = await client.chat.completions.with_raw_response.create(
        model="gpt-4o",
        messages=messages,  # type: ignore[arg-type]
        extra_headers=headers,
    )
    await client.close()
    return raw.parse(), dict(raw.headers)


async def _worked(
    fake: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, **cfg: Any
) -> tuple[ProxyHandle, Path]:
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake.url, store={"path": str(db), "writer": "thread"}, **cfg)
    await _session(
        proxy,
        db,
        "sk-one",
        ["We decided to use a token bucket for src/limits.py.", "remember this"],
    )
    await until(lambda: memories_in(db))
    return proxy, db


def _sent(fake: FakeUpstream) -> list[dict[str, Any]]:
    return fake.chat_requests[-1].json()["messages"]


async def test_new_in_the_same_workspace_gets_the_memory_and_keeps_it_byte_stable(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """`/new` gets one marked message after the system prompt, named in the header and
    recorded as a step; the next turn sends it again, byte for byte."""
    proxy, db = await _worked(fake_upstream, make_proxy, tmp_path)
    (mem,) = memories_in(db)
    opening = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "/new"},
    ]
    reply, headers = await _ask(proxy, "sk-one", opening)
    assert headers[RECALLED_HEADER] == mem["session_id"]
    assert headers["x-handoff-policy"] == "recall"
    sent = _sent(fake_upstream)
    assert [m["role"] for m in sent] == ["system", "system", "user"]
    assert sent[1]["content"].startswith(MARK) and "token bucket" in sent[1]["content"]
    first_body = fake_upstream.chat_requests[-1].body
    recalled = json.dumps(sent[1], separators=(",", ":"), ensure_ascii=False).encode()
    assert recalled in first_body
    nxt = [*opening, {"role": "assistant", "content": reply.choices[0].message.content},
           {"role": "user", "content": "go on"}]  # fmt: skip
    _, headers2 = await _ask(proxy, "sk-one", nxt)
    second_body = fake_upstream.chat_requests[-1].body
    assert recalled in second_body
    cut = first_body.index(recalled) + len(recalled)
    assert second_body[:cut] == first_body[:cut]
    assert headers2[RECALLED_HEADER] == mem["session_id"]

    async def recorded() -> list[Any]:
        sessions = SqliteReader(db).list_sessions()
        newest = max(sessions, key=lambda s: s["started_at"])
        return [t["decision"] for t in SqliteReader(db).session(newest["id"])["timeline"]]

    timeline: list[Any] = []
    for _ in range(100):
        timeline = await recorded()
        if len(timeline) == 2:
            break
        await asyncio.sleep(0.05)
    assert all("recall" in d["policies"] for d in timeline)
    assert any(s.get("sessions") == [mem["session_id"]] for s in timeline[0]["steps"])


async def test_another_workspace_and_mid_conversation_get_nothing(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """Another key's `/new` recalls nothing, even right after the same opening recalled for
    the first key; nor does `/new` in the middle of a conversation."""
    proxy, _ = await _worked(fake_upstream, make_proxy, tmp_path)
    _, headers = await _ask(proxy, "sk-one", [{"role": "user", "content": "/new"}])
    assert RECALLED_HEADER in headers
    _, headers = await _ask(proxy, "sk-two", [{"role": "user", "content": "/new"}])
    assert RECALLED_HEADER not in headers
    assert not any(MARK in json.dumps(m) for m in _sent(fake_upstream))
    mid = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
           {"role": "user", "content": "/new"}]  # fmt: skip
    _, headers = await _ask(proxy, "sk-one", mid)
    assert RECALLED_HEADER not in headers
    assert _sent(fake_upstream) == mid
    _, headers = await _ask(proxy, "sk-one", [{"role": "user", "content": "what is 2+2"}])
    assert RECALLED_HEADER not in headers


async def test_the_header_recalls_and_the_cap_holds(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """`x-handoff-recall: last` recalls without a phrase; the message stays within
    `recall.max_tokens` (cut short when one memory is larger)."""
    proxy, _ = await _worked(fake_upstream, make_proxy, tmp_path, recall={"max_tokens": 60})
    _, headers = await _ask(
        proxy, "sk-one", [{"role": "user", "content": "hello"}], **{HEADER: "last"}
    )
    assert RECALLED_HEADER in headers
    inserted = _sent(fake_upstream)[0]["content"]
    assert inserted.startswith(MARK) and inserted.endswith("[…]")
    assert len(tiktoken.get_encoding("o200k_base").encode(inserted)) <= 60


async def test_recall_off(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """`[recall] enabled = false`: `/new` goes upstream as it came."""
    proxy, _ = await _worked(fake_upstream, make_proxy, tmp_path, recall={"enabled": False})
    _, headers = await _ask(proxy, "sk-one", [{"role": "user", "content": "/new"}])
    assert RECALLED_HEADER not in headers
    assert _sent(fake_upstream) == [{"role": "user", "content": "/new"}]


async def test_the_cap_is_a_share_of_the_model_budget(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """On a small model the recalled message stays within `recall.max_share` of its budget,
    below `recall.max_tokens`."""
    fake_upstream.models["tiny-2k"] = 2048
    tiny = {"tiny-2k": {"context_window": 2048, "max_output_tokens": 256}}
    proxy, _ = await _worked(
        fake_upstream, make_proxy, tmp_path, models=tiny, recall={"max_share": 0.05}
    )
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="sk-one", max_retries=0)
    raw = await client.chat.completions.with_raw_response.create(
        model="tiny-2k", messages=[{"role": "user", "content": "/new"}]
    )
    await client.close()
    budget = int(raw.headers["x-handoff-budget"])
    inserted = _sent(fake_upstream)[0]["content"]
    assert inserted.startswith(MARK)
    assert len(tiktoken.get_encoding("o200k_base").encode(inserted)) <= budget * 0.05 < 1500


async def test_the_header_names_a_session_of_its_own_workspace_only(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """`x-handoff-recall: <session id>` recalls that session for its own workspace; from
    another workspace the id names nothing."""
    proxy, db = await _worked(fake_upstream, make_proxy, tmp_path)
    (mem,) = memories_in(db)
    sid = mem["session_id"]
    _, headers = await _ask(proxy, "sk-one", [{"role": "user", "content": "hi"}], **{HEADER: sid})
    assert headers[RECALLED_HEADER] == sid
    _, headers = await _ask(proxy, "sk-two", [{"role": "user", "content": "hey"}], **{HEADER: sid})
    assert RECALLED_HEADER not in headers
    assert _sent(fake_upstream) == [{"role": "user", "content": "hey"}]


async def test_after_a_restart_the_next_turn_gets_the_same_bytes(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A proxy that did not see the conversation begin replays the recalled message its
    store recorded for the first turn, byte for byte."""
    proxy, db = await _worked(fake_upstream, make_proxy, tmp_path)
    opening = [{"role": "system", "content": "Sys."}, {"role": "user", "content": "/new"}]
    reply, _ = await _ask(proxy, "sk-one", opening)
    first = fake_upstream.chat_requests[-1]
    recalled = json.dumps(first.json()["messages"][1], separators=(",", ":"), ensure_ascii=False)

    def first_turn_recorded() -> bool:
        rows = SqliteReader(db).list_sessions()
        return any(r["turns"] == 1 and r["id"] != memories_in(db)[0]["session_id"] for r in rows)

    await until(first_turn_recorded)
    await proxy.server.close()
    again = await make_proxy(fake_upstream.url, store={"path": str(db), "writer": "thread"})
    nxt = [*opening, {"role": "assistant", "content": reply.choices[0].message.content},
           {"role": "user", "content": "go on"}]  # fmt: skip
    _, headers = await _ask(again, "sk-one", nxt)
    assert RECALLED_HEADER in headers
    second = fake_upstream.chat_requests[-1].body
    assert recalled.encode() in second
    cut = first.body.index(recalled.encode()) + len(recalled)
    assert second[:cut] == first.body[:cut]
