"""Model windows: built-in matching rules, config overrides, upstream discovery."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.config import ModelOverride
from proxy.decide.windows import WindowRegistry, fetch_model_windows, parse_models_listing
from proxy.decide.windows.local_servers import (
    OLLAMA_DEFAULT_NUM_CTX,
    fetch_server_windows,
    ollama_window,
    probe_server,
)
from proxy.decide.windows.matching import candidates
from tests.fake_upstream import FakeUpstream


@pytest.fixture(scope="module")
def reg() -> WindowRegistry:
    return WindowRegistry()


@pytest.mark.parametrize(
    ("name", "matched", "window"),
    [
        ("gpt-4o", "gpt-4o", 128_000),
        ("gpt-4.1", "gpt-4.1", 1_047_576),
        ("gpt-4o-2024-08-06", "gpt-4o", 128_000),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5", 200_000),
        ("mistral-large-latest", "mistral-large", 131_072),
        ("gpt-4-0613", "gpt-4", 8192),
        ("openai/gpt-4o", "gpt-4o", 128_000),
        ("anthropic/claude-sonnet-4.5", "claude-sonnet-4.5", 200_000),
        ("ollama/llama3.1", "llama3.1", 131_072),
        ("llama3.1:8b", "llama3.1", 131_072),
        ("qwen2.5:14b-instruct", "qwen2.5", 32_768),
        ("qwen2.5-coder:32b", "qwen2.5-coder", 32_768),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3.1", 131_072),
        ("us.anthropic.claude-3-5-sonnet-20240620-v1:0", "claude-3-5-sonnet", 200_000),
        ("claude-3-5-sonnet@20240620", "claude-3-5-sonnet", 200_000),
        ("models/gemini-2.5-pro", "gemini-2.5-pro", 1_048_576),
        ("deepseek-chat", "deepseek-chat", 128_000),
        ("kimi-k2-0905-preview", "kimi-k2-0905", 262_144),
        ("glm-4.6", "glm-4.6", 200_000),
        ("gpt-oss:120b", "gpt-oss:120b", 131_072),
        ("o3-mini-high", "o3-mini", 200_000),
    ],
)
def test_builtin_matching_rules(reg: WindowRegistry, name: str, matched: str, window: int) -> None:
    """Exact names, suffixes, provider prefixes and Ollama tags find the right entry."""
    info = reg.lookup(name)
    assert info is not None
    assert (info.matched, info.context_window, info.source) == (matched, window, "builtin")
    assert info.name == name


def test_specific_entry_beats_general(reg: WindowRegistry) -> None:
    """A dated entry of its own wins over the family entry it would also match."""
    dated = reg.lookup("gpt-4o-2024-05-13")
    assert dated is not None and dated.matched == "gpt-4o-2024-05-13"
    assert dated.max_output_tokens == 4096
    general = reg.lookup("gpt-4o-2024-11-20")
    assert general is not None and general.max_output_tokens == 16_384


def test_prefix_needs_separator(reg: WindowRegistry) -> None:
    """'gpt-4o' never falls back to 'gpt-4', and 'gpt-4o-mini' beats 'gpt-4o'."""
    assert reg.lookup("gpt-4o") is not None
    assert reg.lookup("gpt-4o").matched == "gpt-4o"  # type: ignore[union-attr]
    assert reg.lookup("gpt-4o-mini-2024-07-18").matched == "gpt-4o-mini"  # type: ignore[union-attr]
    assert reg.lookup("gpt-4x") is None


def test_unknown_model_is_none_unless_default(reg: WindowRegistry) -> None:
    """Unknown models give None, or the configured default window."""
    assert reg.lookup("totally-new-model") is None
    info = WindowRegistry(default_context_window=50_000).lookup("totally-new-model")
    assert info is not None
    assert (info.context_window, info.source) == (50_000, "default")


def test_explain_names_rule_and_source(reg: WindowRegistry) -> None:
    """explain() says which steps reduced the name and where the figure came from."""
    text = reg.explain("openai/gpt-4o-2024-08-06")
    assert "provider prefix 'openai/' removed" in text
    assert "'-2024-08-06' removed" in text
    assert "platform.openai.com" in text
    assert "unknown model" in reg.explain("nope-1")


def test_candidates_order() -> None:
    """Reduced forms go from literal to most reduced."""
    names = [c.name for c in candidates("ollama/qwen2.5:14b-instruct")]
    assert names == ["ollama/qwen2.5:14b-instruct", "qwen2.5:14b-instruct", "qwen2.5"]


def test_config_override_beats_builtin_and_globs() -> None:
    """A literal override beats a glob; globs match reduced forms; fields merge."""
    reg = WindowRegistry(
        {
            "llama3*": ModelOverride(context_window=8192, tokenizer="cl100k_base"),
            "llama3.1:70b": ModelOverride(context_window=65_536),
            "gpt-4o": ModelOverride(max_output_tokens=1000, margin=0.2),
        }
    )
    a = reg.lookup("llama3.1:8b")
    assert a is not None
    assert (a.context_window, a.source, a.matched, a.tokenizer) == (
        8192,
        "config",
        "llama3*",
        "cl100k_base",
    )
    b = reg.lookup("ollama/llama3.1:70b")
    assert b is not None
    assert (b.context_window, b.matched, b.tokenizer) == (65_536, "llama3.1:70b", "cl100k_base")
    c = reg.lookup("gpt-4o")
    assert c is not None
    assert (c.context_window, c.max_output_tokens, c.source) == (128_000, 1000, "builtin")
    ov = reg.override_for("gpt-4o")
    assert ov is not None and ov.margin == 0.2
    assert "config" in reg.explain("llama3.1:8b")


def test_discovered_beats_builtin_config_beats_discovered() -> None:
    """Discovery overrides built-ins; config overrides discovery."""
    reg = WindowRegistry({"big": ModelOverride(context_window=1000)})
    reg.learn("local", {"llama3.1:8b": 16_384, "big": 99_999, "mystery": 4096})
    a = reg.lookup("llama3.1:8b")
    assert a is not None
    assert (a.context_window, a.source) == (16_384, "discovered:local")
    # The built-in 131,072 is no figure for a 16k window: a quarter of it instead.
    assert a.max_output_tokens == 4096
    assert reg.lookup("big").context_window == 1000  # type: ignore[union-attr]
    m = reg.lookup("mystery")
    assert m is not None and (m.context_window, m.max_output_tokens) == (4096, 1024)  # a quarter
    assert "beats the built-in" in reg.explain("llama3.1:8b")


def test_discovery_per_upstream_and_smallest_wins() -> None:
    """With no upstream named, the smallest reported window is used."""
    reg = WindowRegistry()
    reg.learn("a", {"m": 8000})
    reg.learn("b", {"m": 32_000})
    assert reg.lookup("m").context_window == 8000  # type: ignore[union-attr]
    assert reg.lookup("m", upstream="b").context_window == 32_000  # type: ignore[union-attr]
    assert reg.lookup("m", upstream="c") is None


def test_entries_lists_builtin_discovered_config() -> None:
    """entries() has every built-in name plus discovered and configured windows."""
    reg = WindowRegistry({"my-model": ModelOverride(context_window=1234)})
    reg.learn("up", {"served": 777})
    by_name = {e.name: e for e in reg.entries()}
    assert by_name["gpt-5"].context_window == 400_000
    assert by_name["my-model"].source == "config"
    assert by_name["served"].source == "discovered:up"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"data": [{"id": "m", "max_model_len": 32_768}]}, {"m": 32_768}),
        ({"data": [{"id": "x/m", "context_length": 200_000}]}, {"x/m": 200_000}),
        ({"data": [{"id": "m", "top_provider": {"context_length": 9}}]}, {"m": 9}),
        ({"data": [{"id": "m", "context_window": 131_072}]}, {"m": 131_072}),
        (
            {"data": [{"id": "m", "max_context_length": 8, "loaded_context_length": 4}]},
            {"m": 4},
        ),
        ({"models": [{"name": "models/g", "inputTokenLimit": 1_048_576}]}, {"models/g": 1_048_576}),
        ([{"id": "t", "context_length": 5}], {"t": 5}),
        ({"data": [{"id": "m", "meta": {"n_ctx_train": 4096}}]}, {"m": 4096}),
        ({"data": [{"id": "m"}, {"id": "z", "max_model_len": True}, "junk"]}, {}),
        ("not a listing", {}),
        ({"data": "nope"}, {}),
    ],
)
def test_parse_models_listing(body: Any, expected: dict[str, int]) -> None:
    """Every documented window field is read; junk gives {}."""
    assert parse_models_listing(body) == expected


async def test_fetch_from_fake_upstream(aiohttp_server: Any) -> None:
    """Windows listed by a vLLM-style upstream are fetched and then used."""
    fake = FakeUpstream(model_list_extras=("max_model_len",))
    server = await aiohttp_server(fake.app(), host="127.0.0.1")
    async with aiohttp.ClientSession() as session:
        windows = await fetch_model_windows(session, str(server.make_url("/v1")), {}, 5.0)
    assert windows["small-8k"] == 8192 and windows["big-1m"] == 1_000_000
    reg = WindowRegistry()
    reg.learn("fake", windows)
    assert reg.lookup("small-8k").source == "discovered:fake"  # type: ignore[union-attr]


async def test_fetch_never_raises(aiohttp_server: Any) -> None:
    """Errors, non-JSON bodies and closed ports all give {}."""

    async def broken(request: web.Request) -> web.Response:
        return web.Response(text="<html>", status=200)

    async def missing(request: web.Request) -> web.Response:
        return web.Response(status=404)

    app = web.Application()
    app.router.add_get("/a/models", broken)
    app.router.add_get("/b/models", missing)
    server = await aiohttp_server(app, host="127.0.0.1")
    base = f"http://127.0.0.1:{server.port}"
    async with aiohttp.ClientSession() as session:
        assert await fetch_model_windows(session, base + "/a", {}, 2.0) == {}
        assert await fetch_model_windows(session, base + "/b", {}, 2.0) == {}
        assert await fetch_model_windows(session, "http://127.0.0.1:9/v1", {}, 2.0) == {}


def test_a_learned_limit_beats_the_window_it_refused_until_a_larger_one_appears() -> None:
    """An upstream that refused a configured 32k window naming 8192: 8192 is used (and
    snapshots round-trip); a config raised past 32k later wins again."""
    reg = WindowRegistry({"m": ModelOverride(context_window=32_768)})
    assert reg.learn_limit("m", "u", 8192) is True
    assert reg.learn_limit("m", "u", 9000) is False  # not news: larger than what is known
    info = reg.lookup("m", "u")
    assert info is not None and (info.context_window, info.source) == (8192, "learned:u")
    assert info.max_output_tokens == 2048  # a quarter: the config names no output
    assert (
        reg.lookup("m", "other") is not None and reg.lookup("m", "other").context_window == 32_768
    )  # type: ignore[union-attr]
    later = WindowRegistry({"m": ModelOverride(context_window=65_536)})
    assert later.limits.load(reg.limits.snapshot()) == 1
    assert later.lookup("m", "u").context_window == 65_536  # type: ignore[union-attr]
    same = WindowRegistry({"m": ModelOverride(context_window=32_768)})
    same.limits.load(reg.limits.snapshot())
    assert same.lookup("m", "u").context_window == 8192  # type: ignore[union-attr]
    unknown = WindowRegistry()
    assert unknown.lookup("local", "u") is None
    assert unknown.learn_limit("local", "u", 2048)
    assert unknown.lookup("local", "u").context_window == 2048  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("kind", "expected"),
    [("llamacpp", "llama.cpp"), ("ollama", "ollama"), ("lmstudio", "lmstudio")],
)
async def test_local_servers_report_the_window_they_run_with(
    aiohttp_server: Any, kind: Any, expected: str
) -> None:
    """llama.cpp's /props n_ctx, Ollama's /api/show num_ctx (not its 131,072 trained
    length), LM Studio's loaded_context_length (not its max): the window a prompt must fit."""
    fake = FakeUpstream(models={"local-a": 3072}, local_server=kind)
    server = await aiohttp_server(fake.app(), host="127.0.0.1")
    async with aiohttp.ClientSession() as session:
        windows, got = await fetch_server_windows(
            session, str(server.make_url("/v1")), {}, 5.0, ["local-a"]
        )
    assert got == expected
    assert windows["local-a"] == 3072
    if kind == "llamacpp":  # also by the model file's name
        assert windows["local-a.gguf"] == 3072


