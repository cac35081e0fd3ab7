"""Configuration: one validated ``Settings`` object, built once at start-up.

Precedence, lowest to highest: built-in defaults < TOML file < ``HANDOFF_*``
environment variables (nested with ``__``, e.g. ``HANDOFF_SERVER__PORT``) < CLI flags.
The TOML file is ``--config PATH``, else ``$HANDOFF_CONFIG``, else
``config.toml`` in the user config directory (skipped if absent). A bad file fails
at load with a :class:`ConfigError` that names the key and the problem.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

APP_NAME = "handoff"


class ConfigError(Exception):
    """The configuration is invalid; the message names the key and what to do."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(8787, ge=0, le=65535)
    access_key: str = ""
    """Required to bind a non-loopback address; clients send it in ``x-handoff-key``."""
    allowed_hosts: list[str] = Field(default_factory=list)
    """Names (``name``, or ``name:port`` for one port) clients reach handoff by, besides
    localhost, 127.0.0.1, [::1] and ``host``; any other ``Host`` is refused, so a web page
    cannot reach handoff through a DNS name it points at this machine."""
    allowed_origins: list[str] = Field(default_factory=list)
    """Web origins (``scheme://host[:port]``) whose pages may call handoff from a browser;
    requests a browser sends for any other page are refused."""
    max_body_bytes: int = Field(64 * 1024 * 1024, gt=0)
    max_answer_bytes: int = Field(8 * 1024 * 1024, gt=0)
    """A non-streamed answer up to this size is read whole (kept for the store, inspected
    for a context-length error); a larger one is relayed as it arrives, and the store
    notes its size instead of keeping it."""
    history_cache_bytes: int = Field(16 * 1024 * 1024, ge=0)
    """Recent large request bodies kept with their parsed messages, and the token counts of
    their conversations' latest turns, so a history resent next turn is not parsed and
    counted again: up to this many bytes of bodies for each (their parse takes several
    times it). 0 turns reuse off."""
    log_format: Literal["console", "json"] = "console"
    log_content: bool = False
    """Debug only: include message content in logs."""
    shutdown_grace_s: float = Field(10.0, ge=0)
    header_timeout_s: float = Field(10.0, gt=0)
    """The longest a client may take to send a request's line and headers, counted from
    when it connects or starts sending that request; then the connection is closed."""
    body_timeout_s: float = Field(30.0, gt=0)
    """The longest silence while a client sends a request body; then the connection is
    closed. Only the client's sending is timed, never a response, however long it streams."""
    max_connections: int | None = Field(None, gt=0)
    """Client connections open at once; more are answered 503 and closed at once. Unset:
    1024, or fewer if the open-file limit cannot hold them (two descriptors a connection:
    its own and an upstream's)."""

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, v: list[str]) -> list[str]:
        for h in v:
            if not h or "/" in h or h != h.strip():
                raise ValueError(
                    f"{h!r} is not a host name: give a name or name:port, e.g. box.lan"
                )
        return v

    @field_validator("allowed_origins")
    @classmethod
    def _origins(cls, v: list[str]) -> list[str]:
        for o in v:
            scheme, sep, rest = o.partition("://")
            if scheme not in ("http", "https") or not sep or not rest or "/" in rest:
                raise ValueError(
                    f"{o!r} is not a web origin: give scheme://host[:port] with no path,"
                    " e.g. http://localhost:3000"
                )
        return [o.lower() for o in v]


class TimeoutSettings(_Section):
    connect_s: float = Field(10.0, gt=0)
    read_s: float = Field(300.0, gt=0)
    """Idle read: the longest silence between two reads from the upstream."""


class UpstreamSettings(_Section):
    name: str
    base_url: str
    models: list[str] = Field(default_factory=lambda: ["*"])
    api_key_env: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    compress: bool = True
    """False: never rewrite requests routed here; only record them."""
    ca_bundle: str | None = None
    kind: Literal["openai", "anthropic"] = "openai"
    """The wire formats it speaks: OpenAI's (Chat Completions…) or Anthropic Messages."""
    discover: bool | None = None
    """Ask it for windows at start-up (with ``tokens.discover``): true, false, or unset
    for GET /v1/models, plus a local server's own endpoints unless it is a hosted API."""

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if not v.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://, e.g. https://api.openai.com/v1")
        return v.rstrip("/")


