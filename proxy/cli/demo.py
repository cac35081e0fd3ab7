"""``handoff demo``: one offline command that shows what handoff does.

It starts the simulated upstream (:mod:`proxy.cli.simulated_upstream`) and handoff itself
in this process, on free loopback ports, with the store in a temporary directory
(or ``--store PATH``). The official ``openai`` SDK then plays a scripted conversation
that grows past 8k tokens on a 1M-window model, switches to an 8k one (handoff
compresses) and back (the original history passes untouched). Each turn's decision
comes from the ``x-handoff-*`` response headers; the session timeline comes from the
store, printed by ``handoff sessions show``. Each run is a conversation of its own (its
system message says when it began), so a second run into the same store adds a session
instead of replaying the first one's turns as regenerates.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import importlib.util
import logging
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from proxy.cli import sessions as sessions_cli
from proxy.cli.simulated_upstream import MODELS, SimulatedUpstream
from proxy.config import Settings, load_settings
from proxy.log import configure_logging
from proxy.server.app import create_app
from proxy.store.read import SqliteReader

LARGE, SMALL = "sim-large-1m", "sim-small-8k"
Say = Callable[[str], None]


@dataclass(frozen=True)
class Step:
    model: str
    text: str
    stream: bool = False


def pasted_log(topic: str, lines: int) -> str:
    """A deterministic build log of about 25 tokens per line, as a user would paste it."""
    return "\n".join(
        f"2025-03-{1 + i % 28:02d} 10:{i % 60:02d}:{(i * 7) % 60:02d} INFO {topic}.worker-{i % 7} "
        f"finished step {i} of the {topic} pipeline in {(i * 37) % 900 + 15} ms (cache hit {i % 3})"
        for i in range(lines)
    )


SCRIPT = (
    Step(
        LARGE,
        "I'm debugging our nightly build. Here is the compile log:\n" + pasted_log("compile", 130),
    ),
    Step(LARGE, "And the test log:\n" + pasted_log("test", 130)),
    Step(LARGE, "And the packaging log:\n" + pasted_log("package", 130), stream=True),
    Step(SMALL, "Switching to the small local model: which step was slowest?", stream=True),
    Step(SMALL, "Still on the small model: anything unusual about the cache hits?"),
    Step(LARGE, "Back on the large model: summarise the whole build for the team."),
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``demo``."""
    p = subparsers.add_parser(
        "demo", help="play a model-switching conversation against a simulated upstream"
    )
    p.add_argument("--store", metavar="PATH", help="keep the snapshot store here")
    p.set_defaults(func=run)


def demo_settings(config: str | None, store: Path, upstream_url: str) -> Settings:
    """The user's configuration, with the simulated upstream as the only route."""
    models = {m: {"context_window": w, "max_output_tokens": 1024, "tokenizer": "o200k_base"}
              for m, w in MODELS.items()}  # fmt: skip
    return load_settings(
        config,
        {
            "upstreams": [{"name": "simulated", "base_url": upstream_url}],
            "models": models,
            "tokens": {"discover": False},
            "store": {"enabled": True, "path": str(store)},
        },
    )


def run(args: argparse.Namespace) -> int:
    """Play the demo; the store lives in a temporary directory unless ``--store``."""
    configure_logging("console", logging.WARNING)  # the demo's output is on stdout
    if importlib.util.find_spec("openai") is None:
        print(
            "handoff demo plays its conversation with the openai SDK: pip install 'handoff[demo]'"
        )
        return 1
    if args.store:
        return asyncio.run(play(args.config, Path(args.store), print))
    with tempfile.TemporaryDirectory(prefix="handoff-demo-") as tmp:
        code = asyncio.run(play(args.config, Path(tmp) / "demo.db", print))
        print("(the store was in a temporary directory; pass --store PATH to keep it)")
        return code


