"""Bad input through the running proxy: every request gets a clear OpenAI-shaped 4xx from
handoff, or reaches the upstream byte for byte (the upstream judges it). None gets a 500
from handoff, and every request that reached the upstream is snapshotted. Odd paths
and queries never land outside the upstream's base path, and any that a lenient
upstream could take for its chat endpoint is handled as chat.

Hypothesis runs in a worker thread (its test functions are synchronous) and sends each
case through the event loop that serves the proxy and the fake upstream. Afterwards every
recorded session is read back, through the inspection API and the ``handoff sessions``
commands, however odd the JSON it holds.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import gzip
import io
import json
import posixpath
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import aiohttp
import pytest
from aiohttp import web
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pytest_aiohttp import AiohttpServer
from yarl import URL

from proxy.cli import sessions as sessions_cli
from proxy.config import Settings
from proxy.ingress.chat_completions import MAX_DEPTH
from proxy.server.app import create_app
from proxy.server.serving import listening
from proxy.store import portable
from proxy.store.read import SqliteReader
from tests.conftest import MakeProxy, ProxyHandle
from tests.fake_upstream import ROLES, FakeUpstream
from tests.recording_upstream import RecordingUpstream

MODELS = {
    "small-8k": {"context_window": 8192, "max_output_tokens": 1024, "tokenizer": "o200k_base"},
    "big-1m": {"context_window": 1_000_000, "max_output_tokens": 1024, "tokenizer": "o200k_base"},
}
KNOWN_MODELS = ["gpt-4o-mini", "small-8k", "big-1m"]
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CONTENT_TYPES = [
    "application/json",
    "application/json; charset=latin-1",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    None,  # no Content-Type header at all
]


@dataclass
class Outcome:
    """One case: the proxy's answer and what the upstream saw and said."""

    status: int
    headers: dict[str, str]
    body: bytes
    forwarded: list[bytes]  # chat request bodies the upstream received for this case
    upstream_statuses: list[int]


CLIENT_KEY = {"Authorization": "Bearer sk-fuzz"}
"""The key every request of the rig sends: its sessions are in that key's workspace."""