class ModelOverride(_Section):
    context_window: int | None = Field(None, gt=0)
    max_output_tokens: int | None = Field(None, gt=0)
    tokenizer: str | None = None
    """A tiktoken encoding name (o200k_base, cl100k_base…) or ``estimate``."""
    margin: float | None = Field(None, ge=0, lt=1)


class TokenSettings(_Section):
    default_context_window: int | None = Field(None, gt=0)
    """Window assumed for models nobody knows; unset means pass them through untouched."""
    default_max_output_tokens: int = Field(4096, gt=0)
    """Output reserved when the request names no max_tokens (capped by the model's own)."""
    margin: float = Field(0.02, ge=0, lt=1)
    """Safety margin, as a fraction of the window, for exact counts."""
    approx_margin: float = Field(0.10, ge=0, lt=1)
    """Safety margin for approximate counts (non-OpenAI tokenizers)."""
    cache_size: int = Field(200_000, ge=0)
    """Per-message token counts kept in memory (by content hash)."""
    discover: bool = True
    """Ask upstreams' GET /v1/models for context windows."""


class ElideSettings(_Section):
    keep: int = Field(3, ge=0)
    """The newest tool results that stay whole until nothing else is left to give up."""


class SummarizeSettings(_Section):
    enabled: bool = False
    model: str | None = None
    """Summarizer model; default: the largest-window model the conversation used on
    this route (one that can read what it summarizes)."""
    upstream: str | None = None
    """Name of an [[upstreams]] entry; default: the request's own upstream."""
    timeout_s: float = Field(30.0, gt=0)
    max_tokens: int = Field(1024, gt=0)


class CompressionSettings(_Section):
    enabled: bool = True
    chain: list[str] = Field(
        default_factory=lambda: [
            "elide-tool-results",
            "elide-arguments",
            "trim-pastes",
            "trim-prose",
            "summarize",
            "truncate",
        ]
    )
    low_water: float | Literal["auto"] = "auto"
    """When a cut must move, it moves until the prompt fills this share of the budget,
    so the turns after it fit without moving it again (prompt caches keep hitting).
    "auto": 0.5 for budgets up to 4k tokens, 0.6 to 16k, 0.7 to 64k, 0.8 above."""

    @field_validator("low_water")
    @classmethod
    def _share(cls, v: float | str) -> float | str:
        if v != "auto" and not 0 < float(v) <= 1:
            raise ValueError('must be "auto" or a share of the budget in (0, 1], e.g. 0.7')
        return v

    elide: ElideSettings = Field(default_factory=ElideSettings)
    summarize: SummarizeSettings = Field(default_factory=SummarizeSettings)
    strict_max_tokens: bool = False
    """True: a client's max_tokens / max_completion_tokens is never lowered to fit the
    window (the request is refused instead); false lowers it and says so in the
    x-handoff-max-tokens response header."""


class StoreSettings(_Section):
    enabled: bool = True
    path: str | None = None
    required: bool = False
    """True: answer 503 when the store cannot write, instead of serving unrecorded."""
    redact: bool = False
    keep_raw_sse: bool = False
    max_bytes: int | None = Field(None, gt=0)
    session_from_body: bool = False
    """Also take a conversation id from metadata.session_id or user in the body."""
    flush_interval_s: float = Field(0.2, gt=0, le=1.0)
    writer: Literal["auto", "process", "thread"] = "auto"
    """Where the SQLite writer runs: a child process (off the proxy's GIL: snapshots then
    cost the event loop almost nothing), a thread, or auto: a process when this process
    may use more than one CPU."""
    max_lag_s: float = Field(0.4, ge=0, lt=1.0)
    """Hold new chat requests while the oldest turn not yet on disk is older than this,
    so a completed turn is on disk within a second even when clients saturate the
    proxy (``store_gate``). 0: never hold; a writer outpaced by the clients then
    falls behind until the load eases."""
    max_hold_s: float = Field(2.0, gt=0)
    """The longest a request waits for the writer; past it the writer is taken for
    stalled and requests go on (recorded late, or counted as failed)."""


