"""Pooling the snapshot rows of several bench runs of one commit (``bench.pool``)."""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import pytest

from bench import report
from bench.pool import main, pool

ROW = "rps_conversation_replay"


def _run(
    off: list[float], on: list[float], commit: str = "abc1234", code: str | None = None
) -> dict:
    machine = {"handoff_commit": commit} | ({"handoff_code": code} if code else {})
    return {
        "machine": machine,
        "raw": {
            ROW: {"handoff": off, "handoff-store-conversation": on},
            "rps_throughput_c16": {"handoff": off, "forwarder": on},  # not a snapshot row
        },
    }


def test_pooled_ratio_is_the_median_pair_and_each_run_keeps_its_own() -> None:
    """Pairs are compared within themselves: a run on a faster machine shifts both sides."""
    a = _run([100, 110, 90, 105, 95], [90, 100, 80, 95, 85])
    b = _run([200, 190, 210, 205, 195], [196, 186, 206, 200, 190])
    pooled = pool([a, b])
    assert set(pooled) == {ROW}
    row = pooled[ROW]
    off = [100, 110, 90, 105, 95, 200, 190, 210, 205, 195]
    on = [90, 100, 80, 95, 85, 196, 186, 206, 200, 190]
    assert row["rounds"] == 10
    assert row["ratio"] == pytest.approx(
        statistics.median(b / a for a, b in zip(off, on, strict=True))
    )
    # (the ratio of the pooled medians would mix the runs' speeds: 0.953 here, not 0.942)
    assert row["ratio"] == pytest.approx(0.942, abs=0.001)
    assert statistics.median(on) / statistics.median(off) == pytest.approx(0.953, abs=0.001)
    assert row["runs"] == pytest.approx([90 / 100, 196 / 200])
    lo, hi = row["interval"]
    assert lo <= row["ratio"] <= hi


def test_unpaired_rounds_are_left_out() -> None:
    pooled = pool([_run([100, 100, 100, 100, 100, 1], [90, 90, 90, 90, 90])])
    assert pooled[ROW]["rounds"] == 5
    assert pooled[ROW]["ratio"] == pytest.approx(0.9)


def _write(tmp_path: Path, name: str, run: dict) -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "results.json").write_text(json.dumps(run))
    return d


def test_cli_prints_the_pooled_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = _write(tmp_path, "a", _run([100] * 6, [92] * 6))
    b = _write(tmp_path, "b", _run([100] * 6, [94] * 6))
    assert main([str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "commit abc1234, 2 runs pooled" in out
    assert f"{ROW}: 0.930× " in out
    assert "the median of 12 pairs' ratios; each run's own figure 0.92, 0.94" in out


def test_cli_refuses_runs_of_different_commits(tmp_path: Path) -> None:
    a = _write(tmp_path, "a", _run([100] * 6, [92] * 6, commit="abc1234"))
    b = _write(tmp_path, "b", _run([100] * 6, [94] * 6, commit="def5678"))
    with pytest.raises(SystemExit) as e:
        main([str(a), str(b)])
    assert e.value.code == 2


def test_runs_of_one_code_pool_across_commits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A docs-only commit between two runs changes the commit, not the code measured."""
    a = _write(tmp_path, "a", _run([100] * 6, [92] * 6, commit="abc1234", code="c0de"))
    b = _write(tmp_path, "b", _run([100] * 6, [94] * 6, commit="def5678", code="c0de"))
    assert main([str(a), str(b)]) == 0
    assert "code c0de, 2 runs pooled" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("code_a", "code_b"), [("c0de", "d1ff"), ("c0de+dirty", "c0de+dirty"), ("unknown", "unknown")]
)
def test_runs_of_other_or_uncommitted_code_are_refused(
    tmp_path: Path, code_a: str, code_b: str
) -> None:
    a = _write(tmp_path, "a", _run([100] * 6, [92] * 6, code=code_a))
    b = _write(tmp_path, "b", _run([100] * 6, [94] * 6, code=code_b))
    with pytest.raises(SystemExit) as e:
        main([str(a), str(b)])
    assert e.value.code == 2


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def test_code_hash_follows_the_code_not_the_docs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "proxy").mkdir()
    (tmp_path / "proxy" / "app.py").write_text("x = 1\n")
    (tmp_path / "README.md").write_text("docs\n")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "run.py").write_text("y = 1\n")
    (tmp_path / "bench" / "NOTES.md").write_text("notes\n")
    (tmp_path / "bench" / "results" / "results.md").write_text("a run\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-qm", "one")
    monkeypatch.chdir(tmp_path)
    first = report._code()
    assert len(first) == 12 and not first.endswith("+dirty")
    (tmp_path / "README.md").write_text("more docs\n")
    (tmp_path / "bench" / "NOTES.md").write_text("more notes\n")  # docs beside the code
    (tmp_path / "bench" / "results" / "results.md").write_text("another run\n")
    assert report._code() == first  # not dirty either
    _git(tmp_path, "commit", "-qam", "docs only")
    assert report._code() == first
    (tmp_path / "bench" / "run.py").write_text("y = 2\n")
    assert report._code() == first + "+dirty"
    _git(tmp_path, "checkout", "-q", "--", "bench/run.py")
    (tmp_path / "proxy" / "app.py").write_text("x = 2\n")
    assert report._code() == first + "+dirty"
    _git(tmp_path, "commit", "-qam", "code")
    assert report._code() not in (first, first + "+dirty")