@dataclass
class Rig:
    """The proxy (store on) in front of a fake upstream whose answers are recorded."""

    proxy: ProxyHandle
    fake: FakeUpstream
    statuses: list[int]
    db: Path
    client: aiohttp.ClientSession
    tried: int = 0
    reached: int = 0
    upstream_5xx: int = 0
    seen: list[str] = field(default_factory=list)

    async def send(self, raw: bytes, content_type: str | None = "application/json") -> Outcome:
        n0, s0 = len(self.fake.chat_requests), len(self.statuses)
        headers = dict(CLIENT_KEY)
        skip: list[str] = []
        if content_type is None:
            skip.append("Content-Type")
        else:
            headers["Content-Type"] = content_type
        async with self.client.post(
            self.proxy.url + "/chat/completions",
            data=raw,
            headers=headers,
            skip_auto_headers=skip,
        ) as r:
            body = await r.read()
            out = Outcome(
                r.status,
                dict(r.headers),
                body,
                [q.body for q in self.fake.chat_requests[n0:]],
                self.statuses[s0:],
            )
        self.tried += 1
        self.reached += bool(out.forwarded) or _refused_by_plan(out)  # both are recorded
        self.upstream_5xx += any(s >= 500 for s in out.upstream_statuses)
        return out

    def check(self, raw: bytes, out: Outcome) -> None:
        """The invariant: handoff answers a clear 4xx itself, or forwards untouched."""
        if out.status >= 500:
            assert any(s >= 500 for s in out.upstream_statuses), (out.status, out.body[:300])
            assert b"handoff hit an internal error" not in out.body
        if not out.forwarded:
            assert 400 <= out.status < 500, (out.status, out.body[:300])
            error = json.loads(out.body)["error"]
            assert set(error) == {"message", "type", "param", "code"}
            assert isinstance(error["message"], str) and len(error["message"]) > 10
            assert error["type"] == "invalid_request_error"
        elif "x-handoff-max-tokens" in out.headers:  # an output reservation lowered to fit
            sent, asked = json.loads(out.forwarded[0]), json.loads(raw)
            for key in ("max_tokens", "max_completion_tokens"):
                if key in sent and sent[key] != asked[key]:
                    assert 0 < sent[key] < asked[key]
                    sent[key] = asked[key]
            if out.headers.get("x-handoff-decision") != "compressed":
                assert sent == asked
        elif out.headers.get("x-handoff-decision") != "compressed":
            assert out.forwarded[0] == raw  # passthrough is byte-identical

    async def recorded_turns(self) -> int:
        def count() -> int:
            # handoff's own refusals are recorded too, with no latency: they never left it
            SqliteReader(self.db).list_sessions(limit=1)  # (the store is readable)
            with sqlite3.connect(self.db) as db:
                return int(
                    db.execute("SELECT COUNT(*) FROM turns WHERE latency_ms > 0").fetchone()[0]
                )

        return await asyncio.to_thread(count)

    async def assert_all_recorded(self) -> None:
        """Every case that reached the upstream is a turn in the store, and none failed."""
        async with asyncio.timeout(15):
            while (turns := await self.recorded_turns()) < self.reached:
                await asyncio.sleep(0.05)
        assert turns == self.reached
        async with self.client.get(self.proxy.root + "/healthz") as r:
            health = await r.json()
        assert r.status == 200
        assert health["store"]["ok"] and health["store"]["write_failures"] == 0

    async def read_back(self) -> int:
        """Every recorded session reads back whole: each view and export of the inspection
        API answers 200 (the portable one a valid document), and so does each
        ``handoff sessions`` command. Returns how many sessions were read."""
        api = self.proxy.root + "/handoff/v1/sessions"
        async with self.client.get(api, params={"limit": "1000000"}, headers=CLIENT_KEY) as r:
            assert r.status == 200, await r.text()
            sessions = (await r.json())["data"]
        for s in sessions:
            sid, turns = s["id"], int(s["turns"])
            paths = [f"/{sid}", f"/{sid}/export?format=openai", f"/{sid}/export?format=markdown"]
            paths += [
                f"/{sid}/{view}/{n}" for n in range(1, turns + 1) for view in ("turns", "diff")
            ]
            for path in [*paths, f"/{sid}/export"]:
                async with self.client.get(api + path, headers=CLIENT_KEY) as r:
                    body = await r.read()
                assert r.status == 200, (path, r.status, body[:300])
            portable.validate(json.loads(body))  # the last: the portable export
        await asyncio.to_thread(self._read_back_cli, [(s["id"], int(s["turns"])) for s in sessions])
        return len(sessions)

    def _read_back_cli(self, sessions: list[tuple[str, int]]) -> None:
        parser = argparse.ArgumentParser()
        sessions_cli.register(parser.add_subparsers(dest="command"))
        store = ["--store", str(self.db)]
        runs = [["list"], ["list", "--json"]]
        for sid, turns in sessions:
            runs += [["show", sid], ["show", sid, "--json"]]
            runs += [["export", sid, "--format", fmt] for fmt in ("portable", "openai", "markdown")]
            for n in range(1, turns + 1):
                runs += [["show", sid, "--turn", str(n)], ["diff", sid, "--turn", str(n)]]
        for argv in runs:
            args = parser.parse_args(["sessions", *argv, *store])
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                code = args.func(args)
            assert code == 0 and out.getvalue(), argv

    def report(self, what: str) -> None:
        print(
            f"\nfuzz {what}: {self.tried} cases, {self.reached} reached the upstream, "
            f"{self.tried - self.reached} answered by handoff, "
            f"{self.upstream_5xx} upstream-made 5xx relayed"
        )