START_OVER = ["/new", "new session", "start again", "start over", "continue the previous work",
              "新会话", "重新开始", "继续之前的工作"]  # fmt: skip
REMEMBER = ["remember this", "remember", "save", "记住", "保存"]


class MemorySettings(_Section):
    enabled: bool = True
    every_turns: int = Field(8, gt=0)
    """A session's memory is written at this many user turns, then each time they double."""
    remember_phrases: list[str] = Field(default_factory=lambda: list(REMEMBER))
    """A user message starting with one of these writes the memory now."""


class RecallSettings(_Section):
    enabled: bool = True
    phrases: list[str] = Field(default_factory=lambda: list(START_OVER))
    """A new conversation whose only user message starts with one of these recalls."""
    max_tokens: int = Field(1500, gt=0)
    max_share: float = Field(0.25, gt=0, le=0.9)
    """Never more than this share of the model's prompt budget."""
    memories: int = Field(3, gt=0, le=20)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="HANDOFF_", env_nested_delimiter="__", extra="forbid"
    )

    server: ServerSettings = Field(default_factory=ServerSettings)
    timeouts: TimeoutSettings = Field(default_factory=TimeoutSettings)
    upstreams: list[UpstreamSettings] = Field(default_factory=list)
    models: dict[str, ModelOverride] = Field(default_factory=dict)
    tokens: TokenSettings = Field(default_factory=TokenSettings)
    compression: CompressionSettings = Field(default_factory=CompressionSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    recall: RecallSettings = Field(default_factory=RecallSettings)

    _toml_file: ClassVar[Path | None] = None

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.server.access_key == "" and not _is_loopback(self.server.host):
            raise ValueError(
                f"server.host = {self.server.host!r} is not a loopback address: "
                "set server.access_key so that only your clients can use the proxy"
            )
        names = [u.name for u in self.upstreams]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"upstreams: duplicate name(s) {sorted(dup)}")
        if self.compression.summarize.upstream and self.compression.summarize.upstream not in names:
            raise ValueError(
                f"compression.summarize.upstream = {self.compression.summarize.upstream!r} "
                f"names no [[upstreams]] entry (have {names})"
            )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        if cls._toml_file is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=cls._toml_file))
        return tuple(sources)

    def store_path(self) -> Path:
        if self.store.path:
            return Path(self.store.path).expanduser()
        return Path(platformdirs.user_data_dir(APP_NAME)) / "handoff.db"


def default_config_path() -> Path:
    return Path(platformdirs.user_config_dir(APP_NAME)) / "config.toml"


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _toml_path(explicit: str | Path | None, env: Mapping[str, str]) -> Path | None:
    if explicit:
        path = Path(explicit).expanduser()
    elif env.get("HANDOFF_CONFIG"):
        path = Path(env["HANDOFF_CONFIG"]).expanduser()
    else:
        path = default_config_path()
        return path if path.is_file() else None
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist (from --config or HANDOFF_CONFIG)")
    return path


def load_settings(
    config: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Build settings from file, environment and ``overrides`` (CLI flags, nested dicts)."""
    env = os.environ if env is None else env
    path = _toml_path(config, env)
    if path is not None:
        try:
            with path.open("rb") as f:
                tomllib.load(f)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{path}: not valid TOML: {e}") from None
    Settings._toml_file = path
    try:
        return Settings(**dict(overrides or {}))
    except ValidationError as e:
        raise ConfigError(_describe(e, path)) from None
    finally:
        Settings._toml_file = None


def _describe(err: ValidationError, path: Path | None) -> str:
    where = f" in {path}" if path else ""
    lines = [f"invalid configuration{where}:"]
    for item in err.errors():
        key = ".".join(str(p) for p in item["loc"]) or "(top level)"
        msg = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            msg = "unknown key (see config.example.toml for the valid ones)"
        lines.append(f"  {key}: {msg}")
    return "\n".join(lines)
