"""A short load run of the real ``handoff serve``: no proxy-made errors, every answered
request recorded, a clean exit on SIGTERM (the full run is ``python -m bench.load``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_twenty_clients_half_streaming_all_recorded() -> None:
    """20 concurrent clients for ~3 s: zero proxy errors and every completed turn stored."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench.load", "--seconds", "3", "--clients", "20"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["completed"] > 0
    assert figures["sse_events"] > 0  # the streaming half really streamed
    assert figures["proxy_errors"] == 0, figures
    assert figures["transport_errors"] == 0, figures
    assert figures["statuses"] == {"200": figures["completed"]}
    assert figures["recorded"] == figures["completed"], figures
    assert figures["exit_code"] == 0, proc.stderr[-2000:]
    assert figures["peak_rss_mib"] > 0 and figures["cpu_s"] > 0
    assert figures["store_lag_samples"] > 0 and figures["store_lag_over_1s"] == 0, figures
    assert 0 < figures["store_slowest_write_s"] <= 1.0, figures  # every turn on disk in time
    assert proc.returncode == 0
