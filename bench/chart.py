"""``chart.svg`` from the result rows, as hand-written SVG (no plotting dependency).

Panels of horizontal bars: ratios to the baseline (target marked per bar, and the
ratio's interval over its rounds when it has one), ratios to LiteLLM's proxy when it
ran, and milliseconds added over the bare forwarder (the 1 ms budget marked).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from html import escape

from bench.measure import Row

WIDTH, LABEL, BAR_H, GAP = 840, 350, 18, 8
COLOURS = {True: "#2e7d32", False: "#c62828", None: "#757575"}
PEER = "litellm"
"""The name LiteLLM's rows give as what they compare with."""


def target_value(target: str) -> float | None:
    """The number in a target such as ``≥ 0.8x`` or ``≤ 1 ms added``."""
    m = re.search(r"(\d+(?:\.\d+)?)", target)
    return float(m.group(1)) if m else None


def _short(what: str, limit: int = 52) -> str:
    """A label that fits left of the bars (~6.5 px a character at 12 px)."""
    return what if len(what) <= limit else what[: limit - 1].rstrip(" ,:") + "…"


def _panel(title: str, rows: Sequence[Row], top: int, unit: str) -> tuple[list[str], int]:
    values = [abs(r.figure or 0.0) for r in rows] + [target_value(r.target) or 0 for r in rows]
    values += [r.interval[1] for r in rows if r.interval is not None]
    scale_max = max([*values, 1e-9]) * 1.15
    span = WIDTH - LABEL - 90
    out = [f'<text x="10" y="{top + 14}" class="title">{escape(title)}</text>']
    y = top + 26
    zero = LABEL
    for r in rows:
        value = r.figure or 0.0
        w = max(1.0, abs(value) / scale_max * span)
        out.append(
            f'<text x="{LABEL - 8}" y="{y + 13}" class="label">{escape(_short(r.what))}</text>'
        )
        out.append(
            f'<rect x="{zero}" y="{y}" width="{w:.1f}" height="{BAR_H}" '
            f'fill="{COLOURS[r.passed]}"/>'
        )
        end = zero + w
        if r.interval is not None:  # the ratio's 95% interval over the rounds
            lo, hi = (zero + v / scale_max * span for v in r.interval)
            mid, end = y + BAR_H / 2, max(end, hi)
            out.append(
                f'<path d="M{lo:.1f},{mid - 4}V{mid + 4}M{lo:.1f},{mid}H{hi:.1f}'
                f'M{hi:.1f},{mid - 4}V{mid + 4}" class="spread"/>'
            )
        text = f"{value:.2f}{unit}" if unit == "×" else f"{value:+.3f} {unit}"
        out.append(f'<text x="{end + 6:.1f}" y="{y + 13}" class="value">{text}</text>')
        goal = target_value(r.target)
        if goal is not None:
            gx = zero + goal / scale_max * span
            out.append(
                f'<line x1="{gx:.1f}" x2="{gx:.1f}" y1="{y - 2}" y2="{y + BAR_H + 2}" '
                'class="goal"/>'
            )
        y += BAR_H + GAP
    return out, y + 10


def render(rows: Sequence[Row], subtitle: str) -> str:
    measured = [r for r in rows if r.kind == "ratio" and r.figure is not None]
    # Against LiteLLM the ratios are tens: on one axis the others would be slivers.
    ratios = [r for r in measured if r.compared_with != PEER]
    peers = [r for r in measured if r.compared_with == PEER]
    added = [r for r in rows if r.kind == "added_ms" and r.figure is not None]
    body: list[str] = [f'<text x="10" y="40" class="sub">{escape(subtitle)}</text>']
    y = 52
    if ratios:
        part, y = _panel("handoff ÷ baseline (| marks the target)", ratios, y, "×")
        body += part
    if peers:
        part, y = _panel("handoff ÷ LiteLLM's proxy (| marks the target)", peers, y, "×")
        body += part
    if added:
        part, y = _panel("ms added over the bare forwarder (| marks the budget)", added, y, "ms")
        body += part
    legend = (
        "green: meets target · red: misses · grey: reported only · "
        "|—| a ratio's 95% interval over its rounds"
    )
    body.append(f'<text x="10" y="{y + 4}" class="sub">{legend}</text>')
    height = y + 16
    style = (
        "text{font-family:sans-serif;fill:#222}.title{font-size:14px;font-weight:bold}"
        ".sub{font-size:11px;fill:#555}.label{font-size:12px;text-anchor:end}"
        ".value{font-size:12px}.goal{stroke:#000;stroke-width:2}"
        ".spread{stroke:#000;stroke-width:1;fill:none}"
    )
    return "\n".join(
        [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
            f'viewBox="0 0 {WIDTH} {height}">',
            f"<style>{style}</style>",
            '<rect width="100%" height="100%" fill="#fff"/>',
            '<text x="10" y="22" class="title">handoff vs the bare aiohttp forwarder</text>',
            *body,
            "</svg>",
            "",
        ]
    )
