"""opencode (``opencode run``) reads large files through handoff with a small window."""

from __future__ import annotations

import json
from pathlib import Path

from tests.agents.harness import API_KEY, RunAgent, newest_tool_result_whole, write_large_files
from tests.agents.scripted import ToolTask

FINAL = "The six modules define numbered multipliers. OPENCODE-TASK-DONE"
OFFLINE = {
    # Keep opencode off the network: no models.dev catalogue, no update check, no
    # default plugins or LSP servers downloaded, no sharing, no skills from elsewhere.
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
    # handoff fits the history, not opencode: its own compaction and pruning stay off.
    "OPENCODE_DISABLE_AUTOCOMPACT": "1",
    "OPENCODE_DISABLE_PRUNE": "1",
}


def _setup(home: Path, proxy_url: str) -> dict[str, str]:
    """opencode's custom provider, as a user writes it in ~/.config/opencode/opencode.json:
    ``@ai-sdk/openai-compatible`` with handoff as its baseURL."""
    config = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": "handoff/scripted-agent",
        "small_model": "handoff/scripted-agent",
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
        "provider": {
            "handoff": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "handoff",
                "options": {"baseURL": proxy_url, "apiKey": API_KEY},
                "models": {
                    "scripted-agent": {
                        "name": "scripted-agent",
                        "limit": {"context": 1_000_000, "output": 1024},
                    }
                },
            }
        },
    }
    path = home / ".config" / "opencode" / "opencode.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(config))
    return OFFLINE


async def test_opencode_reads_large_files_through_a_small_window(
    run_agent: RunAgent, tmp_path: Path
) -> None:
    files = write_large_files(tmp_path / "work" / "src", 6, 120)
    task = ToolTask(
        tool="read",
        arguments=lambda p: {"filePath": p},
        files=files,
        final=FINAL,
        window=12_288,
    )
    run = await run_agent(
        "opencode",
        ["run", "Read every file in src/ and tell me what they define."],
        task,
        setup=_setup,
        timeout_s=90,
    )
    why = run.explain()
    assert run.returncode == 0, why
    assert FINAL in run.stdout, why
    assert not run.client_errors(), why
    assert all(s.status == 200 for s in run.upstream.seen if s.path.endswith("/completions")), why
    assert run.compressed(), f"no compressed turn: {[t['action'] for t in run.turns]}\n{why}"
    assert all((t["forwarded_tokens"] or 0) <= t["budget"] for t in run.turns), run.turns
    texts = {p: Path(p).read_text() for p in files}
    bodies = run.forwarded()
    assert len(bodies) >= len(files) + 1, why
    for body in bodies:
        assert newest_tool_result_whole(body, texts) is None, newest_tool_result_whole(body, texts)
