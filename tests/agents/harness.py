"""Drive a real agent CLI through the real proxy against a scripted upstream, on loopback.

``run_agent`` (a pytest fixture) starts the scripted upstream (:mod:`tests.agents.scripted`),
the proxy in front of it with a small ``[models]`` window and a SQLite store in a temp
dir, then runs a CLI from ``tests/agents/node_modules/.bin`` with a fresh HOME, a clean
environment (no key or proxy variable of the machine leaks in) and a timeout. It returns
what the CLI printed, every status the proxy answered, the turns the store recorded and
what the upstream received. ``make agents-install`` puts the CLIs there (``npm ci``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pytest
from aiohttp import web
from pytest_aiohttp import AiohttpServer

from proxy.config import Settings
from proxy.server.app import create_app
from proxy.store.read import SqliteReader
from tests.agents.scripted import ChatScript, Script, ScriptedUpstream, ToolTask

HERE = Path(__file__).resolve().parent
BIN = HERE / "node_modules" / ".bin"
API_KEY = "sk-agents-test-key"
EXCHANGES = ("/chat/completions", "/v1/messages", "/v1/responses")
"""Paths whose answers are recorded turns (count_tokens is not one)."""


def cli_path(name: str) -> Path:
    """The CLI's path, or a skip-free failure naming the command that installs it."""
    path = BIN / name
    if not path.exists():
        pytest.fail(f"{path} is missing: run `make agents-install` (npm ci in tests/agents)")
    return path


def write_large_files(root: Path, count: int, lines: int, width: int = 60) -> list[str]:
    """``count`` source files of ``lines`` numbered lines each (about ``width`` chars a
    line), every line unique, so a truncated or elided tool result is visible."""
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for f in range(count):
        path = root / f"module_{f}.py"
        body = "".join(
            f"def f{f}_{i:04d}(x):  return x * {i} + {f}  # {'ab' * ((width - 40) // 2)}\n"
            for i in range(lines)
        )
        path.write_text(body)
        paths.append(str(path))
    return paths


@dataclass
class AgentRun:
    """What one CLI run produced, seen from every side."""

    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    upstream: ScriptedUpstream
    statuses: list[tuple[str, str, int]]  # (method, path, status) of every proxy answer
    turns: list[dict[str, Any]]  # the store's timeline rows, every session, in order
    reader: SqliteReader
    sessions: list[str] = field(default_factory=list)

    def explain(self) -> str:
        """A failure message: exit code, output tails, statuses, upstream paths."""
        return (
            f"exit={self.returncode}\n--- stdout\n{self.stdout[-3000:]}\n--- stderr\n"
            f"{self.stderr[-3000:]}\n--- proxy statuses {self.statuses}\n--- upstream "
            f"{[(s.path, s.status) for s in self.upstream.seen]}"
        )

    def client_errors(self) -> list[tuple[str, str, int]]:
        """Proxy answers with a 4xx status (the CLI's fault or handoff's)."""
        return [s for s in self.statuses if 400 <= s[2] < 500]

    def compressed(self) -> list[dict[str, Any]]:
        return [t for t in self.turns if t["action"] == "compressed"]

    def forwarded(self) -> list[Any]:
        """Each agent request body the upstream accepted (those with ``tools``)."""
        return [b for b in self.upstream.bodies() if isinstance(b, dict) and b.get("tools")]


class RunAgent(Protocol):
    def __call__(
        self,
        cli: str,
        args: Sequence[str],
        task: ToolTask,
        *,
        setup: Callable[[Path, str], Mapping[str, str]] | None = None,
        cwd: Path | None = None,
        timeout_s: float = 90.0,
        scripts: Mapping[str, Script] | None = None,
        max_output_tokens: int = 1024,
        upstream_kind: str = "openai",
    ) -> Awaitable[AgentRun]: ...


def _clean_env(home: Path) -> dict[str, str]:
    """A minimal environment: our Node first on PATH, HOME and XDG dirs in the temp dir."""
    return {
        "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "CI": "true",
        "NO_PROXY": "127.0.0.1,localhost",
    }


