"""Results as text: the Markdown table (also printed) and the machine description."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.measure import Row


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def _commit() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


CODE = ("proxy", "policies", "bench", "pyproject.toml")
"""What a run measures: handoff's code, the benchmark's, the dependencies (not the docs)."""


def _is_code(path: str) -> bool:
    """Not the docs and results that live among it (``bench/NOTES.md``, a run's output)."""
    return not (path.endswith(".md") or path.startswith("bench/results/"))


def _code() -> str:
    """A short hash of the measured code's files at HEAD, ``+dirty`` when the work tree
    changes one: runs of the same code, if not of one commit, can be pooled
    (``bench.pool``)."""
    try:
        git = ["git", "-c", "core.quotepath=off"]
        tree = subprocess.run([*git, "ls-tree", "-r", "HEAD", "--", *CODE], capture_output=True,
                              text=True, timeout=5, check=True).stdout  # fmt: skip
        status = subprocess.run([*git, "status", "--porcelain", "--", *CODE], capture_output=True,
                                text=True, timeout=5, check=True).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    files = [line for line in tree.splitlines() if _is_code(line.split("\t", 1)[-1])]
    dirty = [line for line in status.splitlines() if _is_code(line[3:].split(" -> ")[-1])]
    if not files:
        return "unknown"
    digest = hashlib.sha256("\n".join(files).encode()).hexdigest()[:12]
    return digest + ("+dirty" if dirty else "")


def machine(pinned: bool, wrk: bool) -> dict[str, Any]:
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "allowed_cpus": len(os.sched_getaffinity(0)),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "aiohttp": _version("aiohttp"),
        "handoff_commit": _commit(),
        "handoff_code": _code(),
        "pinned": pinned,
        "load_tool": "wrk (throughput) + bench.loadgen" if wrk else "bench.loadgen",
    }


def _num(value: float | None, unit: str = "") -> str:
    if value is None:
        return "—"
    if abs(value) >= 100:
        text = f"{value:,.0f}"
    elif abs(value) >= 1:
        text = f"{value:.2f}"
    else:
        text = f"{value:.3f}"
    return f"{text} {unit}".strip()


def figure(row: Row) -> str:
    if row.figure is None:
        return "—"
    if row.kind == "ratio":
        if row.interval is None:
            return f"{row.figure:.2f}×"
        low, high = row.interval
        return f"{row.figure:.2f}× ({low:.2f}–{high:.2f})"
    if row.kind == "added_ms":
        return f"{row.figure:+.3f} ms"
    return _num(row.figure)


def verdict(row: Row) -> str:
    if row.passed is None:
        return "reported" if not row.note.startswith("not available") else "n/a"
    return "pass" if row.passed else "MISS"


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| what | compared with | handoff | baseline | figure | target | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.what} | {r.compared_with} | {_num(r.handoff, r.unit)} | "
            f"{_num(r.baseline, r.unit)} | {figure(r)} | {r.target} | {verdict(r)} |"
        )
    return "\n".join(lines)


def markdown(rows: Sequence[Row], info: dict[str, Any], notes: Sequence[str], cmd: str) -> str:
    machine_line = ", ".join(f"{k}: {v}" for k, v in info.items())
    parts = [
        "# handoff benchmark",
        "",
        "Every figure compares handoff with its baseline measured side by side in one run, "
        "interleaved, as the median over rounds. The machine is shared, so absolute times "
        "are context only; the ratios are the result. In brackets, a ratio's 95% bootstrap "
        "interval over its rounds: a target inside it is within the run's noise, a pass "
        "or a miss that the next run may not repeat.",
        "",
        table(rows),
        "",
        f"**Machine**: {machine_line}",
        "",
        f"**Rerun**: `{cmd}`",
    ]
    details = [f"- {r.what}: {r.note}" for r in rows if r.note]
    if details or notes:
        parts += ["", "**Notes**", "", *details, *(f"- {n}" for n in notes)]
    return "\n".join(parts) + "\n"
