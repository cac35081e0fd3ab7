"""Codex (``codex exec``) reads large files through handoff's ``/v1/responses``, once with a
roomy window and once with one smaller than its history."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.agents.harness import API_KEY, AgentRun, RunAgent, write_large_files
from tests.agents.responses_script import ResponsesScript
from tests.agents.scripted import ToolTask

FINAL = "The four modules define numbered multipliers. CODEX-TASK-DONE"
KEY_ENV = "HANDOFF_CODEX_KEY"


def codex_config(proxy_url: str) -> str:
    """~/.codex/config.toml as a user writes it for handoff."""
    return f"""\
model = "scripted-agent"
model_provider = "handoff"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.handoff]
name = "handoff"
base_url = "{proxy_url}"
wire_api = "responses"
env_key = "{KEY_ENV}"
supports_websockets = false
request_max_retries = 0
stream_max_retries = 0
"""


def _setup(home: Path, proxy_url: str) -> dict[str, str]:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    (codex_home / "config.toml").write_text(codex_config(proxy_url))
    return {"CODEX_HOME": str(codex_home), KEY_ENV: API_KEY}


def _inputs(run: AgentRun) -> list[dict[str, Any]]:
    """The main requests the upstream accepted (those offering tools)."""
    return [
        b for b in run.upstream.bodies("/v1/responses") if isinstance(b, dict) and b.get("tools")
    ]


def _recorded(run: AgentRun, n: int) -> list[dict[str, Any]]:
    end = time.monotonic() + 10
    while True:
        sessions = [s["id"] for s in run.reader.list_sessions(limit=1000)]
        turns = [t for s in sessions for t in run.reader.session(s)["timeline"]]
        if len(turns) >= n or time.monotonic() > end:
            return turns
        time.sleep(0.05)


@pytest.mark.parametrize("window", [200_000, 20_000])
async def test_codex_reads_large_files(run_agent: RunAgent, tmp_path: Path, window: int) -> None:
    """The task completes with no 4xx from handoff; in the small window turns are
    compressed, the newest tool output arrives whole, and every turn is recorded as a
    Responses turn."""
    files = write_large_files(tmp_path / "work" / "src", 4, 120)
    task = ToolTask(tool="shell", arguments=lambda p: {}, files=files, final=FINAL, window=window)
    script = ResponsesScript(task)
    run = await run_agent(
        "codex",
        [
            "exec",
            "--skip-git-repo-check",
            "--dangerously-bypass-approvals-and-sandbox",
            "Read every file in src/ and tell me what they define.",
        ],
        task,
        setup=_setup,
        timeout_s=120,
        scripts={"/v1/responses": script},
    )
    why = run.explain() + f"\n--- tools {script.tools_seen[:1]}"
    assert run.returncode == 0, why
    assert FINAL in run.stdout, why
    assert not run.client_errors(), why
    answered = [s for s in run.upstream.seen if s.path == "/v1/responses"]
    assert answered and all(s.status == 200 for s in answered), why
    bodies = _inputs(run)
    assert len(bodies) >= len(files) + 1, why
    posts = sum(1 for m, p, s in run.statuses if p == "/v1/responses" and m == "POST")
    turns = _recorded(run, posts)
    assert len(turns) == posts, (turns, why)
    texts = [Path(p).read_text() for p in files]
    for body in bodies:
        last = body["input"][-1]
        if last.get("type") == "function_call_output":
            output = last["output"] if isinstance(last["output"], str) else str(last["output"])
            assert any(all(ln in output for ln in t.splitlines()) for t in texts), output[:300]
    actions = [t["action"] for t in turns]
    if window < 100_000:
        assert "compressed" in actions, (actions, why)
        assert all((t["forwarded_tokens"] or 0) <= t["budget"] for t in turns), turns
    else:
        assert set(actions) == {"passthrough"}, actions
    (session,) = run.reader.list_sessions()  # threaded by Codex's own session-id header
    assert session["name"] and session["name"] in run.stdout + run.stderr, (session, why)
    assert run.reader.turn(session["id"], 1)["wire"] == "responses"
