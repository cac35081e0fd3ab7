"""Seeded conversations for the compression benches, as clients send them turn by turn.

Two shapes: a chat (user and assistant turns, now and then a pasted file) and an
agent loop (as Qwen Code, opencode or Codex run a task: one user message, then dozens
of tool rounds reading files, running commands and writing code). Facts are planted
in what the user asks, in the tool calls (files touched, commands run) and in what
the assistant states, so a bench can check what the compressed requests still hold.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

Msg = dict[str, Any]

WORDS = [
    "the",
    "parser",
    "reads",
    "each",
    "token",
    "and",
    "the",
    "cache",
    "keeps",
    "what",
    "it",
    "saw",
    "so",
    "later",
    "calls",
    "return",
    "early",
    "while",
    "the",
    "writer",
    "flushes",
    "batches",
    "to",
    "disk",
    "and",
    "the",
    "tests",
    "cover",
    "every",
    "branch",
]


@dataclass
class Facts:
    """Planted facts by kind: each a string that a forwarded request should contain."""

    by_kind: dict[str, list[str]] = field(default_factory=dict)

    def add(self, kind: str, text: str) -> None:
        self.by_kind.setdefault(kind, []).append(text)


def prose(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high))).capitalize() + "."


def file_body(rng: random.Random, lines: int, name: str) -> str:
    return "\n".join(
        f"def {name}_{i}(x):  # {rng.choice(WORDS)} {rng.choice(WORDS)}\n    return x + {i}"
        for i in range(lines // 2)
    )


def read_lines(rng: random.Random) -> int:
    """How long a file the agent reads is: mostly a screenful, some a module, a few huge
    (about 12, 80 and 500 lines: ~100, ~600 and ~4,000 tokens)."""
    r = rng.random()
    if r < 0.7:
        return rng.randint(4, 24)
    if r < 0.95:
        return rng.randint(30, 140)
    return rng.randint(300, 800)


def _call(cid: str, name: str, **args: Any) -> Msg:
    return {
        "id": cid,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def chat(seed: int, turns: int, facts: Facts | None = None) -> Iterator[list[Msg]]:
    """The messages each chat request adds: a user message (the request), then the
    assistant's answer arrives with the next one."""
    rng = random.Random(seed)
    answer: list[Msg] = []
    for t in range(turns):
        text = prose(rng, 8, 60)
        if facts is not None and t % 15 == 3:
            ask = f"Remember that the staging database is db-{t:03d}.internal."
            facts.add("user request", f"db-{t:03d}.internal")
            text = ask
        if rng.random() < 0.05:
            text += "\n```\n" + file_body(rng, rng.randint(60, 300), f"pasted{t}") + "\n```"
        yield [*answer, {"role": "user", "content": text}]
        said = prose(rng, 30, 250)
        if facts is not None and t % 15 == 9:
            said += f" I decided to keep the retry limit at {t + 3} attempts because of the rate limits."
            facts.add("assistant decision", f"retry limit at {t + 3} attempts")
        answer = [{"role": "assistant", "content": said}]


def agent(seed: int, requests: int, facts: Facts | None = None) -> Iterator[list[Msg]]:
    """The messages each agent request adds: a task's user message (after the previous
    task's final answer), or an assistant tool call with its result. A task reads files
    of its package, runs its tests (the first run fails with an error), changes two or
    three files and states one decision."""
    rng = random.Random(seed)
    sent, task = 0, 0
    answer: list[Msg] = []
    while sent < requests:
        task += 1
        ask = f"Task {task}: " + prose(rng, 6, 20)
        if facts is not None:
            ask = f"Task {task}: make the service listen on port {8400 + task} and add a test."
            facts.add("user request", f"port {8400 + task}")
        yield [*answer, {"role": "user", "content": ask}]
        sent += 1
        plan = Task(task, rng)
        for r in range(rng.randint(10, 30)):
            if sent >= requests:
                return
            yield list(plan.round(r, facts))
            sent += 1
        answer = [{"role": "assistant", "content": f"Task {task} is done. " + prose(rng, 10, 40)}]


class Task:
    """One agent task's rounds: which files it changes, its test command, its error."""

    def __init__(self, n: int, rng: random.Random) -> None:
        self.n, self.rng = n, rng
        self.changes = rng.sample(range(10), rng.randint(2, 3))
        self.command = f"pytest -q tests/test_pkg_{n}.py"
        self.failed = False

    def round(self, r: int, facts: Facts | None) -> Iterator[Msg]:
        rng, n = self.rng, self.n
        cid = f"call_{n}_{r}"
        kind = rng.random()
        if r == 5 or (kind < 0.2 and self.changes):
            mod = self.changes.pop(0) if self.changes else rng.randrange(10)
            path = f"src/pkg_{n}/mod_{mod}.py"
            body = file_body(rng, rng.randint(40, 200), f"w{n}_{r}")
            call = _call(cid, "write_file", path=path, content=body)
            out = f"Wrote {len(body)} bytes to {path}"
            if facts is not None:
                facts.add("file changed", path)
        elif kind < 0.45:
            call = _call(cid, "run_shell_command", command=self.command)
            out = "3 passed"
            if not self.failed:
                self.failed = True
                out = f"E   ImportError: cannot import name 'Config{n}' from 'pkg_{n}'\n1 failed"
                if facts is not None:
                    facts.add("command run", self.command)
                    facts.add("error seen", f"cannot import name 'Config{n}'")
        else:
            path = f"src/pkg_{n}/mod_{rng.randrange(10)}.py"
            call = _call(cid, "read_file", path=path)
            out = file_body(rng, read_lines(rng), f"f{n}_{r}")
        said = "Let me look." if rng.random() < 0.7 else prose(rng, 10, 40)
        if facts is not None and r == 4:
            said = (
                f"I decided to store the sessions of task {n} in sqlite with WAL because it "
                "survives crashes."
            )
            facts.add("assistant decision", f"sessions of task {n} in sqlite")
        yield {"role": "assistant", "content": said, "tool_calls": [call]}
        yield {"role": "tool", "tool_call_id": cid, "content": out}
