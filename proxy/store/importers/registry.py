"""The importers by kind, in the order detection tries them (the most particular first)."""

from __future__ import annotations

from pathlib import Path

from proxy.store.importers import chatgpt, claude_code, codex, messages_json, portable_file
from proxy.store.importers.base import Importer

IMPORTERS: dict[str, Importer] = {
    i.kind: i
    for i in (
        Importer(portable_file.KIND, portable_file.detect, portable_file.read),
        Importer(codex.KIND, codex.detect, codex.read),
        Importer(claude_code.KIND, claude_code.detect, claude_code.read),
        Importer(chatgpt.KIND, chatgpt.detect, chatgpt.read),
        Importer("anthropic", messages_json.detect_anthropic, messages_json.read_anthropic),
        Importer("openai", messages_json.detect_openai, messages_json.read_openai),
    )
}
KINDS = tuple(IMPORTERS)
HEAD_BYTES = 65_536
SUFFIXES = (".json", ".jsonl")


def head(path: Path) -> bytes:
    with path.open("rb") as f:
        return f.read(HEAD_BYTES)


def detect(path: Path, kinds: tuple[str, ...] = KINDS) -> Importer | None:
    """The first of ``kinds`` whose detector accepts the file, else None."""
    start = head(path)
    return next((IMPORTERS[k] for k in kinds if IMPORTERS[k].detect(path, start)), None)


def candidates(root: Path) -> list[Path]:
    """``root`` if it is a file, else the JSON and JSON Lines files under it, sorted."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.suffix in SUFFIXES and p.is_file())
