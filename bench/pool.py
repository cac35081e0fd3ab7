"""Pool the snapshot rows of several runs of the same code: ``python -m bench.pool DIR...``.

One run's snapshot rows sit within their interval's noise of the 0.9 target: rounds of
one run differ by ±20% on this shared machine. Runs of the same code measure the same
ratio, so their rounds can be pooled. Runs differ in the machine's speed too, so the
pooled figure is the median of each interleaved pair's own ratio (on / off, the two
rounds run back to back), not a ratio of medians taken across runs, which would mix
the runs' speeds; its interval is a seeded bootstrap over the pairs. Each DIR is a
``make bench`` output directory (``--out``); its ``results.json`` keeps every round.
Runs of different code are refused: pooling them would hide a change behind an
average. A run names its code by a hash of the measured tree (``handoff_code``: handoff,
the benchmark, the dependencies), so runs on either side of a docs-only commit pool;
runs from before that was recorded must share a commit.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

Rounds = tuple[list[float], list[float]]  # (off, on), round i of each run back to back

OFF = "handoff"
"""The side without a store, in every snapshot row's rounds."""


def snapshot_rounds(raw: Mapping[str, Mapping[str, Sequence[float]]]) -> dict[str, Rounds]:
    """Each snapshot row's rounds in a run's ``raw``: its key -> (off rounds, on rounds)."""
    rows: dict[str, Rounds] = {}
    for key, sides in raw.items():
        on = [name for name in sides if name != OFF]
        if key.startswith(("rps_snapshots", "rps_conversation")) and OFF in sides and len(on) == 1:
            off_rounds, on_rounds = list(sides[OFF]), list(sides[on[0]])
            n = min(len(off_rounds), len(on_rounds))  # (pairs only)
            rows[key] = (off_rounds[:n], on_rounds[:n])
    return rows


def median_interval(
    values: Sequence[float], level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """The ``level`` bootstrap interval of ``median(values)`` (seeded: reproducible)."""
    rng, n = random.Random(seed), len(values)
    meds = sorted(statistics.median(rng.choices(values, k=n)) for _ in range(resamples))
    cut = (1 - level) / 2
    return meds[int(cut * (resamples - 1))], meds[int((1 - cut) * (resamples - 1))]


def pool(runs: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """For every snapshot row found in all ``runs``: the median of the pairs' ratios (on /
    off) and its interval, the pairs counted, and each run's own figure (as the bench
    gives it: the ratio of its sides' medians)."""
    per_run = [snapshot_rounds(run["raw"]) for run in runs]
    keys = [k for k in per_run[0] if all(k in rows for rows in per_run)]
    out: dict[str, dict[str, Any]] = {}
    for key in keys:
        pairs = [on / off for rows in per_run for off, on in zip(*rows[key], strict=True) if off]
        out[key] = {
            "rounds": len(pairs),
            "ratio": statistics.median(pairs),
            "interval": median_interval(pairs),
            "runs": [statistics.median(r[key][1]) / statistics.median(r[key][0]) for r in per_run],
        }
    return out


def same_code(runs: Sequence[Mapping[str, Any]]) -> str:
    """What the runs share ("code HASH" or "commit ABC"); ValueError if not one code."""
    codes = {run["machine"].get("handoff_code") for run in runs}
    if len(codes) == 1 and None not in codes:
        code = codes.pop()
        if code == "unknown" or code.endswith("+dirty"):
            raise ValueError(f"the runs measured uncommitted or unknown code ({code})")
        return f"code {code}"
    commits = {run["machine"].get("handoff_commit") for run in runs}
    if None in codes and len(commits) == 1 and None not in commits:
        return f"commit {commits.pop()}"
    raise ValueError(
        "the runs are of different code "
        f"(commits {', '.join(sorted(map(str, commits)))}; code {', '.join(sorted(map(str, codes)))})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dirs", nargs="+", type=Path, help="make bench output directories")
    args = p.parse_args(argv)
    runs = []
    for d in args.dirs:
        try:
            runs.append(json.loads((d / "results.json").read_text()))
        except (OSError, ValueError) as e:
            p.error(f"{d}: no readable results.json ({e})")
    try:
        what = same_code(runs)
    except ValueError as e:
        p.error(str(e))
    pooled = pool(runs)
    if not pooled:
        p.error("no snapshot row is in every run")
    print(f"{what}, {len(runs)} runs pooled")
    for key, r in pooled.items():
        lo, hi = r["interval"]
        each = ", ".join(f"{x:.2f}" for x in r["runs"])
        print(f"{key}: {r['ratio']:.3f}× ({lo:.2f}–{hi:.2f}), the median of {r['rounds']} "
              f"pairs' ratios; each run's own figure {each}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
