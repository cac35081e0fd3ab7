"""Shared fixtures: real servers on loopback — the fake upstream and the proxy."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from proxy.config import Settings
from proxy.log import configure_logging
from proxy.server.app import create_app
from tests.fixtures_upstream import (  # noqa: F401  # noqa: F401
    fake_upstream,
    fake_upstream_factory,
    recording_upstream,
)


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


@pytest.fixture(autouse=True, scope="session")
def _logs_to_stderr() -> None:
    """Logs go to stderr as in the real CLI, so stdout assertions see only output."""
    configure_logging("console")


@pytest.fixture
def make_proxy(aiohttp_server: Any) -> MakeProxy:
    """Start the real proxy app on loopback: ``await make_proxy(upstream_url, **settings)``."""

    async def go(
        catch_all: str | None = None, *, store_obj: Any = None, planner: Any = None, **config: Any
    ) -> ProxyHandle:
        """``config`` holds settings sections; the store is off unless ``store=`` is given."""
        config.setdefault("store", {"enabled": False})
        settings = Settings(**config)
        app = create_app(settings, catch_all=catch_all, store=store_obj, planner=planner)
        server = await aiohttp_server(app)  # TestServer enables handler_cancellation
        return ProxyHandle(server=server, app=app)

    return go