@pytest.fixture
async def rig(aiohttp_server: AiohttpServer, make_proxy: MakeProxy, tmp_path: Path) -> Any:
    """A recorded fake upstream, the proxy with its store in tmp_path, and a client."""
    fake = FakeUpstream()
    statuses: list[int] = []

    @web.middleware
    async def record_status(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        chat = request.path.endswith("/chat/completions")
        try:
            resp = await handler(request)
        except web.HTTPException as e:
            statuses.append(e.status) if chat else None
            raise
        except Exception:
            statuses.append(500) if chat else None
            raise
        if chat:
            statuses.append(resp.status)
        return resp

    app = fake.app()
    app.middlewares.append(record_status)
    server = await aiohttp_server(app, host="127.0.0.1", shutdown_timeout=1.0)
    fake.attach(str(server.make_url("/v1")), server.close)
    db = tmp_path / "fuzz.db"
    proxy = await make_proxy(
        fake.url, store={"path": str(db)}, tokens={"discover": False}, models=MODELS
    )
    async with aiohttp.ClientSession() as client:
        yield Rig(proxy, fake, statuses, db, client)


def _refused_by_plan(out: Outcome) -> bool:
    """A request the decision refused (nothing could fit): recorded, though not sent."""
    if out.status != 400:
        return False
    try:
        code = json.loads(out.body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return False
    return code in ("handoff_unfittable", "context_length_exceeded")


def run_cases(rig: Rig) -> Callable[[bytes, str | None], Outcome]:
    """A synchronous sender for hypothesis, bound to the test's event loop."""
    loop = asyncio.get_running_loop()

    def send(raw: bytes, content_type: str | None = "application/json") -> Outcome:
        out = asyncio.run_coroutine_threadsafe(rig.send(raw, content_type), loop).result(60)
        rig.check(raw, out)
        return out

    return send


# ---------------------------------------------------------------- strategies

leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=30),
)
json_values = st.recursive(
    leaf,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
huge_numbers = st.one_of(
    st.integers(min_value=2**63 - 2, max_value=2**80),
    st.integers(min_value=-(2**80), max_value=-1),
    st.sampled_from([1e308, -1e308, 5e-324, 0.5]),
)
roles = st.one_of(st.sampled_from(ROLES), st.text(max_size=10), json_values)
part = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "image_url", "input_audio", "file"]) | st.text(max_size=6)},
    optional={k: json_values for k in ("text", "image_url", "input_audio", "file")},
)
tool_call = st.fixed_dictionaries(
    {},
    optional={
        "id": st.text(max_size=8) | json_values,
        "type": st.just("function") | json_values,
        "function": st.fixed_dictionaries(
            {}, optional={"name": st.text(max_size=8) | json_values, "arguments": json_values}
        )
        | json_values,
    },
)
message = st.fixed_dictionaries(
    {},
    optional={
        "role": roles,
        "content": st.one_of(
            st.text(max_size=300), st.none(), st.lists(part | json_values, max_size=3), json_values
        ),
        "name": json_values,
        "tool_calls": st.lists(tool_call, max_size=2) | json_values,
        "tool_call_id": st.text(max_size=8) | json_values,
        "x_unknown": json_values,
    },
)
chat_bodies = st.fixed_dictionaries(
    {
        "model": st.sampled_from(KNOWN_MODELS) | json_values,
        "messages": st.lists(message, max_size=6) | json_values,
    },
    optional={
        "stream": st.booleans() | json_values,
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}) | json_values,
        "max_tokens": huge_numbers | json_values,
        "max_completion_tokens": huge_numbers,
        "tools": st.lists(st.fixed_dictionaries({"type": st.just("function")}), max_size=2)
        | json_values,
        "temperature": huge_numbers,
        "x_vendor_field": json_values,
    },
)

# Bodies handoff's parser accepts, with wild contents the engine must still survive.
accepted_content = st.one_of(
    st.text(max_size=300),
    st.none(),
    st.lists(part | st.dictionaries(st.text(max_size=6), json_values), max_size=3),
)
accepted_message = st.fixed_dictionaries(
    {"role": st.sampled_from(ROLES) | st.text(max_size=10), "content": accepted_content},
    optional={
        "name": json_values,
        "tool_calls": st.lists(tool_call | json_values, max_size=2),
        "tool_call_id": st.text(max_size=8) | json_values,
        "refusal": json_values,
        "x_unknown": json_values,
    },
)
accepted_bodies = st.fixed_dictionaries(
    {
        "model": st.sampled_from([*KNOWN_MODELS, "unknown-model"]),
        "messages": st.lists(accepted_message, min_size=1, max_size=8),
    },
    optional={
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "max_tokens": huge_numbers | st.integers(0, 2000),
        "tools": json_values,
        "n": huge_numbers,
        "x_vendor_field": json_values,
    },
)


# ---------------------------------------------------------------- properties


