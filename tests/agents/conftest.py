"""Real agent CLIs through handoff. ``make agents`` installs them (npm ci) and runs these
tests with HANDOFF_AGENTS=1, where a missing CLI fails naming the command to run; a plain
``pytest`` skips them when they are not installed (``make test`` leaves them to ``make agents``)."""

from __future__ import annotations

import os

import pytest

from tests.agents.harness import BIN, run_agent  # noqa: F401


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if BIN.is_dir() or os.environ.get("HANDOFF_AGENTS") == "1":
        return
    skip = pytest.mark.skip(reason=f"{BIN} is missing: run `make agents`")
    for item in items:
        if "tests/agents/" in item.nodeid:
            item.add_marker(skip)
