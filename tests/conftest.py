"""Shared fixtures: real servers on loopback — the fake upstream and the proxy."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.app import create_app
from proxy.config import Settings
from tests.fixtures_upstream import fake_upstream, fake_upstream_factory  # noqa: F401


@dataclass
class ProxyHandle:
    server: TestServer
    app: web.Application

    @property
    def url(self) -> str:
        """Base URL for clients, as in OPENAI_BASE_URL."""
        return f"http://127.0.0.1:{self.server.port}/v1"

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.server.port}"


MakeProxy = Callable[..., Awaitable[ProxyHandle]]


@pytest.fixture
def make_proxy(aiohttp_server: Any) -> MakeProxy:
    """Start the real proxy app on loopback: ``await make_proxy(upstream_url, **settings)``."""

    async def go(
        catch_all: str | None = None, *, store: Any = None, planner: Any = None, **config: Any
    ) -> ProxyHandle:
        config.setdefault("store", {"enabled": False})
        settings = Settings(**config)
        app = create_app(settings, catch_all=catch_all, store=store, planner=planner)
        server = await aiohttp_server(app)  # TestServer enables handler_cancellation
        return ProxyHandle(server=server, app=app)

    return go
