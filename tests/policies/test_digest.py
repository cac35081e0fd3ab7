"""The digest: what it keeps of dropped messages, its size, and that it only grows."""

from __future__ import annotations

import json
from typing import Any

from policies import digest


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {
        "id": name,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


SESSION: list[dict[str, Any]] = [
    {
        "role": "user",
        "content": "<system-reminder>skills: a, b</system-reminder>Use port 8443 for the admin API.",
    },
    {
        "role": "assistant",
        "content": "Reading it.",
        "tool_calls": [_call("read_file", path="src/server.py")],
    },
    {"role": "tool", "tool_call_id": "read_file", "content": "import os\n" * 50},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("run_shell_command", command="pytest -q tests/")],
    },
    {
        "role": "tool",
        "tool_call_id": "run_shell_command",
        "content": "..F\nFAILED tests/test_api.py::test_port - AssertionError: 8080 != 8443\n",
    },
    {
        "role": "assistant",
        "content": "The root cause is the hard-coded default. I decided to read the port from settings instead.",
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [_call("edit", file_path="src/settings.py", old="a", new="b")],
    },
]


def test_digest_keeps_requests_files_commands_errors_and_decisions() -> None:
    """Each kind a compaction summary keeps is there, and the client's reminder is not."""
    text, keys = digest.block(SESSION, (), 4000)
    assert "• asked: Use port 8443 for the admin API." in text
    assert "system-reminder" not in text
    assert "• read: src/server.py" in text and "• changed: src/settings.py (edited)" in text
    assert "• ran: pytest -q tests/" in text
    assert "AssertionError: 8080 != 8443" in text
    assert "The root cause is the hard-coded default." in text
    assert "I decided to read the port from settings instead." in text
    assert len(keys) == len(set(keys)) >= 6


def test_digest_repeats_nothing_already_listed() -> None:
    """Items an earlier block listed are left out of the next one."""
    _, keys = digest.block(SESSION[:3], (), 4000)
    text, _ = digest.block(SESSION, keys, 4000)
    assert "Use port 8443" not in text and "src/server.py" not in text
    assert "pytest -q" in text


def test_digest_gives_up_remarks_before_requests() -> None:
    """Over its size, the digest drops what the assistant said before what the user asked."""
    text, _ = digest.block(SESSION, (), 150)
    assert len(text) <= 150
    assert "Use port 8443" in text and "root cause" not in text
