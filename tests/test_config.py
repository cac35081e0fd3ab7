"""Configuration: precedence, validation messages, and the example file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from pydantic import BaseModel

from proxy.config import ConfigError, Settings, load_settings

ROOT = Path(__file__).resolve().parent.parent


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_precedence_file_env_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A flag beats HANDOFF_* env, which beats the file, which beats the default."""
    path = _write(tmp_path, "[server]\nport = 9001\nlog_format = 'json'\nmax_body_bytes = 10\n")
    monkeypatch.setenv("HANDOFF_SERVER__PORT", "9002")
    monkeypatch.setenv("HANDOFF_SERVER__MAX_BODY_BYTES", "20")
    s = load_settings(path, {"server": {"port": 9003}})
    assert s.server.port == 9003  # flag
    assert s.server.max_body_bytes == 20  # env over file
    assert s.server.log_format == "json"  # file over default
    assert s.server.host == "127.0.0.1"  # default


def test_handoff_config_env_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HANDOFF_CONFIG points at the file when --config is not given."""
    path = _write(tmp_path, "[server]\nport = 9100\n")
    monkeypatch.setenv("HANDOFF_CONFIG", str(path))
    assert load_settings().server.port == 9100


def test_missing_explicit_file_fails(tmp_path: Path) -> None:
    """A --config path that does not exist is an error, not silently skipped."""
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings(tmp_path / "nope.toml")


def test_bad_values_name_the_key(tmp_path: Path) -> None:
    """Each bad key is named with its dotted path and the problem."""
    path = _write(
        tmp_path,
        "[server]\nport = 'high'\nlisten = 1\n[[upstreams]]\nname = 'x'\nbase_url = 'ftp://h'\n",
    )
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    text = str(info.value)
    assert "server.port" in text
    assert "server.listen: unknown key" in text
    assert "upstreams.0.base_url: must start with http://" in text


def test_invalid_toml_is_reported(tmp_path: Path) -> None:
    """A syntax error names the file."""
    path = _write(tmp_path, "[server\nport = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(path)


def test_public_bind_requires_access_key() -> None:
    """Binding beyond loopback without server.access_key is refused."""
    with pytest.raises(ConfigError, match="access_key"):
        load_settings(None, {"server": {"host": "0.0.0.0"}}, env={})
    assert load_settings(None, {"server": {"host": "0.0.0.0", "access_key": "k"}}, env={})


def _keys(model: type[BaseModel], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for name, field in model.model_fields.items():
        ann: Any = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            out |= _keys(ann, f"{prefix}{name}.")
        else:
            out.add(f"{prefix}{name}")
    return out


def test_example_config_loads_and_shows_every_key() -> None:
    """config.example.toml is valid and mentions every settings key."""
    example = ROOT / "config.example.toml"
    settings = load_settings(example, env={})
    assert [u.name for u in settings.upstreams] == ["openai", "ollama", "anthropic"]
    text = example.read_text()
    missing = [k for k in _keys(Settings) if k.rsplit(".", 1)[-1] not in text]
    assert not missing, f"config.example.toml does not show: {missing}"


def test_config_flag_after_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`handoff models NAME --config X` reads X, as `handoff --config X models NAME` does."""
    from proxy.cli.main import main

    path = _write(tmp_path, '[models."house-model"]\ncontext_window = 12345\n')
    for argv in (
        ["models", "house-model", "--config", str(path)],
        ["--config", str(path), "models", "house-model"],
    ):
        assert main(argv) == 0
        assert "12345" in capsys.readouterr().out
    assert main(["models", "house-model"]) == 1  # unknown without the file


def test_history_cache_bytes_sizes_both_reuse_caches(tmp_path: Path) -> None:
    """``server.history_cache_bytes`` bounds the resent bodies and the turn memos alike;
    0 turns reuse off: a resent history is then parsed whole again."""
    from proxy.ingress.chat_completions import parse_chat
    from proxy.server.app import ENGINE, create_app
    from proxy.server.services import SERVICES, history_cache

    path = _write(tmp_path, "[server]\nhistory_cache_bytes = 1048576\n[store]\nenabled = false\n")
    app = create_app(load_settings(path))
    assert app[SERVICES].bodies.max_bytes == 1 << 20
    assert app[ENGINE].memos.max_bytes == 1 << 20

    history: list[dict[str, Any]] = [{"role": "user", "content": "x" * 70_000}]
    first = orjson.dumps({"model": "m", "messages": history})
    resent = orjson.dumps({"model": "m", "messages": [*history, {"role": "user", "content": "y"}]})
    reused = {}
    for size in (16 << 20, 0):
        cache = history_cache(Settings(server={"history_cache_bytes": size}))
        parse_chat(first, cache)
        parse_chat(resent, cache)
        reused[size] = cache.reused_messages
    assert reused == {16 << 20: 1, 0: 0}