async def _serve(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=5.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port: int = runner.addresses[0][1]
    return runner, port


async def play(config: str | None, store: Path, say: Say) -> int:
    """Start both servers, run the script, stop (draining the store), print the timeline."""
    sim_runner, sim_port = await _serve(SimulatedUpstream().app())
    try:
        sim_url = f"http://127.0.0.1:{sim_port}/v1"
        settings = demo_settings(config, store, sim_url)
        proxy_runner, port = await _serve(create_app(settings))
        try:
            say(f"simulated upstream on {sim_url}: {LARGE} (1M window), {SMALL} (8k window)")
            say(f"handoff on http://127.0.0.1:{port}/v1, store {store}\n")
            await converse(f"http://127.0.0.1:{port}/v1", settings.server.access_key, say)
        finally:
            await proxy_runner.cleanup()  # closes the store: every turn is written
    finally:
        await sim_runner.cleanup()
    return timeline(store, say)


async def converse(base_url: str, access_key: str, say: Say) -> None:
    """The scripted conversation through the openai SDK, one line per turn."""
    import openai  # the SDK is the demo's client, loaded only when the demo runs

    headers = {"x-handoff-key": access_key} if access_key else None
    client = openai.AsyncOpenAI(
        base_url=base_url, api_key="sk-demo-not-a-real-key", max_retries=0,
        default_headers=headers,
    )  # fmt: skip
    begun = dt.datetime.now().isoformat(timespec="milliseconds")
    history: list[dict[str, Any]] = [
        {"role": "system", "content": f"You are a build engineer's assistant. (demo, {begun})"}
    ]
    try:
        for n, step in enumerate(SCRIPT, 1):
            history.append({"role": "user", "content": step.text})
            raw = await client.chat.completions.with_raw_response.create(
                model=step.model,
                messages=history,  # type: ignore[arg-type]
                stream=step.stream,
            )
            if step.stream:
                stream: Any = raw.parse()
                text = "".join([c.choices[0].delta.content or "" async for c in stream
                                if c.choices])  # fmt: skip
            else:
                text = raw.parse().choices[0].message.content or ""  # type: ignore[union-attr]
            history.append({"role": "assistant", "content": text})
            say(describe_turn(n, step, raw.headers))
            say(f"          ← {text}")
    finally:
        await client.close()


def describe_turn(n: int, step: Step, headers: Mapping[str, str]) -> str:
    """One line from the ``x-handoff-*`` headers: decision, tokens, budget, policies."""
    decision = headers.get("x-handoff-decision", "?")
    counted, bound = headers.get("x-handoff-tokens"), headers.get("x-handoff-tokens-bound")
    if counted is not None:
        tokens = f"{int(counted):,} tokens"
    else:  # the fast path: a cheap upper bound already fits, so nothing was counted
        tokens = f"≤{int(bound or 0):,} tokens (upper bound, fits)"
    window = int(headers.get("x-handoff-window", "0"))
    line = f"turn {n}  {step.model:<13} {decision:<12} {tokens}"
    if decision == "compressed":
        sent = int(headers.get("x-handoff-forwarded-tokens", "0"))
        line += f" → {sent:,} sent (budget {int(headers.get('x-handoff-budget', '0')):,})"
        line += f" by {headers.get('x-handoff-policy', '?')}"
    line += f", window {window:,}" + ("  [streamed]" if step.stream else "")
    return line


def timeline(store: Path, say: Say) -> int:
    """Print the conversation's session from the store with ``handoff sessions show``."""
    sessions = SqliteReader(store).list_sessions(limit=1)
    if not sessions:
        say("the store recorded no session")
        return 1
    say(f"\nThe session as the store recorded it (handoff sessions show {sessions[0]['id']}):")
    parser = argparse.ArgumentParser(prog="handoff")
    sessions_cli.register(parser.add_subparsers())
    args = parser.parse_args(["sessions", "show", sessions[0]["id"], "--store", str(store)])
    args.config = None
    code: int = args.func(args)
    return code