async def test_arbitrary_json_bodies(rig: Rig) -> None:
    """Any JSON value as the body: a clear 4xx from handoff or an untouched forward."""
    send = run_cases(rig)

    @FUZZ
    @given(json_values, st.booleans())
    @example([], False)
    @example("a string", True)
    @example({"model": "gpt-4o-mini"}, False)
    @example({"messages": [{"role": "user", "content": "hi"}]}, False)
    def prop(value: Any, ascii_only: bool) -> None:
        send(json.dumps(value, ensure_ascii=ascii_only).encode(), "application/json")

    await asyncio.to_thread(prop)
    rig.report("arbitrary JSON")
    await rig.assert_all_recorded()
    await rig.read_back()


async def test_malformed_chat_requests(rig: Rig) -> None:
    """Wrong types, unknown roles and fields, huge numbers: never a 500, never unrecorded."""
    send = run_cases(rig)

    @FUZZ
    @given(chat_bodies)
    @example({"model": "gpt-4o-mini", "messages": {"role": "user"}})
    @example({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": 5}]})
    @example({"model": "gpt-4o-mini", "messages": [{"content": "no role"}]})
    @example({"model": "gpt-4o-mini", "messages": [{"role": "wizard", "content": "hi"}]})
    @example({"model": "gpt-4o-mini", "messages": [], "x_unknown": {"a": [1]}})
    @example({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}],
              "max_tokens": 18446744073709551616})  # fmt: skip
    @example({"model": 7, "messages": [{"role": "user", "content": "hi"}]})
    @example({"model": "small-8k", "messages": [{"role": "user", "content": [{"type": 3}]}],
              "stream": True, "stream_options": 5})  # fmt: skip
    def prop(body: dict[str, Any]) -> None:
        send(json.dumps(body).encode(), "application/json")

    await asyncio.to_thread(prop)
    rig.report("malformed chat requests")
    await rig.assert_all_recorded()
    await rig.read_back()


async def test_accepted_bodies_with_wild_contents(rig: Rig) -> None:
    """Bodies handoff accepts but cannot vouch for reach the upstream and are recorded."""
    send = run_cases(rig)

    @FUZZ
    @given(accepted_bodies)
    @example(
        {
            "model": "gpt-4o-mini",
            "messages": [{"role": "user", "content": [{"type": "text", "text": 7}]}],
        }
    )
    @example({"model": "small-8k", "messages": [{"role": "assistant", "content": None,
              "tool_calls": [{"function": 5}]}, {"role": "user", "content": "hi"}]})  # fmt: skip
    @example({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}],
              "max_tokens": 2**64})  # fmt: skip
    @example({"model": "gpt-4o-mini", "messages": [{"role": "system", "content": None}],
              "max_tokens": 9_223_372_036_854_775_806})  # fmt: skip
    @example({"model": "small-8k", "messages": [{"role": "assistant", "content": None,
              "tool_calls": ["x", None, {"function": None}, {"function": "f"}]}]})  # fmt: skip
    def prop(body: dict[str, Any]) -> None:
        out = send(json.dumps(body).encode(), "application/json")
        if not out.forwarded:  # only what no cut can fit is refused
            code = json.loads(out.body)["error"]["code"]
            assert code in ("context_length_exceeded", "handoff_unfittable")

    await asyncio.to_thread(prop)
    rig.report("accepted bodies, wild contents")
    await rig.assert_all_recorded()
    await rig.read_back()


VALID = b'{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hello"}]}'


async def test_bytes_encodings_and_content_types(rig: Rig) -> None:
    """Random bytes, invalid UTF-8 and any Content-Type: a clear 400 or an untouched forward."""
    send = run_cases(rig)

    @FUZZ
    @given(
        st.one_of(
            st.binary(max_size=200),
            st.tuples(st.integers(0, len(VALID)), st.binary(min_size=1, max_size=4)).map(
                lambda t: VALID[: t[0]] + t[1] + VALID[t[0] :]
            ),
            st.just(VALID),
        ),
        st.sampled_from(CONTENT_TYPES),
    )
    @example(b"", "application/json")
    @example(b"   \n", None)
    @example(VALID.replace(b"hello", b"\xff\xfe\xc3("), "application/json")
    @example(VALID.replace(b'"hello"', b'"\\ud800"'), "application/json")
    @example(VALID.replace(b"}]", b'}], "n": 1e400'), "application/json")
    @example(VALID, "text/plain")
    @example(VALID, None)
    def prop(raw: bytes, content_type: str | None) -> None:
        out = send(raw, content_type)
        if raw == VALID:
            assert out.status == 200 and out.forwarded == [VALID]

    await asyncio.to_thread(prop)
    rig.report("bytes and content types")
    await rig.assert_all_recorded()
    await rig.read_back()


