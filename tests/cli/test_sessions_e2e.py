"""Through the real proxy and the strict fake upstream: ``export --sent`` is what the
upstream received, and ``resume`` fits a history as the proxy itself would."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import openai
import pytest

from proxy.decide.tokens import TokenCounter
from proxy.store.read import SqliteReader
from tests.cli.test_sessions import cli
from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream
from tests.server.test_compress_e2e import MODELS_CONFIG, WINDOWS, _tool_turn


@pytest.fixture
async def upstream(fake_upstream_factory: Any) -> FakeUpstream:
    counter = TokenCounter(cache_size=100_000).for_model("gpt-4o")
    return await fake_upstream_factory(models=WINDOWS, count_tokens=counter.count_request)  # type: ignore[no-any-return]


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The proxy's models, as a config file for the CLI."""
    path = tmp_path / "config.toml"
    lines = []
    for name, m in MODELS_CONFIG.items():
        lines.append(f'[models."{name}"]')
        lines += [f"{k} = {json.dumps(v)}" for k, v in m.items()]
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setenv("HANDOFF_CONFIG", str(path))
    return path


def _history() -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."}]
    for i in range(12):
        out += _tool_turn(i, 60)
    return [*out, {"role": "user", "content": "Now summarise every module."}]


async def _send(proxy_url: str, model: str, history: list[dict[str, Any]]) -> None:
    client = openai.AsyncOpenAI(base_url=proxy_url, api_key="sk-e2e", max_retries=0)
    await client.chat.completions.create(model=model, messages=history)  # type: ignore[arg-type]
    await client.close()


async def _recorded(db: Path, turns: int) -> str:
    async with asyncio.timeout(10):
        while True:
            try:
                rows = SqliteReader(db).list_sessions()
            except Exception:
                rows = []
            if rows and rows[0]["turns"] >= turns:
                return str(rows[0]["id"])
            await asyncio.sleep(0.05)


async def test_export_sent_is_what_the_upstream_received(
    upstream: FakeUpstream,
    make_proxy: MakeProxy,
    tmp_path: Path,
    config: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A compressed turn: ``--sent`` gives the very messages the upstream got."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(
        upstream.url, store={"path": str(db), "writer": "thread"}, models=MODELS_CONFIG
    )
    await _send(proxy.url, "small-8k", _history())
    sid = await _recorded(db, 1)
    received = upstream.chat_requests[-1].json()["messages"]
    capsys.readouterr()
    argv = ("sessions", "export", sid, "--turn", "1", "--sent", "--format", "openai")
    assert cli(*argv, "--store", str(db)) == 0
    sent = json.loads(capsys.readouterr().out)
    assert sent["messages"] == received and len(received) < len(_history())


async def test_resume_fits_as_the_proxy_would(
    upstream: FakeUpstream,
    make_proxy: MakeProxy,
    tmp_path: Path,
    config: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A conversation recorded on a 1M window, resumed on 8k, is what the proxy sends
    when the same history goes to the 8k model."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(
        upstream.url, store={"path": str(db), "writer": "thread"}, models=MODELS_CONFIG
    )
    history = _history()
    await _send(proxy.url, "big-1m", history)
    sid = await _recorded(db, 1)
    full = SqliteReader(db).turn(sid, 1)
    other = await make_proxy(upstream.url, models=MODELS_CONFIG)  # no store, fresh engine
    await _send(other.url, "small-8k", [*full["history"], full["reply"]])
    received = upstream.chat_requests[-1].json()["messages"]
    capsys.readouterr()
    argv = ("sessions", "resume", sid, "--model", "small-8k", "--store", str(db))
    assert await asyncio.to_thread(cli, *argv) == 0  # it runs its own event loop
    out = capsys.readouterr()
    assert json.loads(out.out)["messages"] == received
    assert "compressed for small-8k" in out.err
