"""A retried turn is recorded once, as it was finally sent: the record, the request log,
the metrics and calibration all describe the retry, never the refused first plan."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.cli.main import main as cli_main
from proxy.decide.tokens import TokenCounter
from proxy.server.app import ENGINE
from proxy.store.read import SqliteReader
from tests.conftest import MakeProxy
from tests.server.request_lines import wait_lines


async def until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait for the store's writer (it records after the response)."""
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.02)


def sessions(db: Path) -> list[dict[str, Any]]:
    try:
        return SqliteReader(db).list_sessions()
    except Exception:  # the writer has not created the file yet
        return []


def _long_history(turns: int) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i in range(turns):
        history.append({"role": "user", "content": f"Question {i}: " + "lorem ipsum " * 300})
        history.append({"role": "assistant", "content": f"Answer {i}: " + "dolor sit " * 300})
    history.append({"role": "user", "content": "And now?"})
    return history


async def test_retried_turn_is_recorded_as_sent(
    fake_upstream_factory: Any,
    make_proxy: MakeProxy,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The configured window (32k) is wrong, the upstream's (8k) refuses: one record, compressed
    against 8192, with the cut shown by ``sessions diff``; log, metrics and calibration agree."""
    llama = TokenCounter(cache_size=0).for_model("llama3.1:8b")
    fake = await fake_upstream_factory(
        models={"llama3.1:8b": 8192}, count_tokens=llama.count_request
    )
    db = tmp_path / "h.db"
    proxy = await make_proxy(
        fake.url,
        store={"path": str(db)},
        models={"llama3.1:8b": {"context_window": 32768, "max_output_tokens": 512}},
    )
    history = _long_history(8)  # ~12k tokens: fits the configured 32k, not the real 8k
    async with aiohttp.ClientSession() as s:
        body = {"model": "llama3.1:8b", "messages": history}
        async with s.post(proxy.url + "/chat/completions", json=body) as r:
            assert r.status == 200, await r.text()
            assert r.headers["x-handoff-decision"] == "compressed"
        async with s.get(proxy.root + "/metrics") as m:
            metrics = await m.text()
    assert len(fake.chat_requests) == 2  # refused, then the re-fit
    sent = fake.chat_requests[-1].json()["messages"]
    (line,), _ = await wait_lines(capfd, 1)
    assert line["decision"] == "compressed"
    assert 'decision="compressed"' in metrics and 'decision="passthrough"' not in metrics
    # Calibration paired the retry's own count with the retry's usage: the upstream counts as
    # we do, so the factor is 1 (the refused plan's count would have made it about 0.5).
    factor = proxy.server.app[ENGINE].calibration.factor("llama3.1:8b")
    assert factor == pytest.approx(1.0, abs=0.02)

    await until(lambda: sum(s["turns"] for s in sessions(db)) >= 1)
    (session,) = sessions(db)
    assert session["turns"] == 1  # recorded once
    turn = SqliteReader(db).turn(session["id"], 1)
    assert turn["decision"]["action"] == "compressed"
    assert turn["decision"]["window"] == 8192
    assert turn["forwarded"] == sent
    assert cli_main(["sessions", "diff", session["id"], "--turn", "1", "--store", str(db)]) == 0
    out = capfd.readouterr().out
    assert "sent unchanged" not in out
    assert "\n- [1] user: Question 0" in out  # the cut, line by line
    assert turn["history"] == history and len(sent) < len(history)