async def _run(
    argv: Sequence[str], env: Mapping[str, str], cwd: Path, timeout_s: float
) -> tuple[int | None, str, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=dict(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # its own process group: a timeout ends it and its children
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
        code: int | None = proc.returncode
    except TimeoutError:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = await proc.communicate()
        code = None
    return code, out.decode(errors="replace"), err.decode(errors="replace")


def _store_turns(reader: SqliteReader, expected: int) -> tuple[list[str], list[dict[str, Any]]]:
    """The store's sessions and timeline rows, waiting (bounded) until ``expected``
    chat turns are on disk."""
    end = time.monotonic() + 10.0
    while True:
        sessions = [s["id"] for s in reversed(reader.list_sessions(limit=1000))]
        turns = [t for sid in sessions for t in reader.session(sid)["timeline"]]
        if len(turns) >= expected or time.monotonic() > end:
            return sessions, turns
        time.sleep(0.05)


@pytest.fixture
def run_agent(aiohttp_server: AiohttpServer, tmp_path: Path) -> RunAgent:
    """``await run_agent(cli, args, task, setup=…)``: one CLI run through handoff.

    ``setup(home, proxy_url)`` writes the CLI's config under ``home`` and returns extra
    environment variables; ``proxy_url`` ends in ``/v1``."""

    async def go(
        cli: str,
        args: Sequence[str],
        task: ToolTask,
        *,
        setup: Callable[[Path, str], Mapping[str, str]] | None = None,
        cwd: Path | None = None,
        timeout_s: float = 90.0,
        scripts: Mapping[str, Script] | None = None,
        max_output_tokens: int = 1024,
        upstream_kind: str = "openai",
    ) -> AgentRun:
        binary = cli_path(cli)
        upstream = ScriptedUpstream(
            scripts=scripts or {"/v1/chat/completions": ChatScript(task)},
            models={task.model: task.window},
        )
        up = await aiohttp_server(upstream.app(), host="127.0.0.1", shutdown_timeout=1.0)
        upstream.url = str(up.make_url("/v1"))
        db = tmp_path / "handoff.db"
        settings = Settings(
            upstreams=[
                {
                    "name": "scripted",
                    "base_url": upstream.url,
                    "models": ["*"],
                    "kind": upstream_kind,
                }
            ],
            models={
                task.model: {
                    "context_window": task.window,
                    "max_output_tokens": max_output_tokens,
                    "tokenizer": "o200k_base",
                }
            },
            tokens={"discover": False},
            store={"enabled": True, "path": str(db), "writer": "thread", "flush_interval_s": 0.05},
        )
        app = create_app(settings)
        statuses: list[tuple[str, str, int]] = []

        async def note(request: web.Request, response: web.StreamResponse) -> None:
            statuses.append((request.method, request.path, response.status))

        app.on_response_prepare.append(note)
        proxy = await aiohttp_server(app, host="127.0.0.1")
        proxy_url = f"http://127.0.0.1:{proxy.port}/v1"
        home = tmp_path / "home"
        home.mkdir(exist_ok=True)
        env = _clean_env(home)
        if setup is not None:
            env.update(setup(home, proxy_url))
        workdir = cwd or tmp_path / "work"
        workdir.mkdir(exist_ok=True)
        code, out, err = await _run([str(binary), *args], env, workdir, timeout_s)
        reader = SqliteReader(db)
        chats = sum(1 for _, path, _ in statuses if path.endswith(EXCHANGES))
        sessions, turns = await asyncio.to_thread(_store_turns, reader, chats)
        return AgentRun(code, out, err, upstream, statuses, turns, reader, sessions)

    return go


def message_text(message: Mapping[str, Any]) -> str:
    """A message's text: its string content, or its text parts joined (Qwen Code sends
    tool results as a list of parts)."""
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def newest_tool_result_whole(body: Mapping[str, Any], files: Mapping[str, str]) -> str | None:
    """None if the newest message, when it is a tool result, holds its file whole (each
    line of it, the CLI's own line numbering aside); else what is missing."""
    last = body["messages"][-1]
    if last.get("role") != "tool":
        return None
    text = message_text(last)
    for path, body_text in files.items():
        if Path(path).name in text or body_text.splitlines()[0] in text:
            missing = [line for line in body_text.splitlines() if line not in text]
            return None if not missing else f"{path}: {len(missing)} lines missing"
    return f"tool result names none of the files: {text[:200]!r}"
