"""Windows that local model servers run with, asked from their own endpoints.

``GET /v1/models`` tells a trained window at best (llama.cpp's ``meta.n_ctx_train``),
not the one the server was started with, which is what a prompt must fit:

- llama.cpp server: ``GET /props``, ``default_generation_settings.n_ctx`` (per slot),
  else ``n_ctx``; for every model it lists, its alias and its file's name.
- LM Studio: ``GET /api/v0/models``, ``loaded_context_length`` (the loaded model's),
  else ``max_context_length``.
- Ollama (``GET /api/version`` answers): ``POST /api/show`` per model, the
  ``num_ctx`` its Modelfile sets (``parameters``), else the smaller of its trained
  ``model_info["<arch>.context_length"]`` and Ollama's default ``num_ctx``: its
  OpenAI-compatible API cannot ask for more per request.
- llama-cpp-python reports none: its window is learned from its first overflow error
  (:mod:`proxy.decide.windows.learned`).

The server's root is ``base_url`` without its ``/v1``. A server that is none of these
answers 404 to each probe, once, at start-up; hosted APIs (:data:`HOSTED`) are not
probed at all unless the upstream sets ``discover = true``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import aiohttp
from yarl import URL

from proxy.decide.windows.discovery import fetch_json, parse_models_listing

OLLAMA_DEFAULT_NUM_CTX = 4096
"""The window Ollama gives a model whose Modelfile sets no ``num_ctx`` (OLLAMA_CONTEXT_LENGTH's
default since 0.6); a server started with more needs a ``[models]`` entry."""

MAX_SHOWN = 64
"""Ollama models asked about, at most (one request each)."""

HOSTED = (
    "api.openai.com", "openai.azure.com", "api.anthropic.com", "openrouter.ai",
    "googleapis.com", "api.groq.com", "api.mistral.ai", "api.deepseek.com",
    "api.together.xyz", "api.fireworks.ai", "api.x.ai", "api.cohere.ai", "api.cohere.com",
    "api.perplexity.ai", "dashscope.aliyuncs.com", "api.moonshot.ai", "api.cerebras.ai",
    "amazonaws.com", "inference.ai.azure.com", "api.deepinfra.com",
)  # fmt: skip
"""Hosts (and their subdomains) of hosted APIs: no llama.cpp, LM Studio or Ollama
behind them, so their windows come from /v1/models and the built-in table only."""

_NUM_CTX = re.compile(r"^\s*num_ctx\s+(\d+)\s*$", re.M)


def probe_server(base_url: str, discover: bool | None) -> bool:
    """Ask the server behind ``base_url`` its own endpoints for windows? As configured,
    else unless its host is a hosted API's."""
    if discover is not None:
        return discover
    host = (URL(base_url).host or "").lower().rstrip(".")
    return not any(host == h or host.endswith("." + h) for h in HOSTED)


def server_root(base_url: str) -> str:
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


async def fetch_server_windows(
    session: aiohttp.ClientSession,
    base_url: str,
    headers: Mapping[str, str],
    timeout_s: float,
    listed: Iterable[str],
) -> tuple[dict[str, int], str | None]:
    """The windows the server behind ``base_url`` runs its models with, and which kind
    of server said so (None: none of those it knows)."""
    root, ids = server_root(base_url), list(dict.fromkeys(listed))
    props = await fetch_json(session, root + "/props", headers, timeout_s)
    if (n_ctx := llamacpp_n_ctx(props)) is not None:
        return dict.fromkeys([*ids, *llamacpp_names(props)], n_ctx), "llama.cpp"
    lmstudio = await fetch_json(session, root + "/api/v0/models", headers, timeout_s)
    if windows := parse_models_listing(lmstudio):
        return windows, "lmstudio"
    version = await fetch_json(session, root + "/api/version", headers, timeout_s)
    if not (isinstance(version, Mapping) and "version" in version):
        return {}, None
    tags = await fetch_json(session, root + "/api/tags", headers, timeout_s)
    names = list(dict.fromkeys([*ids, *_ollama_tags(tags)]))[:MAX_SHOWN]
    out: dict[str, int] = {}
    for name in names:
        shown = await fetch_json(session, root + "/api/show", headers, timeout_s, {"model": name})
        if (window := ollama_window(shown)) is not None:
            out[name] = window
    return out, "ollama"


def llamacpp_n_ctx(props: Any) -> int | None:
    """llama.cpp's per-slot window from ``/props``, or None if this is not that."""
    if not isinstance(props, Mapping):
        return None
    settings = props.get("default_generation_settings")
    for value in (
        settings.get("n_ctx") if isinstance(settings, Mapping) else None,
        props.get("n_ctx"),
    ):
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def llamacpp_names(props: Mapping[str, Any]) -> list[str]:
    """The names a llama.cpp server may be asked by: its alias, its model file's name."""
    names = [props.get("model_alias")]
    path = props.get("model_path")
    if isinstance(path, str) and path:
        base = re.split(r"[\\/]", path)[-1]
        names += [base, base.removesuffix(".gguf")]
    return [n for n in names if isinstance(n, str) and n]


def ollama_window(shown: Any) -> int | None:
    """An Ollama model's window from ``/api/show``: its Modelfile's ``num_ctx``, else
    its trained length capped by Ollama's default ``num_ctx``."""
    if not isinstance(shown, Mapping):
        return None
    params = shown.get("parameters")
    if isinstance(params, str) and (m := _NUM_CTX.search(params)):
        return int(m.group(1))
    info = shown.get("model_info")
    if not isinstance(info, Mapping):
        return None
    trained = [
        v
        for k, v in info.items()
        if str(k).endswith(".context_length") and isinstance(v, int) and not isinstance(v, bool)
    ]
    return min(max(trained), OLLAMA_DEFAULT_NUM_CTX) if trained else None


def _ollama_tags(tags: Any) -> list[str]:
    models = tags.get("models") if isinstance(tags, Mapping) else None
    if not isinstance(models, list):
        return []
    names = (m.get("name", m.get("model")) for m in models if isinstance(m, Mapping))
    return [n for n in names if isinstance(n, str) and n]
