"""Limits that stick, through the real proxy and the fake upstream: a refusal that is not
an overflow, limits learned from errors that survive a restart, llama.cpp's empty stream,
a kept-alive connection the server closed, and output reservations that fit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.cli.main import main
from proxy.server.app import DISCOVERY
from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream, Fault, FaultKind
from tests.server.test_faults import one_turn, post_chat

MODELS = {"small-8k": {"context_window": 8192, "max_output_tokens": 1024}}


def words(n: int, tag: str = "w") -> str:
    return " ".join(f"{tag}{i}" for i in range(n))


async def test_unfittable_is_its_own_error_and_recorded(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A system prompt over the budget: 400 handoff_unfittable (not context_length_exceeded,
    so clients do not compact and retry), no upstream call, and the refusal is recorded."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(
        fake_upstream.url, models=MODELS, store={"path": str(db), "writer": "thread"}
    )
    body = {
        "model": "small-8k",
        "messages": [
            {"role": "system", "content": words(20_000)},
            {"role": "user", "content": "hi"},
        ],
    }
    status, _, raw = await post_chat(proxy, body)
    err = json.loads(raw)["error"]
    assert status == 400 and err["code"] == "handoff_unfittable"
    assert "compacting it will not help" in err["message"]
    assert fake_upstream.chat_requests == []
    turn = await one_turn(db)
    assert turn["status"] == 400
    assert turn["error"]["error"]["code"] == "handoff_unfittable"
    assert turn["decision"]["action"] == "rejected"


def _history(turns: int, size: int = 60) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = [{"role": "system", "content": "Be brief."}]
    for i in range(turns):
        msgs += [
            {"role": "user", "content": f"question {i}: " + words(size, f"q{i}_")},
            {"role": "assistant", "content": f"answer {i}: " + words(size, f"a{i}_")},
        ]
    msgs.append({"role": "user", "content": "and now?"})
    return msgs


async def test_a_limit_named_in_an_error_sticks_across_turns_and_restarts(
    fake_upstream_factory: Any,
    make_proxy: MakeProxy,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """llama-cpp-python lists no window: its first refusal names n_ctx 2048. The limit is
    used from then on (the next turn is not refused) and kept in the store, so a proxy
    restarted on it sends the first request already fitted; `handoff models` shows it."""
    fake = await fake_upstream_factory(models={"local-llama": 2048}, context_error_style="llamacpp")
    db = tmp_path / "h.db"
    config: dict[str, Any] = {
        "store": {"path": str(db), "writer": "thread"},
        "tokens": {"discover": False},
    }
    proxy = await make_proxy(fake.url, **config)
    body = {"model": "local-llama", "messages": _history(20)}
    status, _, raw = await post_chat(proxy, body)
    assert status == 200, raw
    assert [r.path for r in fake.chat_requests] == ["/v1/chat/completions"] * 2  # refused once
    body["messages"] = [*body["messages"], {"role": "assistant", "content": "ok"},
                        {"role": "user", "content": "next?"}]  # fmt: skip
    status, headers, raw = await post_chat(proxy, body)
    assert status == 200, raw
    assert len(fake.chat_requests) == 3  # not refused again
    assert headers["x-handoff-window"] == "2048" and headers["x-handoff-decision"] == "compressed"
    await proxy.server.close()

    again = await make_proxy(fake.url, **config)
    status, headers, raw = await post_chat(again, body)
    assert status == 200, raw
    assert len(fake.chat_requests) == 4  # the restarted proxy knew the limit
    assert headers["x-handoff-window"] == "2048"
    monkeypatch.setenv("HANDOFF_STORE__PATH", str(db))
    assert main(["models", "local-llama", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "named a 2048-token window in an error" in report["explanation"]


async def test_an_empty_stream_is_a_failed_attempt_refitted_and_retried(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """A 200 stream with no event (llama.cpp's overflow) is not relayed: the request is
    fitted smaller and sent again, and the client gets the retry's whole stream."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(
        fake_upstream.url,
        models={"small-8k": {"context_window": 8192}},
        store={"path": str(db), "writer": "thread"},
        tokens={"discover": False},
    )
    fake_upstream.inject(Fault(FaultKind.EMPTY_STREAM))
    body = {"model": "small-8k", "messages": _history(40, 40), "stream": True}
    status, headers, raw = await post_chat(proxy, body)
    assert status == 200 and raw.endswith(b"data: [DONE]\n\n"), raw
    first, second = fake_upstream.chat_requests
    assert len(second.body) < len(first.body)  # fitted below what got no answer
    assert headers["x-handoff-decision"] == "compressed"
    turn = await one_turn(db)
    assert turn["status"] == 200 and turn["reply"]["content"]


