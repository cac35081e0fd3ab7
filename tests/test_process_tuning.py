"""glibc keeps freed heap memory once handoff tunes it, so requests stop re-faulting pages."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from proxy.process_tuning import tune_malloc

glibc = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)

# Parse and re-serialise a 32 KB body in a loop, as the request path does, and count
# the page faults per round after warming up.
PROBE = """
import resource, sys, orjson
from proxy.process_tuning import tune_malloc
tuned = tune_malloc()
raw = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 32768}]})
for _ in range(200):
    orjson.dumps(orjson.loads(raw))
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(2000):
    orjson.dumps(orjson.loads(raw))
after = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
print(tuned, (after - before) / 2000)
"""


def _probe(env: dict[str, str]) -> tuple[bool, float]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    ).stdout.split()
    return out[0] == "True", float(out[1])


@glibc
def test_tuned_heap_stops_refaulting_pages() -> None:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    tuned, faults = _probe(env)
    assert tuned
    assert faults < 0.5, f"{faults} page faults per request-sized round after tuning"


@glibc
def test_operator_malloc_settings_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "131072")
    assert tune_malloc() is False
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path),
           "MALLOC_TRIM_THRESHOLD_": "131072"}  # fmt: skip
    tuned, _ = _probe(env)
    assert not tuned
