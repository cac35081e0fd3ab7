"""handoff's own refusals on the chat route are recorded (status, error, messages when they
parsed), listed by ``sessions list --errors``, and a flood of them is capped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.cli.main import main as cli_main
from proxy.server.rejections import RejectionBudget
from proxy.store.read import SqliteReader
from tests.conftest import MakeProxy
from tests.server.test_records_retry import sessions, until

MODELS = {"small-8k": {"context_window": 8192, "max_output_tokens": 1024}}


async def test_refusals_are_recorded_and_filtered(
    fake_upstream_factory: Any,
    make_proxy: MakeProxy,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Bad JSON and an unfittable request: both recorded with their error; the second with
    its messages; one good turn is not listed by --errors."""
    fake = await fake_upstream_factory(models={"small-8k": 8192})
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake.url, store={"path": str(db)}, models=MODELS)
    huge = " ".join(f"word{i}" for i in range(20_000))
    unfittable = {
        "model": "small-8k",
        "messages": [{"role": "system", "content": huge}, {"role": "user", "content": "hi"}],
    }
    fine = {"model": "small-8k", "messages": [{"role": "user", "content": "hello"}]}
    headers = {"Authorization": "Bearer sk-secret-key-123", "Content-Type": "application/json"}
    async with aiohttp.ClientSession(headers=headers) as s:
        for data in (b'{"model": "small-8k", "messages": [', json.dumps(unfittable).encode()):
            async with s.post(proxy.url + "/chat/completions", data=data) as r:
                assert r.status == 400
        async with s.post(proxy.url + "/chat/completions", json=fine) as r:
            assert r.status == 200
    await until(lambda: len(sessions(db)) == 3)
    reader = SqliteReader(db)
    refused = reader.list_sessions(errors=True)
    assert len(refused) == 2
    turns = {t["status"]: t for t in (reader.turn(s["id"], 1) for s in refused)}
    bad_json = [t for t in (reader.turn(s["id"], 1) for s in refused) if not t["history"]]
    assert len(bad_json) == 1 and bad_json[0]["error"]["request_bytes"] == 35
    full = [t for t in (reader.turn(s["id"], 1) for s in refused) if t["history"]]
    assert full[0]["history"] == unfittable["messages"]
    assert full[0]["error"]["error"]["code"] == "handoff_unfittable"  # main's limits: its own code
    assert set(turns) == {400}
    assert all(t["decision"]["action"] == "rejected" for t in bad_json + full)
    for f in tmp_path.glob("h.db*"):  # the WAL too
        assert b"sk-secret-key-123" not in f.read_bytes()
    assert cli_main(["sessions", "list", "--errors", "--json", "--store", str(db)]) == 0
    assert len(json.loads(capsys.readouterr().out)) == 2


def test_a_flood_is_capped_per_workspace() -> None:
    """30 a minute per workspace are recorded; the next recorded says how many were left out."""
    budget = RejectionBudget(per_minute=30)
    admitted = [budget.admit("w", now=0.0) for _ in range(100)]
    assert sum(a is not None for a in admitted) == 30
    assert budget.admit("other", now=0.0) == 0  # another workspace has its own budget
    assert budget.admit("w", now=2.0) == 70  # one token back after 2 s: 70 were left out
    assert budget.admit("w", now=2.0) is None
