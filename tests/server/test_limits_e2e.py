"""Limits that stick, through the real proxy and the fake upstream: a refusal that is not
an overflow, limits learned from errors that survive a restart, llama.cpp's empty stream,
a kept-alive connection the server closed, and output reservations that fit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream
from tests.server.test_faults import one_turn, post_chat

MODELS = {"small-8k": {"context_window": 8192, "max_output_tokens": 1024}}


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


async def test_unfittable_is_its_own_error_and_recorded(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A system prompt over the budget: 400 handoff_unfittable (not context_length_exceeded,
    so clients do not compact and retry), no upstream call, and the refusal is recorded."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(
        fake_upstream.url, models=MODELS, store={"path": str(db), "writer": "thread"}
    )
    body = {
        "model": "small-8k",
        "messages": [{"role": "system", "content": words(20_000)}, {"role": "user", "content": "hi"}],
    }
    status, _, raw = await post_chat(proxy, body)
    err = json.loads(raw)["error"]
    assert status == 400 and err["code"] == "handoff_unfittable"
    assert "compacting it will not help" in err["message"]
    assert fake_upstream.chat_requests == []
    turn = await one_turn(db)
    assert turn["status"] == 400
    assert turn["error"]["error"]["code"] == "handoff_unfittable"
