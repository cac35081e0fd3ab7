"""Routing by wire format: Messages requests go to ``kind = "anthropic"`` upstreams, with
the configured key sent as ``x-api-key`` in place of the client's."""

from __future__ import annotations

import pytest
from multidict import CIMultiDict

from proxy.config import Settings
from proxy.errors import NoRoute
from proxy.upstream.routing import Router, Upstream, build_upstreams


def test_kind_routes_and_the_catch_all_serves_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """A model is matched among its format's upstreams; ``--upstream`` serves any format."""
    monkeypatch.setenv("ANT_KEY", "sk-ant-secret")
    settings = Settings(
        upstreams=[
            {"name": "oai", "base_url": "http://127.0.0.1:1/v1", "models": ["*"]},
            {
                "name": "ant",
                "base_url": "http://127.0.0.1:2/v1",
                "models": ["claude-*"],
                "kind": "anthropic",
                "api_key_env": "ANT_KEY",
            },
        ]
    )
    router = Router(build_upstreams(settings))
    assert router.route("claude-sonnet-4-5", "anthropic").name == "ant"
    assert router.route("claude-sonnet-4-5").name == "oai"
    with pytest.raises(NoRoute, match='kind = "anthropic"'):
        router.route("gpt-4o", "anthropic")
    assert router.default("anthropic").name == "ant"
    both = Router(build_upstreams(Settings(), "http://127.0.0.1:3/v1"))
    assert both.route("claude-x", "anthropic").name == both.route("gpt-4o").name == "default"


def test_configured_key_goes_as_x_api_key() -> None:
    """The client's own Authorization or x-api-key is replaced, never sent beside it."""
    up = Upstream("ant", "http://127.0.0.1:2/v1", ("*",), api_key="sk-ant-secret", kind="anthropic")
    incoming = CIMultiDict(
        {
            "Authorization": "Bearer client",
            "x-api-key": "client",
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "context-1m-2025-08-07",
            "x-handoff-key": "local",
        }
    )
    out = up.request_headers(incoming)
    assert out.getall("x-api-key") == ["sk-ant-secret"] and "Authorization" not in out
    assert out["anthropic-version"] == "2023-06-01" and out["anthropic-beta"].startswith("context")
    assert "x-handoff-key" not in out
    passthrough = Upstream("ant", "http://127.0.0.1:2/v1", ("*",), kind="anthropic")
    assert passthrough.request_headers(incoming)["x-api-key"] == "client"
