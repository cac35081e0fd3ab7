"""Fit a conversation to a model's window with the proxy's own decision engine, built
from the configuration as the proxy builds it (windows, budget, policy chain, the
store's calibration), so a resumed history is what the proxy would have sent."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp
import orjson

from proxy.config import Settings
from proxy.decide.plan import Plan
from proxy.errors import NoRoute
from proxy.ingress.chat_completions import parse_chat
from proxy.server.build import build_engine
from proxy.upstream.routing import Router, Upstream, build_upstreams


async def fit(
    settings: Settings,
    model: str,
    messages: Sequence[Mapping[str, Any]],
    calibration: Mapping[str, Any],
) -> Plan:
    """The engine's plan for ``messages`` sent to ``model``. Summaries, when the config
    turns them on, are asked of the configured upstream as the proxy would ask."""
    router = Router(build_upstreams(settings))
    engine = build_engine(settings, router)
    engine.calibration.load(calibration)
    try:
        up = router.route(model)
    except NoRoute:  # no route needed to fit: the window is the model's
        up = Upstream(name="resume", base_url="http://127.0.0.1", patterns=("*",))
    req = parse_chat(orjson.dumps({"model": model, "messages": list(messages)}))
    summarize = settings.compression.summarize.enabled
    sessions = [_open(u) for u in router.upstreams] if summarize else []
    try:
        return await engine.plan(req, up, client="resume")
    finally:
        engine.close()
        await asyncio.gather(*(s.close() for s in sessions))
        for u in router.upstreams:
            u.session = None


def _open(up: Upstream) -> aiohttp.ClientSession:
    up.session = aiohttp.ClientSession()
    return up.session


def dropped(
    history: Sequence[Mapping[str, Any]], sent: Sequence[Mapping[str, Any]]
) -> tuple[list[int], list[Mapping[str, Any]]]:
    """The history's indices missing from ``sent`` (matched in order), and the
    messages ``sent`` holds that the history does not (notes, rewritten messages)."""
    gone: list[int] = []
    new: list[Mapping[str, Any]] = []
    i = 0
    for m in sent:
        j = i
        while j < len(history) and history[j] != m:
            j += 1
        if j == len(history):
            new.append(m)
            continue
        gone.extend(range(i, j))
        i = j + 1
    gone.extend(range(i, len(history)))
    return gone, new
