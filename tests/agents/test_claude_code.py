"""Claude Code (``claude -p``) reads large files through handoff's Messages route, once
with a roomy window and once with one smaller than its history."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.agents.harness import API_KEY, AgentRun, RunAgent, write_large_files
from tests.agents.messages_script import CountScript, MessagesScript
from tests.agents.scripted import ToolTask

FINAL = "All six modules define numbered multipliers. CLAUDE-TASK-DONE"
MODEL = "claude-sonnet-4-5-20250929"
PROMPT = "Read every file in src/ with the Read tool and tell me what they define."


def _setup(home: Path, proxy_url: str) -> dict[str, str]:
    """Claude Code's set-up, as a user writes it: ANTHROPIC_BASE_URL (handoff's address,
    without /v1) and ANTHROPIC_API_KEY; the rest keeps it offline and quiet."""
    (home / ".claude.json").write_text(json.dumps({"hasCompletedOnboarding": True}))
    return {
        "ANTHROPIC_BASE_URL": proxy_url.removesuffix("/v1"),
        "ANTHROPIC_API_KEY": API_KEY,
        "ANTHROPIC_MODEL": MODEL,
        "ANTHROPIC_SMALL_FAST_MODEL": MODEL,
        "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "4096",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
    }


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def newest_result_whole(body: Mapping[str, Any], files: Mapping[str, str]) -> str | None:
    """None if the newest message's tool result (if any) holds its file whole."""
    last = body["messages"][-1]
    results = [
        b
        for b in last.get("content") or ()
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]
    if last.get("role") != "user" or not results:
        return None
    text = "".join(_text(b.get("content")) for b in results)
    for path, body_text in files.items():
        lines = body_text.splitlines()
        if lines[0] in text:
            missing = [line for line in lines if line not in text]
            return None if not missing else f"{path}: {len(missing)} lines missing"
    return f"the tool result holds none of the files: {text[:200]!r}"


async def _run(run_agent: RunAgent, tmp_path: Path, window: int) -> tuple[AgentRun, list[str]]:
    files = write_large_files(tmp_path / "work" / "src", 6, 300)
    task = ToolTask(
        tool="Read",
        arguments=lambda p: {"file_path": p},
        files=files,
        final=FINAL,
        window=window,
        model=MODEL,
    )
    run = await run_agent(
        "claude",
        ["-p", "--allowedTools", "Bash,Read,Glob,Grep,LS", "--", PROMPT],
        task,
        setup=_setup,
        timeout_s=180,
        scripts={"/v1/messages": MessagesScript(task), "/v1/messages/count_tokens": CountScript()},
        max_output_tokens=4096,
        upstream_kind="anthropic",
    )
    return run, files


def _check(run: AgentRun, files: list[str]) -> list[Any]:
    why = run.explain()
    assert run.returncode == 0, why
    assert FINAL in run.stdout, why
    assert not run.client_errors(), why
    assert all(s.status == 200 for s in run.upstream.seen if s.path.startswith("/v1/messages")), why
    bodies = [
        b for b in run.upstream.bodies("/v1/messages") if isinstance(b, dict) and b.get("tools")
    ]
    assert len(bodies) >= len(files) + 1, why
    texts = {p: Path(p).read_text() for p in files}
    for body in bodies:
        assert newest_result_whole(body, texts) is None, newest_result_whole(body, texts)
    for sid in run.sessions:  # recorded as Messages turns, with what was sent
        _, turns = run.reader.turns(sid)
        assert all(t["wire"] == "anthropic" and "system" in t["request_params"] for t in turns)
        for t in turns:
            assert (t["forwarded"] is not None) == (t["action"] == "compressed"), t
    return bodies


@pytest.mark.parametrize("window", [1_000_000, 60_000], ids=["roomy", "small"])
async def test_claude_code_reads_large_files(
    run_agent: RunAgent, tmp_path: Path, window: int
) -> None:
    """The task completes with no 4xx from handoff and the newest tool result whole;
    with the small window its history is compressed (and recorded so), not refused."""
    run, files = await _run(run_agent, tmp_path, window)
    _check(run, files)
    if window < 100_000:
        assert run.compressed(), f"no compressed turn: {[t['action'] for t in run.turns]}"
        assert all((t["forwarded_tokens"] or 0) <= t["budget"] for t in run.turns), run.turns
    else:
        assert not run.compressed(), [t["action"] for t in run.turns]
