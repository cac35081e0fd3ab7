"""handoff's own portable export (any version it can upgrade), one document a file."""

from __future__ import annotations

from pathlib import Path

from proxy.store import portable
from proxy.store.errors import InvalidDocument
from proxy.store.importers.base import Problem, Reading, load_json

KIND = "portable"


def detect(path: Path, head: bytes) -> bool:
    return portable.FORMAT.encode() in head[:4096]


def read(path: Path) -> Reading:
    reading = Reading()
    data = load_json(path, reading)
    if data is None:
        return reading
    try:
        reading.documents.append(portable.validate(portable.upgrade(data)))
    except InvalidDocument as e:
        reading.problems.append(Problem(str(path), str(e)))
    return reading
