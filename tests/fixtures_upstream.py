"""Pytest fixtures that start fake OpenAI upstreams on loopback (import them in conftest)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

import pytest
from pytest_aiohttp import AiohttpServer

from tests.fake_upstream import FakeUpstream

__all__ = ["FakeUpstreamFactory", "fake_upstream", "fake_upstream_factory"]


class FakeUpstreamFactory(Protocol):
    """Starts one more fake upstream; keyword arguments go to ``FakeUpstream``."""

    def __call__(self, **options: Any) -> Awaitable[FakeUpstream]: ...


@pytest.fixture
def fake_upstream_factory(aiohttp_server: AiohttpServer) -> FakeUpstreamFactory:
    """Start fake upstreams on demand (each on its own free port; ``.url`` ends in ``/v1``)."""

    async def make(**options: Any) -> FakeUpstream:
        fake = FakeUpstream(**options)
        server = await aiohttp_server(fake.app(), host="127.0.0.1", shutdown_timeout=1.0)
        fake.attach(str(server.make_url("/v1")), server.close)
        return fake

    return make


@pytest.fixture
async def fake_upstream(fake_upstream_factory: FakeUpstreamFactory) -> FakeUpstream:
    """One fake upstream with the default models, started for the test."""
    return await fake_upstream_factory()
