"""What a store says about a model's real limits: the windows its upstreams named
when they refused a prompt as too long, and the windows the engine planned with."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from proxy.store.db import connect
from proxy.upstream.overflow import context_limit


def learned_limits(path: Path, model: str) -> dict[str, Any]:
    """``{"overflows": [...], "windows": [...]}`` for ``model`` (read-only)."""
    db = connect(path, create=False)
    try:
        errors = db.execute(
            "SELECT upstream, status, error, started_at FROM turns"
            " WHERE model = ? AND error IS NOT NULL AND status IN (400, 413, 422, 500)",
            (model,),
        ).fetchall()
        decisions = db.execute(
            "SELECT json_extract(decision, '$.window'), MAX(started_at), COUNT(*) FROM turns"
            " WHERE model = ? AND decision IS NOT NULL GROUP BY 1",
            (model,),
        ).fetchall()
    finally:
        db.close()
    overflows: Counter[tuple[str, int]] = Counter()
    for upstream, status, error, _ in errors:
        limit = context_limit(status, error if isinstance(error, bytes) else error.encode())
        if limit is not None:
            overflows[(upstream, limit)] += 1
    return {
        "overflows": [
            {"upstream": up, "limit": limit or None, "refusals": n}
            for (up, limit), n in sorted(overflows.items())
        ],
        "windows": [
            {"window": w, "turns": n, "last_at": last}
            for w, last, n in sorted(decisions, key=lambda r: r[1], reverse=True)
            if w is not None
        ],
    }
