"""``handoff demo``: offline, the large model gets the history untouched, the 8k model a
compressed one, and the store's timeline shows the handoffs; plus the simulated upstream."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import aiohttp
import pytest
from pytest_aiohttp import AiohttpServer

from proxy.cli.main import main
from proxy.cli.simulated_upstream import SimulatedUpstream
from proxy.store.read import SqliteReader


def _turn_lines(out: str) -> dict[int, str]:
    return {int(m[1]): m[0] for m in re.finditer(r"^turn (\d+) .*$", out, re.M)}


def test_demo_compresses_for_8k_and_passes_through_for_1m(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Large-model turns pass through, 8k turns are compressed, the timeline has handoffs."""
    db = tmp_path / "demo.db"
    assert main(["demo", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    turns = _turn_lines(out)
    assert sorted(turns) == [1, 2, 3, 4, 5, 6]
    for n in (1, 2, 3, 6):
        assert re.match(rf"turn {n}\s+sim-large-1m\s+passthrough ", turns[n]), turns[n]
    for n in (4, 5):
        assert re.match(rf"turn {n}\s+sim-small-8k\s+compressed ", turns[n]), turns[n]
        m = re.search(r"([\d,]+) tokens → ([\d,]+) sent \(budget ([\d,]+)\) by \S+", turns[n])
        assert m is not None, turns[n]
        counted, sent, budget = (int(g.replace(",", "")) for g in m.groups())
        assert sent <= budget < counted
    assert "⇄ sim-large-1m → sim-small-8k" in out
    assert "⇄ sim-small-8k → sim-large-1m" in out
    (session,) = SqliteReader(db).list_sessions()
    assert session["turns"] == 6 and session["handoffs"] == 2
    timeline = SqliteReader(db).session(session["id"])["timeline"]
    assert [t["action"] for t in timeline] == ["passthrough"] * 3 + ["compressed"] * 2 + [
        "passthrough"
    ]


def test_demo_without_store_uses_a_temporary_one(capsys: pytest.CaptureFixture[str]) -> None:
    """Without --store the demo still records, into a temp dir it says it removed."""
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "sessions show" in out and "temporary directory" in out
    assert out.count("compressed") >= 2


async def test_simulated_upstream_enforces_windows(aiohttp_server: AiohttpServer) -> None:
    """The 8k model refuses an over-long prompt in OpenAI's words; the 1M model answers."""
    server = await aiohttp_server(SimulatedUpstream().app())
    long = [{"role": "user", "content": "word " * 9000}]
    async with aiohttp.ClientSession() as s:
        url = str(server.make_url("/v1/chat/completions"))
        async with s.post(url, json={"model": "sim-small-8k", "messages": long}) as r:
            assert r.status == 400
            err = (await r.json())["error"]
        assert err["code"] == "context_length_exceeded"
        assert "maximum context length is 8192 tokens" in err["message"]
        async with s.post(url, json={"model": "sim-large-1m", "messages": long}) as r:
            assert r.status == 200
            reply = await r.json()
        assert "I was sent 1 messages" in reply["choices"][0]["message"]["content"]
        body = {"model": "sim-large-1m", "messages": long, "stream": True,
                "stream_options": {"include_usage": True}}  # fmt: skip
        async with s.post(url, json=body) as r:
            assert r.headers["Content-Type"].startswith("text/event-stream")
            raw = await r.read()
        assert raw.endswith(b"data: [DONE]\n\n") and b'"usage"' in raw
        async with s.get(str(server.make_url("/v1/models"))) as r:
            windows = {m["id"]: m["context_window"] for m in (await r.json())["data"]}
        assert windows == {"sim-large-1m": 1_000_000, "sim-small-8k": 8192}


def test_demo_twice_into_one_store_keeps_both_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A second run adds a 6-turn session of its own: the first is kept whole, and no
    turn of the second becomes a 1-turn fork of the first's."""
    db = tmp_path / "demo.db"
    assert main(["--store", str(db), "demo"]) == 0
    (first,) = SqliteReader(db).list_sessions()
    assert main(["demo", "--store", str(db)]) == 0
    out = capsys.readouterr().out
    sessions = SqliteReader(db).list_sessions()
    assert len(sessions) == 2 and db.exists()
    assert [(s["turns"], s["handoffs"], s["parent_session"]) for s in sessions] == [
        (6, 2, None),
        (6, 2, None),
    ]
    assert sessions[1] == first  # (latest first: the first run's session, untouched)
    assert f"sessions show {sessions[0]['id']}" in out


def test_make_demo_passes_args() -> None:
    """``make demo ARGS="--store X"`` runs the demo with those arguments."""
    root = Path(__file__).resolve().parents[2]
    made = subprocess.run(
        ["make", "-n", "demo", "ARGS=--store /tmp/x.db"],
        cwd=root, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert "handoff demo --store /tmp/x.db" in made.stdout
