"""The benchmark's ratio intervals: a bootstrap over interleaved rounds, shown with the ratio,
and narrowed by more rounds."""

from __future__ import annotations

import random
import re
import xml.etree.ElementTree as ET

from bench import chart
from bench.measure import FULL, Row, ratio_interval
from bench.report import figure
from bench.run import scaled


def _rounds(n: int, level: float, noise: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [level * (1 + rng.uniform(-noise, noise)) for _ in range(n)]


def test_identical_sides_give_a_point_interval() -> None:
    side = _rounds(12, 1500.0, 0.2, seed=1)
    assert ratio_interval(side, side) == (1.0, 1.0)


def test_a_clear_difference_is_bracketed_and_excludes_parity() -> None:
    base = _rounds(12, 1000.0, 0.05, seed=2)
    faster = [2 * b * m for b, m in zip(base, _rounds(12, 1.0, 0.05, seed=3), strict=True)]
    interval = ratio_interval(faster, base)
    assert interval is not None
    low, high = interval
    assert 1.8 < low <= high < 2.4
    assert not low <= 1.0 <= high


def test_noisier_rounds_give_a_wider_interval() -> None:
    quiet = ratio_interval(_rounds(21, 900.0, 0.02, seed=4), _rounds(21, 1000.0, 0.02, seed=5))
    noisy = ratio_interval(_rounds(21, 900.0, 0.25, seed=4), _rounds(21, 1000.0, 0.25, seed=5))
    assert quiet is not None and noisy is not None
    assert noisy[1] - noisy[0] > 3 * (quiet[1] - quiet[0])
    assert quiet[0] < 0.92 and quiet[1] > 0.88  # around the sides' true ratio, 0.9


def test_too_few_rounds_give_no_interval() -> None:
    assert ratio_interval([1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]) is None


def test_the_same_figures_give_the_same_interval() -> None:
    top, bottom = _rounds(12, 950.0, 0.2, seed=6), _rounds(12, 1000.0, 0.2, seed=7)
    assert ratio_interval(top, bottom) == ratio_interval(list(top), list(bottom))


def test_the_report_shows_the_interval_beside_the_ratio() -> None:
    row = Row("throughput", "forwarder", 890.0, 1000.0, "req/s", 0.89, "ratio", "≥ 0.9×", False)
    assert figure(row) == "0.89×"
    row.interval = (0.834, 0.9612)
    assert figure(row) == "0.89× (0.83–0.96)"


def test_the_chart_draws_the_interval_around_the_bar_end() -> None:
    row = Row("snapshots on/off", "off", 890.0, 1000.0, "turns/s", 0.89, "ratio", "≥ 0.9×", False)
    row.interval = (0.83, 0.96)
    tree = ET.fromstring(chart.render([row], "test machine"))
    ns = "{http://www.w3.org/2000/svg}"
    (bar,) = [r for r in tree.iter(f"{ns}rect") if r.get("x") == str(chart.LABEL)]
    (spread,) = [p for p in tree.iter(f"{ns}path") if p.get("class") == "spread"]
    xs = [float(x) for x in re.findall(r"[MH]([\d.]+)", spread.get("d", ""))]
    bar_end = chart.LABEL + float(bar.get("width", 0))
    assert min(xs) < bar_end < max(xs)  # the ratio lies inside its interval
    (value,) = [t for t in tree.iter(f"{ns}text") if t.get("class") == "value"]
    assert float(value.get("x", 0)) > max(xs)  # its label clears the whisker


def test_rounds_scale_multiplies_only_the_rounds_of_the_noisy_rows() -> None:
    five = scaled(FULL, 5)
    assert (five.tput_rounds, five.conversation_rounds) == (60, 105)
    assert five.rounds == FULL.rounds and five.step_seconds == FULL.step_seconds
    assert scaled(FULL, 1) == FULL