async def test_an_empty_stream_that_cannot_be_refitted_is_an_error_not_a_reply(
    fake_upstream_factory: Any, make_proxy: MakeProxy
) -> None:
    """A model handoff knows no window for, on a server that answers every overflowing
    stream with no event: after the one retry the client gets a 502 that says what to
    set, never an empty 200."""
    fake = await fake_upstream_factory(models={"local": 512}, overflow_as_empty_stream=True)
    proxy = await make_proxy(fake.url, tokens={"discover": False})
    body = {"model": "local", "messages": _history(20), "stream": True}
    status, _, raw = await post_chat(proxy, body)
    assert status == 502, raw
    err = json.loads(raw)["error"]
    assert err["code"] == "upstream_empty_stream" and "context_window" in err["message"]
    assert len(fake.chat_requests) == 2


async def test_a_kept_alive_connection_the_server_closed_is_retried_once_fresh(
    fake_upstream_factory: Any, make_proxy: MakeProxy
) -> None:
    """The server drops the second request on a connection it answered on before (as
    llama.cpp after a refused stream): handoff sends it again on a new connection, and
    the client sees only the answer (before: 502 "closed the connection")."""
    fake = await fake_upstream_factory(close_kept_alive=True)
    proxy = await make_proxy(fake.url, tokens={"discover": False})
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
    for i in range(3):
        status, _, raw = await post_chat(proxy, body)
        assert status == 200, raw
        assert len(fake.chat_requests) == i + 1
    assert fake.dropped == 2  # each later request met a closed connection first