# ---------------------------------------------------------------- sizes and depth


def _nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


@pytest.mark.parametrize(
    "raw",
    [
        _nested(10_000).encode(),
        ('{"model": "gpt-4o-mini", "messages": ' + _nested(10_000) + "}").encode(),
        (
            '{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi", "x": '
            + _nested(MAX_DEPTH)
            + "}]}"
        ).encode(),
        (
            '{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "tools": '
            + _nested(600)
            + "}"
        ).encode(),
    ],
    ids=["10k-arrays", "10k-in-messages", "past-store-limit-in-message", "600-in-tools"],
)
async def test_deep_nesting_is_a_clean_400(rig: Rig, raw: bytes) -> None:
    """Nesting past what handoff can store or rewrite is a clear 400, never a 500."""
    out = await rig.send(raw)
    rig.check(raw, out)
    assert out.status == 400 and not out.forwarded
    message = json.loads(out.body)["error"]["message"]
    assert "deep" in message or "depth limit" in message


async def test_nesting_handoff_can_store_passes_untouched(rig: Rig) -> None:
    """200 levels in an unknown field reach the upstream byte for byte and are recorded."""
    raw = (
        '{"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi", "x": '
        + _nested(200)
        + "}]}"
    ).encode()
    out = await rig.send(raw)
    rig.check(raw, out)
    assert out.status == 200 and out.forwarded == [raw]
    await rig.assert_all_recorded()


async def test_ten_thousand_messages(rig: Rig) -> None:
    """10,000 messages pass to a large window untouched and are compressed for 8k."""
    history = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message number {i}"}
        for i in range(10_000)
    ]
    for model, decision in (("big-1m", "passthrough"), ("small-8k", "compressed")):
        raw = json.dumps({"model": model, "messages": history}).encode()
        out = await rig.send(raw)
        rig.check(raw, out)
        assert out.status == 200, out.body[:300]
        assert out.headers["x-handoff-decision"] == decision
        assert json.loads(out.forwarded[-1])["messages"][-1] == history[-1]
    await rig.assert_all_recorded()


