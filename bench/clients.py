"""The runner's handles on load: the loadgen worker process, and wrk when installed."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

from bench.loadgen import BENCH_KEY
from bench.procs import pin

Result = dict[str, Any]


class LoadGen:
    """One ``python -m bench.loadgen`` worker, pinned to the client cores."""

    def __init__(self, cpus: frozenset[int]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.loadgen"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=pin(cpus),
            start_new_session=True,
        )

    def run(self, **spec: Any) -> Result:
        """Send one command and wait for its result (each command bounds its own time)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(spec) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("loadgen worker exited")
        result: Result = json.loads(line)
        if "error" in result:
            raise RuntimeError(f"loadgen: {result['error']}")
        return result

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def __enter__(self) -> LoadGen:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


WRK_SCRIPT = """wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer {key}"
local f = io.open("{body}", "rb")
wrk.body = f:read("*a")
f:close()
"""


class Wrk:
    """Closed-loop throughput with wrk (one thread, ``concurrency`` connections)."""

    def __init__(self, binary: str, cpus: frozenset[int], workdir: Path) -> None:
        self.binary = binary
        self.cpus = cpus
        self.workdir = workdir

    @classmethod
    def find(cls, cpus: frozenset[int], workdir: Path) -> Wrk | None:
        binary = shutil.which("wrk")
        return cls(binary, cpus, workdir) if binary else None

    def throughput(self, port: int, body_file: str, concurrency: int, seconds: int) -> Result:
        script = self.workdir / f"wrk-{Path(body_file).stem}.lua"
        if not script.exists():
            script.write_text(WRK_SCRIPT.format(body=body_file, key=BENCH_KEY))
        argv = [
            self.binary, "-t1", f"-c{concurrency}", f"-d{max(1, seconds)}s", "-s", str(script),
            f"http://127.0.0.1:{port}/v1/chat/completions",
        ]  # fmt: skip
        out = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=seconds + 30,
            preexec_fn=pin(self.cpus),
            check=True,
        ).stdout
        return parse_wrk(out)


_WRK_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}


def parse_wrk(out: str) -> Result:
    """Successful answers per second, and error counts, from wrk's text report.

    wrk's own Requests/sec counts every answer, a 401 as much as a 200; here ``rps``
    counts only the 2xx/3xx ones, as the load generator does, so a peer that refuses
    requests quickly cannot look fast."""
    total = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)\b", out)
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    bad = int(non2xx.group(1)) if non2xx else 0
    ok = (int(total.group(1)) if total else 0) - bad
    seconds = float(total.group(2)) * _WRK_UNITS[total.group(3)] if total else 0.0
    return {
        "rps": ok / seconds if seconds > 0 else 0.0,
        "ok": ok,
        "errors": bad + (sum(int(g) for g in sock.groups()) if sock else 0),
    }