async def test_a_window_alone_reserves_a_quarter_for_output(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """[models] with only context_window: a request without max_tokens reserves 2,048 of
    8,192 (not the whole window, which refused every request before)."""
    proxy = await make_proxy(fake_upstream.url, models={"small-8k": {"context_window": 8192}})
    body = {"model": "small-8k", "messages": [{"role": "user", "content": words(3000)}]}
    status, headers, raw = await post_chat(proxy, body)
    assert status == 200, raw
    window, budget = int(headers["x-handoff-window"]), int(headers["x-handoff-budget"])
    margin = -(-window * 10 // 100)  # tokens.approx_margin: this name has no exact tokenizer
    assert (window, budget) == (8192, 8192 - 2048 - margin)
    assert "x-handoff-max-tokens" not in headers


async def test_more_output_than_the_window_leaves_is_lowered_and_said(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """max_tokens 32,768 on an 8k model: lowered to what the prompt leaves, in the
    forwarded body and the x-handoff-max-tokens header; the strict upstream answers."""
    proxy = await make_proxy(fake_upstream.url, models={"small-8k": {"context_window": 8192}})
    body = {
        "model": "small-8k",
        "max_tokens": 32_768,
        "messages": [{"role": "user", "content": words(500)}],
    }
    status, headers, raw = await post_chat(proxy, body)
    assert status == 200, raw
    sent = fake_upstream.chat_requests[-1].json()
    lowered = sent["max_tokens"]
    assert 2048 <= lowered < 8192 - 500
    assert headers["x-handoff-max-tokens"] == f"reduced from 32768 to {lowered}"
    assert sent["messages"] == body["messages"]  # the prompt fits beside it: not cut
    # A long history: the reservation goes no lower than the model's share; the rest is cut.
    long = {**body, "max_completion_tokens": 32_768, "messages": _history(60)}
    del long["max_tokens"]
    status, headers, raw = await post_chat(proxy, long)
    assert status == 200, raw
    sent = fake_upstream.chat_requests[-1].json()
    assert sent["max_completion_tokens"] == 2048 and headers["x-handoff-decision"] == "compressed"


async def test_strict_max_tokens_refuses_and_names_the_setting(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """compression.strict_max_tokens: the client's figure stands, so a reservation no
    window can hold is refused, with the setting that would let handoff lower it."""
    proxy = await make_proxy(
        fake_upstream.url,
        models={"small-8k": {"context_window": 8192}},
        compression={"strict_max_tokens": True},
    )
    body = {
        "model": "small-8k",
        "max_tokens": 32_768,
        "messages": [{"role": "user", "content": "hi"}],
    }
    status, _, raw = await post_chat(proxy, body)
    err = json.loads(raw)["error"]
    assert status == 400 and err["param"] == "max_tokens"
    assert "compression.strict_max_tokens = false" in err["message"]
    assert fake_upstream.chat_requests == []


async def test_a_llamacpp_window_discovered_at_start_fits_the_first_request(
    fake_upstream_factory: Any, make_proxy: MakeProxy
) -> None:
    """A llama.cpp server started with n_ctx 2048, not in [models]: its /props is read at
    start, so the first long request is fitted and not refused."""
    fake = await fake_upstream_factory(
        models={"local-llama": 2048}, context_error_style="llamacpp", local_server="llamacpp"
    )
    proxy = await make_proxy(fake.url)
    await proxy.app[DISCOVERY]
    status, headers, raw = await post_chat(
        proxy, {"model": "local-llama", "messages": _history(20)}
    )
    assert status == 200, raw
    assert headers["x-handoff-window"] == "2048" and headers["x-handoff-decision"] == "compressed"
    assert len(fake.chat_requests) == 1
    assert [r.path for r in fake.requests[:2]] == ["/v1/models", "/props"]


async def test_llamacpp_empty_stream_then_closed_connection_still_answers(
    fake_upstream_factory: Any, make_proxy: MakeProxy
) -> None:
    """llama.cpp as observed: an overflowing stream ends with no event, and the server has
    closed that connection, so the retry meets it closed: it is resent on a fresh one and
    the client gets one whole answer."""
    fake = await fake_upstream_factory(close_kept_alive=True)
    proxy = await make_proxy(
        fake.url, models={"small-8k": {"context_window": 8192}}, tokens={"discover": False}
    )
    fake.inject(Fault(FaultKind.EMPTY_STREAM))
    body = {"model": "small-8k", "messages": _history(40, 40), "stream": True}
    status, _, raw = await post_chat(proxy, body)
    assert status == 200 and raw.endswith(b"data: [DONE]\n\n"), raw
    assert len(fake.chat_requests) == 2 and fake.dropped == 1


async def test_an_upstream_set_not_to_discover_is_asked_nothing_at_start(
    fake_upstream_factory: Any, make_proxy: MakeProxy
) -> None:
    """``discover = false`` on an upstream: no start-up request reaches it, so its
    window stays unknown (here passed through) until an overflow names it."""
    fake = await fake_upstream_factory(
        models={"local-llama": 2048}, context_error_style="llamacpp", local_server="llamacpp"
    )
    proxy = await make_proxy(
        upstreams=[{"name": "quiet", "base_url": fake.url, "models": ["*"], "discover": False}]
    )
    await proxy.app[DISCOVERY]
    assert fake.requests == []
    status, headers, _ = await post_chat(
        proxy, {"model": "local-llama", "messages": [{"role": "user", "content": "hi"}]}
    )
    assert status == 200 and "x-handoff-window" not in headers
