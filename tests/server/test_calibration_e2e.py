"""Calibration end to end: the upstream's usage corrects approximate counts, persists in the
store, and `handoff models NAME` shows it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import openai
import pytest

from proxy.cli.main import main
from proxy.decide.tokens import TokenCounter
from tests.conftest import MakeProxy


async def test_usage_calibrates_persists_and_shows(
    fake_upstream_factory: Any,
    make_proxy: MakeProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A llama model (approximate counts) whose server reports ~1.3x our count: factor ~1.3."""

    ours = TokenCounter(cache_size=0).for_model("llama3.1:8b")

    def true_count(body: dict[str, Any]) -> int:
        return round(ours.count_request(body) * 1.3)  # the server's own tokenizer: 1.3x ours

    fake = await fake_upstream_factory(models={"llama3.1:8b": 131072}, count_tokens=true_count)
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake.url, store={"path": str(db)})
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="k", max_retries=0)
    for i in range(6):
        content = " ".join(f"token{i}x{j}" for j in range(400))
        raw = await client.chat.completions.with_raw_response.create(
            model="llama3.1:8b",
            messages=[{"role": "user", "content": content}],  # type: ignore[arg-type]
        )
        assert raw.headers["x-handoff-tokens-exact"] == "false"
    await client.close()
    engine_factor = None
    from proxy.server.app import ENGINE

    engine_factor = proxy.server.app[ENGINE].calibration.factor("llama3.1:8b")
    assert engine_factor == pytest.approx(1.3, abs=0.01)
    await proxy.server.close()  # shutdown saves the calibration into the store
    monkeypatch.setenv("HANDOFF_STORE__PATH", str(db))
    assert main(["models", "llama3.1:8b", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["calibration"]["samples"] == 6
    assert report["calibration"]["factor"] == pytest.approx(engine_factor, rel=1e-6)
