"""Context windows that upstreams report in ``GET /v1/models``.

(A local server's own endpoints, which know the window it actually runs with, are
asked in :mod:`proxy.decide.windows.local_servers`.)

Fields read, first found wins per model (runtime limits before trained ones):

- LM Studio ``loaded_context_length`` (the loaded model's actual window)
- vLLM ``max_model_len``
- OpenRouter/Together ``context_length`` (also ``top_provider.context_length``)
- Groq ``context_window``
- LM Studio ``/api/v0`` and Mistral ``max_context_length``
- LiteLLM ``max_input_tokens`` (also under ``model_info``)
- Gemini ``inputTokenLimit``
- llama.cpp server ``meta.n_ctx_train``
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
import orjson
import structlog

_FIELDS: tuple[tuple[str, ...], ...] = (
    ("loaded_context_length",),
    ("max_model_len",),
    ("context_length",),
    ("top_provider", "context_length"),
    ("context_window",),
    ("max_context_length",),
    ("max_input_tokens",),
    ("model_info", "max_input_tokens"),
    ("inputTokenLimit",),
    ("input_token_limit",),
    ("meta", "n_ctx_train"),
)


def parse_models_listing(body: object) -> dict[str, int]:
    """Model id -> window from a models listing of any known shape; {} if none."""
    items = body.get("data", body.get("models", ())) if isinstance(body, Mapping) else body
    if not isinstance(items, list):
        return {}
    out: dict[str, int] = {}
    for item in items:
        if not isinstance(item, Mapping):
            continue
        model_id = item.get("id", item.get("name"))
        window = _window(item)
        if isinstance(model_id, str) and model_id and window is not None:
            out[model_id] = window
    return out


def _window(item: Mapping[str, Any]) -> int | None:
    for path in _FIELDS:
        value: Any = item
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            return int(value)
        if isinstance(value, str) and value.isdigit() and int(value) > 0:
            return int(value)
    return None


async def fetch_json(
    session: aiohttp.ClientSession,
    url: str,
    headers: Mapping[str, str],
    timeout_s: float,
    payload: object = None,
) -> Any:
    """GET ``url`` (POST ``payload`` when given) and parse it; None on any failure (a
    probe that finds nothing is logged, never raised)."""
    log = structlog.get_logger(__name__)
    method = "GET" if payload is None else "POST"
    try:
        async with session.request(
            method,
            url,
            headers=dict(headers),
            json=payload,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            if resp.status != 200:
                log.debug("window_probe_unavailable", url=url, status=resp.status)
                return None
            return orjson.loads(await resp.read())
    except (TimeoutError, aiohttp.ClientError, orjson.JSONDecodeError, ValueError) as e:
        log.debug("window_probe_unavailable", url=url, error=type(e).__name__)
        return None


async def fetch_model_windows(
    session: aiohttp.ClientSession,
    base_url: str,
    headers: Mapping[str, str],
    timeout_s: float,
) -> dict[str, int]:
    """GET ``{base_url}/models`` and parse it; never raises, {} on any failure."""
    windows, _ = await fetch_listing(session, base_url, headers, timeout_s)
    return windows


async def fetch_listing(
    session: aiohttp.ClientSession,
    base_url: str,
    headers: Mapping[str, str],
    timeout_s: float,
) -> tuple[dict[str, int], list[str]]:
    """The windows ``{base_url}/models`` lists, and every model id it lists."""
    url = base_url.rstrip("/") + "/models"
    body = await fetch_json(session, url, headers, timeout_s)
    if body is None:
        structlog.get_logger(__name__).info("models_listing_unavailable", url=url)
        return {}, []
    windows = parse_models_listing(body)
    structlog.get_logger(__name__).info("models_listing", url=url, models=len(windows))
    return windows, parse_model_ids(body)


def parse_model_ids(body: object) -> list[str]:
    """Every model id in a models listing of any known shape, in order."""
    items = body.get("data", body.get("models", ())) if isinstance(body, Mapping) else body
    if not isinstance(items, list):
        return []
    ids = (i.get("id", i.get("name")) for i in items if isinstance(i, Mapping))
    return [i for i in ids if isinstance(i, str) and i]
