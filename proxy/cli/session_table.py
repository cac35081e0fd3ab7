"""The ``sessions list`` table: short unique ids, and as many columns as the terminal holds.

An id is shown by its shortest unique start (:mod:`proxy.store.short_ids`), all of one
length, never cut; the title takes what is left, and the optional columns (workspace,
handoffs, tokens, start) appear only while the title keeps room to be read.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.cells import cell_len, set_cell_size
from rich.table import Table

from proxy.store.short_ids import short_ids

Row = Mapping[str, Any]
Cell = Callable[[Row], str]

GAP = 2  # between two columns: padding (0, 1), no edges, no rules
MIN_TITLE = 24
WIDE = 120  # from here dates carry their year
MAX_MODELS = 24
MAX_WORKSPACE = 20
ORDER = ("id", "workspace", "started", "last turn", "turns", "models", "handoffs", "tokens")


def clip(text: str, width: int) -> str:
    """``text`` within ``width`` characters, an ellipsis marking a cut."""
    if cell_len(text) <= width:
        return text
    return set_cell_size(text, max(0, width - 1)) + "…"


def _when(ts: float | None, fmt: str) -> str:
    return "" if ts is None else dt.datetime.fromtimestamp(ts).strftime(fmt)


def _n(v: Any) -> str:
    return "" if v is None else str(v)


def session_table(
    rows: Sequence[Row], every_id: Sequence[str], width: int, shown: Callable[[Any], str]
) -> Table:
    """The table of ``rows`` for a terminal ``width`` wide; ``every_id`` is every session
    in the store (what a short id must stay unique among); ``shown`` makes text safe."""
    ids = [str(r["id"]) for r in rows]
    short = short_ids(every_id, ids)
    length = max(map(len, short.values()), default=0)
    short = short_ids(every_id, ids, length)  # one length for all, each still unique
    fmt = "%Y-%m-%d %H:%M" if width >= WIDE else "%m-%d %H:%M"
    models = {r["id"]: clip(", ".join(r["models"]), MAX_MODELS) for r in rows}
    columns: list[tuple[str, Cell, str]] = [
        ("id", lambda r: short[r["id"]], "left"),
        ("last turn", lambda r: _when(r["last_turn_at"], fmt), "left"),
        ("turns", lambda r: _n(r["turns"]), "right"),
        ("models", lambda r: models[r["id"]], "left"),
    ]
    optional: list[tuple[str, Cell, str]] = [
        ("workspace", lambda r: clip(str(r["workspace"]), MAX_WORKSPACE), "left"),
        ("handoffs", lambda r: _n(r["handoffs"]), "right"),
        ("tokens", lambda r: _n(r["tokens"]), "right"),
        ("started", lambda r: _when(r["started_at"], fmt), "left"),
    ]
    titles = [shown(r["title"]) for r in rows]
    want = min(max(map(cell_len, titles), default=0), MIN_TITLE)
    for column in optional:
        if _room(rows, [*columns, column], width, shown) >= want:
            columns.append(column)
    columns.sort(key=lambda c: ORDER.index(c[0]))
    room = max(_room(rows, columns, width, shown), len("title"))
    table = Table(box=None, pad_edge=False, padding=(0, 1), show_edge=False)
    for header, _, justify in columns:
        table.add_column(header, no_wrap=True, justify=justify)  # type: ignore[arg-type]
    table.add_column("title", no_wrap=True)
    for r, title in zip(rows, titles, strict=True):
        table.add_row(*(shown(cell(r)) for _, cell, _ in columns), clip(title, room))
    return table


def _room(rows: Sequence[Row], columns: Sequence[tuple[str, Cell, str]], width: int,
          shown: Callable[[Any], str]) -> int:  # fmt: skip
    """What is left of ``width`` for the title after ``columns``."""
    used = sum(max([len(h), *(cell_len(shown(cell(r))) for r in rows)]) for h, cell, _ in columns)
    return width - used - GAP * len(columns)
