"""The deterministic session memory: the facts it must hold, and that it is a pure function."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings

from policies.digest import items
from policies.memory import SECTIONS, build_memory, starts_with_phrase
from tests.strategies import conversations


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {
        "id": name,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


SESSION: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Add rate limiting to the admin API in src/admin.py."},
    {
        "role": "assistant",
        "content": "Reading it.",
        "tool_calls": [_call("read_file", path="src/admin.py")],
    },
    {"role": "tool", "tool_call_id": "read_file", "content": "def admin(): ..."},
    {
        "role": "assistant",
        "content": "I decided to use a token bucket because it allows bursts.",
        "tool_calls": [
            _call("edit_file", path="src/admin.py"),
            _call("write_file", path="src/limits.py"),
        ],
    },
    {"role": "tool", "tool_call_id": "edit_file", "content": "ok"},
    {"role": "tool", "tool_call_id": "write_file", "content": "ok"},
    {"role": "assistant", "content": None, "tool_calls": [_call("bash", command="pytest -q")]},
    {"role": "tool", "tool_call_id": "bash", "content": "FAILED test_limits.py - AssertionError"},
    {"role": "user", "content": "remember this"},
    {"role": "assistant", "content": "Tests pass now. Next: document the limit in README.md."},
]


def test_the_memory_holds_goal_files_decisions_state_and_next_steps() -> None:
    """Each section holds what the session says, in its own words."""
    mem = build_memory(SESSION, skip=["remember this"])
    assert mem.goal == "Add rate limiting to the admin API in src/admin.py."
    assert mem.files == ("src/admin.py", "src/limits.py")
    assert any("token bucket" in d for d in mem.decisions)
    assert mem.state == "Tests pass now. Next: document the limit in README.md."
    assert any("document the limit" in s for s in mem.next_steps)
    assert "admin" in mem.tags and "py" in mem.tags
    text = mem.render()
    for title in SECTIONS:
        assert f"## {title}" in text


def test_a_command_to_handoff_is_not_the_goal() -> None:
    """A start-over or remember phrase is skipped when the session has a real request."""
    mem = build_memory([{"role": "user", "content": "/new"}, *SESSION[1:]], skip=["/new"])
    assert mem.goal.startswith("Add rate limiting")


def test_an_unanswered_request_is_a_next_step() -> None:
    """A session that ends on the user's request keeps it as the next step."""
    mem = build_memory([*SESSION, {"role": "user", "content": "Now add metrics for it."}])
    assert mem.next_steps[-1].endswith("Now add metrics for it.")


@settings(max_examples=60, deadline=None)
@given(conversations())
def test_memory_is_pure_and_invents_nothing(messages: list[dict[str, Any]]) -> None:
    """Same input, same memory; the input is untouched; every file is one a tool changed
    and every changed file is listed (within the cap); the goal is a user request."""
    before = copy.deepcopy(messages)
    mem = build_memory(messages)
    assert messages == before
    assert build_memory(messages) == mem
    found = items(messages)
    changed = list(dict.fromkeys(i.text.rsplit(" (", 1)[0] for i in found if i.kind == "changed"))
    assert list(mem.files) == changed[-40:]
    asked = [i.text for i in found if i.kind == "asked"]
    assert mem.goal == (asked[0] if asked else "")
    assert len(mem.render()) < 20_000


def test_phrases_match_at_the_start_and_at_a_word_end() -> None:
    """A phrase matches its message's start (case and spacing aside), not inside a word;
    CJK phrases run straight on; what follows is returned as the query."""
    phrases = ["/new", "save", "start again", "新会话"]
    assert starts_with_phrase("/new", phrases) == ""
    assert starts_with_phrase("  Start   AGAIN: the parser", phrases) == "the parser"
    assert starts_with_phrase("新会话继续解析器", phrases) == "继续解析器"
    assert starts_with_phrase("saved the file", phrases) is None
    assert starts_with_phrase("please save", phrases) is None


def test_a_decision_the_user_states_is_a_key_decision() -> None:
    """What the user says was decided is kept among the decisions, verbatim."""
    ask = "Use a token bucket at 10 requests/s because bursts must pass."
    mem = build_memory(
        [{"role": "user", "content": "Add rate limiting."}, {"role": "user", "content": ask}]
    )
    assert ask in mem.decisions


def test_only_a_message_start_is_read_for_a_phrase() -> None:
    """A pasted megabyte costs its first characters: the phrase at its start is found, and
    what follows is cut to a query's length."""
    rest = starts_with_phrase("/new " + "A" * 1_000_000, ["/new"])
    assert rest is not None and 0 < len(rest) < 1000