async def test_a_server_that_is_none_of_them_reports_nothing(aiohttp_server: Any) -> None:
    """An OpenAI-like upstream: each probe is a 404, and nothing is learned."""
    server = await aiohttp_server(FakeUpstream().app(), host="127.0.0.1")
    async with aiohttp.ClientSession() as session:
        assert await fetch_server_windows(
            session, str(server.make_url("/v1")), {}, 5.0, ["gpt-4o"]
        ) == ({}, None)


def test_ollama_window_without_num_ctx_is_capped_by_its_default() -> None:
    """No num_ctx in the Modelfile: Ollama runs the model at its default, not 131,072."""
    shown = {"parameters": 'stop "x"', "model_info": {"llama.context_length": 131072}}
    assert ollama_window(shown) == OLLAMA_DEFAULT_NUM_CTX
    assert ollama_window({"model_info": {"qwen2.context_length": 2048}}) == 2048
    assert ollama_window({"parameters": "num_ctx 16384"}) == 16384
    assert ollama_window("nope") is None


@pytest.mark.parametrize(
    ("base_url", "discover", "probed"),
    [
        ("https://api.openai.com/v1", None, False),
        ("https://my-team.openai.azure.com/openai/v1", None, False),
        ("https://API.Anthropic.com./v1", None, False),
        ("https://openrouter.ai/api/v1", None, False),
        ("https://api.openai.com/v1", True, True),
        ("http://127.0.0.1:8080/v1", None, True),
        ("http://gpu01.corp.example.com:8000/v1", None, True),
        ("http://notapi.openai.com.example.net/v1", None, True),
        ("http://127.0.0.1:8080/v1", False, False),
    ],
)
def test_local_server_endpoints_are_asked_unless_hosted_or_configured_off(
    base_url: str, discover: bool | None, probed: bool
) -> None:
    assert probe_server(base_url, discover) is probed