async def test_twenty_megabyte_message(rig: Rig) -> None:
    """One 20 MB message: middle-cut to fit a known window, untouched for an unknown one."""
    huge = "lorem ipsum dolor sit amet " * (20_000_000 // 27)
    raw = json.dumps({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": huge}]})
    out = await rig.send(raw.encode())
    rig.check(raw.encode(), out)
    assert out.status < 500
    assert out.headers["x-handoff-decision"] == "compressed"
    assert "cut-newest-user" in out.headers["x-handoff-policy"]
    budget = int(out.headers["x-handoff-budget"])
    assert int(out.headers["x-handoff-forwarded-tokens"]) <= budget
    assert all(len(body) < 20 * budget for body in out.forwarded)
    unknown = raw.replace('"gpt-4o-mini"', '"some-unknown-model"', 1).encode()
    out = await rig.send(unknown)
    rig.check(unknown, out)
    assert out.forwarded == [unknown]  # no window known: the upstream judges (404 here)
    assert out.status == 404
    await rig.assert_all_recorded()


# ---------------------------------------------------------------- what aiohttp cannot read

MARK = b"sk-echocanary0123456789"
"""Put in every malformed request: it must never come back in the answer."""


@pytest.fixture
async def served(fake_upstream: FakeUpstream) -> AsyncIterator[int]:
    """The proxy as ``handoff serve`` runs it (behind its connection guard) on a free port."""
    settings = Settings(
        server={"port": 0}, store={"enabled": False}, tokens={"discover": False}, models=MODELS
    )
    app = create_app(settings, catch_all=fake_upstream.url)
    async with listening(app, settings.server) as port:
        yield port


async def exchange(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` on a new connection; the first answer's status, headers and body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(raw)
        async with asyncio.timeout(10):
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
    finally:
        writer.close()
    return int(head[0].split(" ")[1]), headers, body


def _post(body: bytes, *headers: bytes) -> bytes:
    lines = [b"POST /v1/chat/completions HTTP/1.1", b"Host: localhost", *headers]
    if not any(h.lower().startswith((b"content-length", b"transfer-encoding")) for h in headers):
        lines.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join([*lines, b"Connection: close", b"", body])


def _get(*headers: bytes, target: bytes = b"/healthz") -> bytes:
    return b"\r\n".join([b"GET " + target + b" HTTP/1.1", b"Host: localhost", *headers, b"", b""])


GZIPPED = gzip.compress(VALID)
UNREADABLE = {
    "br": (_post(VALID, b"Content-Encoding: br"), {400, 415}),  # 400 if Brotli is installed
    "zstd": (_post(VALID, b"Content-Encoding: zstd"), {400, 415}),
    "request-line-over-8190": (_get(target=b"/healthz?q=" + MARK + b"a" * 9000), {431}),
    "header-over-8190": (_get(b"X-Long: " + MARK + b"b" * 9000), {431}),
    "200-headers": (_get(*(b"X-%d: %s" % (i, MARK) for i in range(200))), {431}),
    "bad-method": (MARK + b" /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n", {400}),
    "tls-to-plain-http": (b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03" + MARK, {400}),
    "bad-header-name": (_get(b"Bad " + MARK + b": v"), {400}),
    "bad-content-length": (_post(VALID, b"Content-Length: " + MARK), {400}),
    "bad-chunk-size": (_post(b"zz" + MARK + b"\r\n", b"Transfer-Encoding: chunked"), {400}),
    "unknown-expect": (_get(b"Expect: " + MARK), {417}),
    "gzip-garbage": (_post(b"\x00\x01garbage" + MARK, b"Content-Encoding: gzip"), {400}),
    "gzip-header-only": (_post(GZIPPED[:10], b"Content-Encoding: gzip"), {400}),
    "gzip-then-garbage": (_post(GZIPPED + MARK, b"Content-Encoding: gzip"), {400}),
    "deflate-garbage": (_post(VALID, b"Content-Encoding: deflate"), {400}),
}


def _check_unreadable(status: int, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """A 4xx from handoff in OpenAI's error shape that quotes nothing of the request."""
    assert 400 <= status < 500, (status, body[:300])
    assert headers["content-type"].startswith("application/json"), headers
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and len(error["message"]) > 20
    assert MARK not in body and b"aaaa" not in body and b"bbbb" not in body
    return dict(error)


@pytest.mark.parametrize("case", UNREADABLE)
async def test_what_aiohttp_cannot_read_gets_an_openai_shaped_4xx(served: int, case: str) -> None:
    """Unsupported or corrupt Content-Encodings, lines over 8,190 bytes, too many headers,
    bad methods, headers, lengths, chunks and expectations: a 4xx in OpenAI's shape, as
    JSON, never echoing the request; a body that does not decompress says so."""
    raw, statuses = UNREADABLE[case]
    status, headers, body = await exchange(served, raw)
    error = _check_unreadable(status, headers, body)
    assert status in statuses, (status, error)
    if case.startswith(("gzip", "deflate")) or status == 415:
        assert "decompress" in error["message"] and "empty" not in error["message"]
        assert error["code"] in {"invalid_content_encoding", "unsupported_content_encoding"}


async def test_fuzzed_request_heads(served: int) -> None:
    """Arbitrary bytes in the method, target, version, or a header's name or value: the
    answer is never a 5xx, never quotes them, and any 4xx is OpenAI-shaped JSON."""
    loop = asyncio.get_running_loop()

    @settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(
        st.sampled_from(["method", "target", "version", "name", "value"]), st.binary(max_size=40)
    )
    @example("value", b"\r\n\r\n")
    @example("name", b"\x00")
    @example("target", b" ")
    def prop(where: str, junk: bytes) -> None:
        parts = {b"method": b"GET", b"target": b"/healthz?q=", b"version": b"HTTP/1.1"}
        parts |= {b"name": b"X-Fuzz", b"value": b"v"}
        key = where.encode()
        parts[key] = (parts[key] if key == b"target" else b"") + junk + MARK
        raw = b"%s %s %s\r\nHost: localhost\r\n%s: %s\r\nConnection: close\r\n\r\n" % (
            parts[b"method"],
            parts[b"target"],
            parts[b"version"],
            parts[b"name"],
            parts[b"value"],
        )
        status, headers, body = asyncio.run_coroutine_threadsafe(
            exchange(served, raw), loop
        ).result(30)
        assert status < 500 and MARK not in body, (status, body[:300])
        if status >= 400:
            _check_unreadable(status, headers, body)


# ---------------------------------------------------------------- paths and queries

SERVER_KEY = "sk-fuzz-server-key"
PIECES = [
    *("chat", "Chat", "completions", "COMPLETIONS", "models", "admin", "a.b", "x"),
    *("/", "//", ".", "..", "...", ";", ";x=1", "%20", "%09", "%00"),
    *("%2e", "%2E", "%252e", "%25252e", "%25%32%65", "%%32%65", "%c0%ae", "%ef%bc%8e"),
    *("%2f", "%2F", "%252f", "%5c", "%255c", "\\", "%3b", "%63", "%", "%zz", "%41"),
]
QUERY_PIECES = ["a", "=", "&", "%23", "%26", "%3D", "+", "%2B", "%20", "%", "%zz", "..", "/"]


def landing(raw: str) -> str:
    """Where the most lenient upstream could take a raw path: unescaped until it stops
    changing, backslashes as slashes, ``;`` parameters and padding dropped, dot segments
    resolved, slashes merged."""
    text = raw
    for _ in range(6):
        text, before = unquote(text, errors="replace"), text
        if text == before:
            break
    segments = [p.split(";", 1)[0].strip() for p in text.replace("\\", "/").split("/")]
    return posixpath.normpath("/" + "/".join(p for p in segments if p))


@dataclass
class PathRig:
    proxy: ProxyHandle
    rec: RecordingUpstream
    client: aiohttp.ClientSession

    async def send(self, method: str, target: str) -> tuple[int, dict[str, str], bytes]:
        url = URL(self.proxy.root + target, encoded=True)
        body = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}'
        async with self.client.request(method, url, data=body) as r:
            return r.status, dict(r.headers), await r.read()

    def check(self, method: str, path: str, query: str, n0: int, out: Any) -> None:
        """The invariant for one request (``/v1`` + ``path`` ? ``query``)."""
        status, headers, body = out
        assert status < 500, (path, status, body[:300])
        seen = self.rec.seen[n0:]
        base = self.rec.base_path
        for s in seen:
            where = landing(s.raw_path)
            assert where == base or where.startswith(base + "/"), (path, s.raw_path)
            assert s.headers.get("Authorization") == f"Bearer {SERVER_KEY}"
            assert s.raw_query == query  # byte for byte
        if not seen:
            error = json.loads(body)["error"]
            assert 400 <= status < 500 and set(error) == {"message", "type", "param", "code"}
            return
        (s,) = seen
        as_chat = landing(s.raw_path).lower().rstrip("/") == base + "/chat/completions"
        if (method == "POST" and as_chat) or "x-handoff-decision" in headers:
            assert "x-handoff-decision" in headers, (path, s.raw_path)
            assert s.raw_path == base + "/chat/completions", path
        else:
            assert s.raw_path == "/tenant-a/v1" + path  # forwarded as sent


@pytest.fixture
async def path_rig(
    recording_upstream: RecordingUpstream, make_proxy: MakeProxy, monkeypatch: pytest.MonkeyPatch
) -> Any:
    monkeypatch.setenv("FUZZ_SERVER_KEY", SERVER_KEY)
    upstream = {"name": "t", "base_url": recording_upstream.url, "api_key_env": "FUZZ_SERVER_KEY"}
    proxy = await make_proxy(upstreams=[upstream], tokens={"discover": False})
    async with aiohttp.ClientSession() as client:
        yield PathRig(proxy, recording_upstream, client)


async def test_odd_paths_and_queries_stay_below_base_url(path_rig: PathRig) -> None:
    """Any mix of dots, slashes, escapes (single, double, mixed), backslashes, ';'
    parameters and case in the path, and any query: never outside /tenant-a/v1 with the
    server's key; a chat spelling is handled as chat; the rest is forwarded as sent."""
    loop = asyncio.get_running_loop()

    @FUZZ
    @given(
        st.sampled_from(["GET", "POST"]),
        st.lists(st.sampled_from(PIECES), min_size=1, max_size=8).map("".join),
        st.lists(st.sampled_from(QUERY_PIECES), max_size=6).map("".join),
    )
    @example("GET", "/%252e%252e/%252e%252e/admin/keys", "")
    @example("POST", "/%2e%2e/%2e%2e/admin/keys", "")
    @example("GET", "/..;/..;/admin", "")
    @example("GET", "/..\\..\\admin", "")
    @example("POST", "/chat%2Fcompletions", "")
    @example("POST", "/chat/completions/", "a=%23b&c=%26d")
    @example("POST", "//chat//completions//", "")
    @example("POST", "/Chat/Completions", "")
    @example("POST", "/./chat/completions", "")
    @example("POST", "/chat/completions%3b", "")
    @example("GET", "/models", "a=%23b&c=%26d")
    def prop(method: str, path: str, query: str) -> None:
        path = path if path.startswith("/") else "/" + path
        target = "/v1" + path + (f"?{query}" if query else "")
        n0 = len(path_rig.rec.seen)
        out = asyncio.run_coroutine_threadsafe(path_rig.send(method, target), loop).result(30)
        path_rig.check(method, path, query, n0, out)

    await asyncio.to_thread(prop)


# ---------------------------------------------------------------- odd bodies, read back

_USER = {"role": "user", "content": "hi"}
_TRUNCATED_WEBP = "data:image/webp;base64," + base64.b64encode(b"RIFF\0\0\0\0WEBPVP8L").decode()


def _deep_message(depth: int, model: str = "gpt-4o-mini", text: str = "hi") -> dict[str, Any]:
    """A body nested ``depth`` levels in all (object, messages array, message, then arrays);
    with a long ``text`` for a small window, compressed (the cut message keeps its depth)."""
    deep = {"role": "user", "content": text, "x": json.loads(_nested(depth - 3))}
    return {"model": model, "messages": [_USER, {"role": "assistant", "content": "ok"}, deep]}


def _calls(*calls: Any) -> dict[str, Any]:
    msg = {"role": "assistant", "content": None, "tool_calls": list(calls)}
    return {"model": "small-8k", "messages": [_USER, msg, _USER]}


ODD_BODIES: dict[str, dict[str, Any]] = {
    "tool-call-string": _calls("x"),
    "tool-call-null": _calls(None),
    "function-null": _calls({"id": "c1", "type": "function", "function": None}),
    "function-string": _calls({"id": "c1", "type": "function", "function": "lookup"}),
    "function-odd-fields": _calls({"id": 5, "function": {"name": ["x"], "arguments": {"a": 1}}}),
    **{f"depth-{d}": _deep_message(d) for d in (251, 252, 253, MAX_DEPTH)},
    **{
        f"depth-{d}-compressed": _deep_message(d, "small-8k", "word " * 20_000)
        for d in (251, 252, 253, MAX_DEPTH)
    },
    "deep-arguments": _calls({"function": {"name": "f", "arguments": json.loads(_nested(240))}}),
    "overflow-retry-nothing-left-to-drop": {
        "model": "small-8k",
        "messages": [
            _USER,
            {"role": "assistant", "content": "ok"},
            _USER,
            _USER | {"content": "word " * 20_000},
        ],
    },
    "rich-markup-in-text": {
        "model": "[/bold] [red]x[/red] [link=file:///etc]",
        "messages": [{"role": "[/]", "content": "[/bold] closes [b]nothing[/i] \\[x]"}],
    },
    "truncated-webp-counted": {
        "model": "small-8k",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look " * 2000},
                    {"type": "image_url", "image_url": {"url": _TRUNCATED_WEBP}},
                ],
            }
        ],
    },
}


@pytest.mark.parametrize("body", ODD_BODIES.values(), ids=ODD_BODIES.keys())
async def test_odd_bodies_are_forwarded_and_read_back(rig: Rig, body: dict[str, Any]) -> None:
    """Bodies handoff accepts reach the upstream, are recorded, and read back through every
    view and export of the inspection API and the CLI."""
    raw = json.dumps(body).encode()
    out = await rig.send(raw)
    rig.check(raw, out)
    assert out.forwarded, (out.status, out.body[:300])
    await rig.assert_all_recorded()
    assert await rig.read_back() == 1
