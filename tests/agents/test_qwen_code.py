"""Qwen Code (``qwen``, headless) reads large files through handoff with a small window."""

from __future__ import annotations

import json
from pathlib import Path

from tests.agents.harness import (
    API_KEY,
    RunAgent,
    newest_tool_result_whole,
    write_large_files,
)
from tests.agents.scripted import ToolTask

FINAL = "All six modules define numbered multipliers. QWEN-TASK-DONE"


def _setup(home: Path, proxy_url: str) -> dict[str, str]:
    """Qwen Code's OpenAI-compatible set-up, as a user writes it: environment variables
    (OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL) and auth type openai in settings.json."""
    settings = {
        "security": {"auth": {"selectedType": "openai"}},
        "telemetry": {"enabled": False},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    }
    (home / ".qwen").mkdir()
    (home / ".qwen" / "settings.json").write_text(json.dumps(settings))
    return {
        "OPENAI_BASE_URL": proxy_url,
        "OPENAI_API_KEY": API_KEY,
        "OPENAI_MODEL": "scripted-agent",
        # Qwen Code asks 32,000 output tokens of a model it does not know, more than a
        # small window holds (handoff refuses that with a 400 naming it): a user sets this.
        "QWEN_CODE_MAX_OUTPUT_TOKENS": "1024",
        "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
    }


async def test_qwen_reads_large_files_through_a_small_window(
    run_agent: RunAgent, tmp_path: Path
) -> None:
    files = write_large_files(tmp_path / "work" / "src", 6, 120)
    task = ToolTask(
        tool="read_file",
        arguments=lambda p: {"file_path": p},
        files=files,
        final=FINAL,
        window=24_576,
    )
    run = await run_agent(
        "qwen",
        ["--approval-mode", "yolo", "Read every file in src/ and tell me what they define."],
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
