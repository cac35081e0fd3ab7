"""LiteLLM's proxy as a peer to compare with: found, started and checked, never installed.

LiteLLM is not a dependency of handoff and pulls in a large tree of its own, so it
is best kept in an environment of its own and named with ``--litellm PATH`` (its
``litellm`` command); without it, the bench looks next to its own interpreter and on
``PATH``. It runs as issue 6 asks: a master key, no database, no callbacks, bound to
loopback, and with its bundled model price map (the bench has no network but
loopback). Its first answer is checked before any round, so a misconfigured peer
is reported, not measured.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from bench.loadgen import BENCH_KEY
from bench.procs import Fleet, Server, free_port, last_line

MASTER_KEY = BENCH_KEY
"""LiteLLM's master key: what every bench client sends."""
READY_S = 120.0
"""LiteLLM imports for ~13 s on two free cores; pinned to one, under load, longer."""

CONFIG = """model_list:
  - model_name: gpt-4o-mini
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: http://127.0.0.1:{port}/v1
      api_key: {key}
general_settings:
  master_key: {key}
"""


def find(given: str | None) -> str | None:
    """The ``litellm`` command: ``given``, else next to this interpreter, else on PATH."""
    if given:
        return given
    here = str(Path(sys.executable).parent)
    return shutil.which("litellm", path=here) or shutil.which("litellm")


def version(binary: str) -> str:
    """The version of the LiteLLM behind ``binary`` (from its own environment)."""
    python = Path(binary).with_name("python")
    if not python.exists():
        return "unknown version"
    out = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return out.stdout.strip() or "unknown version"


def start(
    fleet: Fleet, upstream: Server, cpus: frozenset[int], binary: str | None, body: bytes
) -> Server | str:
    """LiteLLM's proxy in front of ``upstream``, answering ``body`` with a 200; or why not."""
    command = find(binary)
    if command is None:
        return (
            "litellm is not installed: LiteLLM comparison skipped (install 'litellm[proxy]' "
            "in an environment of its own and pass --litellm PATH/TO/bin/litellm)"
        )
    if not Path(command).exists():
        return f"--litellm {command}: no such file; LiteLLM comparison skipped"
    config = fleet.workdir / "litellm.yaml"
    config.write_text(CONFIG.format(port=upstream.port, key=MASTER_KEY))
    port = free_port()
    argv = [command, "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    try:
        server = fleet.start("litellm", argv, port, cpus, env, ready_s=READY_S)
    except RuntimeError as e:
        return f"LiteLLM failed to start, skipped: {last_line(e)}"
    problem = answer_problem(port, body)
    if problem is not None:
        fleet.stop(server)
        return f"LiteLLM did not answer a chat request, skipped: {problem}"
    return server


def answer_problem(port: int, body: bytes) -> str | None:
    """None if LiteLLM answers ``body`` with a chat completion, else what it did."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {MASTER_KEY}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:
            answer = resp.read()
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}: {e.read()[:200]!r}"
    except OSError as e:
        return f"{type(e).__name__}: {e}"
    return None if b'"chat.completion"' in answer else f"unexpected answer {answer[:200]!r}"
