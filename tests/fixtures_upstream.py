"""Pytest fixtures that start fake OpenAI upstreams on loopback (import them in conftest)."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

import pytest
from pytest_aiohttp import AiohttpServer

from tests.fake_upstream import FakeUpstream
from tests.recording_upstream import RecordingUpstream

__all__ = ["FakeUpstreamFactory", "fake_upstream", "fake_upstream_factory", "recording_upstream"]


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


@pytest.fixture
async def recording_upstream(aiohttp_server: AiohttpServer) -> RecordingUpstream:
    """A catch-all upstream whose ``.url`` is ``http://127.0.0.1:PORT/tenant-a/v1``; it
    keeps request bodies as they came (no decompression), to show what was sent."""
    rec = RecordingUpstream()
    server = await aiohttp_server(
        rec.app(), host="127.0.0.1", shutdown_timeout=1.0, auto_decompress=False
    )
    rec.url = str(server.make_url(rec.base_path))
    return rec
