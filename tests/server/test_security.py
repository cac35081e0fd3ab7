"""Security, against the real proxy: where it listens, who may use it, where requests go,
that keys leak nowhere, and that upstream TLS is verified."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import ssl
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.cli.main import main as cli_main
from proxy.config import ConfigError, load_settings
from proxy.store.db import connect
from proxy.store.read import SqliteReader
from proxy.upstream.routing import Upstream
from tests.conftest import MakeProxy
from tests.fake_upstream import FakeUpstream, Fault, FaultKind, authorization_fingerprint
from tests.fake_upstream import free_port as _free_port
from tests.server.test_faults import BOUND, stored_turns, until
from tests.server.test_shutdown import handoff_serve, read_stream

MESSAGES = [{"role": "user", "content": "hello"}]
CHAT = {"model": "gpt-4o", "messages": MESSAGES}
ACCESS = "hk-access-canary-5e1d"


# ---------------------------------------------------------------- where it listens


def _listeners(port: int) -> list[str]:
    """Local addresses (hex, as in /proc/net/tcp*) of sockets listening on ``port``."""
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                out.append(local.rsplit(":", 1)[0])
    return out


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net/tcp")
async def test_serve_binds_loopback_by_default(fake_upstream: FakeUpstream, tmp_path: Path) -> None:
    """`handoff serve` with no --host says and listens on 127.0.0.1, and nowhere else."""
    async with handoff_serve(tmp_path, ["--upstream", fake_upstream.url, "--no-store"]) as server:
        assert f"http://127.0.0.1:{server.port}/v1" in server.banner
        assert _listeners(server.port) == ["0100007F"]  # 127.0.0.1, little-endian hex
        server.proc.send_signal(signal.SIGTERM)
        assert await server.wait() == 0


def test_non_loopback_host_needs_access_key(capsys: pytest.CaptureFixture[str]) -> None:
    """Binding 0.0.0.0 is refused, naming server.access_key, unless an access key is set."""
    with pytest.raises(ConfigError, match=r"server\.access_key"):
        load_settings(None, {"server": {"host": "0.0.0.0"}}, env={})
    code = cli_main(["serve", "--host", "0.0.0.0", "--upstream", "http://127.0.0.1:9/v1"])
    assert code == 2 and "server.access_key" in capsys.readouterr().err
    ok = load_settings(None, {"server": {"host": "0.0.0.0", "access_key": ACCESS}}, env={})
    assert ok.server.host == "0.0.0.0"


# ---------------------------------------------------------------- who may use it


async def test_access_key_guards_every_route_but_healthz(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """With server.access_key, every route but /healthz needs x-handoff-key (401 without or
    with a wrong one); the key stays with handoff, the client's Authorization goes upstream."""
    proxy = await make_proxy(
        fake_upstream.url, server={"access_key": ACCESS}, store={"path": str(tmp_path / "h.db")}
    )
    routes = [
        ("POST", proxy.url + "/chat/completions"),
        ("GET", proxy.url + "/models"),
        ("GET", proxy.root + "/handoff/v1/sessions"),
        ("GET", proxy.root + "/metrics"),
    ]
    auth = {"Authorization": "Bearer sk-client-own-key"}
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        for method, url in routes:
            for given in ({}, {"x-handoff-key": "wrong"}, {"x-handoff-key": ACCESS[:-1]}):
                async with s.request(method, url, json=CHAT, headers={**auth, **given}) as r:
                    assert r.status == 401, url
                    assert (await r.json())["error"]["code"] == "invalid_handoff_key"
        assert fake_upstream.chat_requests == []
        for method, url in routes:
            headers = {**auth, "x-handoff-key": ACCESS}
            async with s.request(method, url, json=CHAT, headers=headers) as r:
                assert r.status == 200, (url, await r.text())
                if url.endswith("/chat/completions"):
                    saw = r.headers["x-fake-saw-authorization"]
                    assert saw == authorization_fingerprint(auth["Authorization"])
        async with s.get(proxy.root + "/healthz") as r:
            assert r.status == 200
    assert fake_upstream.requests
    for req in fake_upstream.requests:
        assert "x-handoff-key" not in req.headers
        assert ACCESS.encode() not in req.body


# ---------------------------------------------------------------- keys leak nowhere

LEAKS = {
    "Authorization": "Bearer canaryAUTH-9f2c71d04b",
    "api-key": "canaryAPIKEY-3e8a55b6c1",
}
CANARIES = [b"canaryAUTH", b"canaryAPIKEY", b"canaryACCESS", b"sk-canarySHAPED"]


def _config(tmp_path: Path, fake: FakeUpstream) -> Path:
    path = tmp_path / "config.toml"
    path.write_text(
        f"""
[server]
access_key = "canaryACCESS-77d1e0"

[[upstreams]]
name = "dead"
base_url = "http://127.0.0.1:{_free_port()}/v1"
models = ["dead-*"]

[[upstreams]]
name = "main"
base_url = "{fake.url}"
models = ["*"]
"""
    )
    return path


async def _exchange(
    s: aiohttp.ClientSession, method: str, url: str, body: bytes, headers: dict[str, str]
) -> bytes:
    """Status line, headers and body of one answer, as bytes, to grep."""
    async with s.request(method, url, data=body, headers=headers) as r:
        data = await r.read()
        head = "".join(f"{k}: {v}\n" for k, v in r.headers.items())
        return f"{r.status}\n{head}\n".encode() + data


@pytest.mark.slow
async def test_keys_never_reach_logs_store_or_error_bodies(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """Keys sent through success, upstream-error, proxy-error and streaming paths appear in
    no log line, no store file and no response."""
    db = tmp_path / "h.db"
    config = _config(tmp_path, fake_upstream)
    answers: list[bytes] = []
    env = {"HANDOFF_CONFIG": str(config)}
    async with handoff_serve(tmp_path, ["--store", str(db)], env) as server:
        url = server.url + "/chat/completions"
        good = {**LEAKS, "x-handoff-key": "canaryACCESS-77d1e0", "Content-Type": "application/json"}

        def chat(model: str = "gpt-4o", **extra: Any) -> bytes:
            messages = [{"role": "user", "content": "keep it secret"}]
            return json.dumps({"model": model, "messages": messages, **extra}).encode()

        async with aiohttp.ClientSession(timeout=BOUND) as s:
            answers.append(await _exchange(s, "POST", url, chat(), good))
            answers.append(await _exchange(s, "POST", url, chat(stream=True), good))
            fake_upstream.inject(Fault(FaultKind.SERVER_ERROR), Fault(FaultKind.RATE_LIMIT))
            answers.append(await _exchange(s, "POST", url, chat(), good))
            answers.append(await _exchange(s, "POST", url, chat(stream=True), good))
            fake_upstream.inject(Fault(FaultKind.RESET_MID_STREAM))
            answers.append(await _exchange(s, "POST", url, chat(stream=True), good))
            answers.append(await _exchange(s, "POST", url, b"{not json", good))
            answers.append(await _exchange(s, "POST", url, chat("dead-model"), good))
            answers.append(await _exchange(s, "GET", server.url + "/models", b"", good))
            shaped = {**good, "Authorization": "Bearer sk-canarySHAPED-0a1b2c3d4e5f6a7b"}
            answers.append(await _exchange(s, "POST", url, chat(), shaped))
            wrong = {**LEAKS, "x-handoff-key": "canaryACCESS-wrong"}
            answers.append(await _exchange(s, "POST", url, chat(), wrong))
        statuses = [a.split(b"\n", 1)[0] for a in answers]
        expected = [b"200", b"200", b"500", b"429", b"200", b"400", b"502", b"200", b"200", b"401"]
        assert statuses == expected
        server.proc.send_signal(signal.SIGTERM)  # drain the store
        assert await server.wait() == 0
    logs = server.stderr.read_bytes()
    events = [json.loads(line) for line in logs.splitlines() if line.startswith(b"{")]
    assert sum(e.get("event") == "request" for e in events) >= len(answers)  # logs really there
    stored = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("h.db"))
    turns = stored_turns(db)
    # Every chat request that got past the access check, handoff's own refusal (400) too.
    assert len(turns) == 8
    decoded = json.dumps(turns).encode()  # stored bodies may be zlib-packed: read them too
    for where, text in [("logs", logs), ("store", stored), ("turns", decoded)] + [
        (f"answer {i}", a) for i, a in enumerate(answers)
    ]:
        for canary in CANARIES:
            assert canary not in text, f"{canary!r} leaked into {where}"


# ---------------------------------------------------------------- what the store keeps

SECRETS = [
    "sk-proj-Abc123Def456Ghi789Jkl012",
    "AKIAIOSFODNN7EXAMPLE",
    "ghp_0123456789abcdefghijABCDEFGHIJ012345",
]


@pytest.mark.parametrize("redact", [True, False])
async def test_store_redact_masks_secrets_in_content(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, redact: bool
) -> None:
    """store.redact masks key-shaped secrets in messages and replies before writing;
    without it they are stored as sent (so the check can fail)."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "redact": redact})
    text = "my keys: " + " and ".join(SECRETS)
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        async with s.post(proxy.url + "/chat/completions", json=body) as r:
            assert r.status == 200
            assert SECRETS[0] in (await r.json())["choices"][0]["message"]["content"]
    await until(lambda: len(stored_turns(db)) == 1)
    await proxy.server.close()  # the writer drains; the files are final
    (turn,) = stored_turns(db)
    decoded = json.dumps(turn)
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("h.db"))
    for secret in SECRETS:
        if redact:
            assert secret not in decoded and secret.encode() not in raw
        else:
            assert secret in decoded
    if redact:
        assert "sk-proj-[REDACTED]" in turn["history"][0]["content"]
        assert "AKIA[REDACTED]" in turn["reply"]["content"]


PASTED = {
    "model": "github_pat_11ABCDEFG0123456789_modelmodelmodel",
    "x-handoff-workspace": "sk-ant-api03-Workspace0123456789abcdef",
    "x-handoff-session": "sk-proj-Session0123456789abcdefghij",
}


async def test_keys_pasted_as_model_workspace_or_session_reach_neither_logs_nor_store(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, capsys: Any
) -> None:
    """A key pasted as the model name, or in the workspace or session header, is masked in
    every log line, and with ``store.redact`` never stored: the workspace and session
    are kept as digests of what was sent, so two turns still thread into one session."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "redact": True})
    headers = {k: v for k, v in PASTED.items() if k.startswith("x-")}
    history: list[dict[str, Any]] = []
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        for content in ("first", "second"):
            history.append({"role": "user", "content": content})
            body = {"model": PASTED["model"], "messages": history}
            async with s.post(proxy.url + "/chat/completions", json=body, headers=headers) as r:
                await r.read()
    await until(lambda: len(stored_turns(db)) == 2)
    await proxy.server.close()  # the writer drains; the files are final
    logs = capsys.readouterr().err
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("h.db"))
    turns = json.dumps(stored_turns(db))
    for key in PASTED.values():
        assert key not in logs and key.encode() not in raw and key not in turns, key
    assert "[redacted]" in logs
    (session,) = SqliteReader(db).list_sessions()
    assert session["turns"] == 2 and session["workspace"].startswith("redacted-")


async def test_store_file_0600_and_directory_0700(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """The store handoff creates is private: directory 0700, database and WAL files 0600."""
    db = tmp_path / "fresh" / "h.db"
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db)})
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        async with s.post(proxy.url + "/chat/completions", json=CHAT) as r:
            assert r.status == 200
    await until(lambda: len(stored_turns(db)) == 1)
    assert db.parent.stat().st_mode & 0o777 == 0o700
    files = [p for p in db.parent.iterdir() if p.name.startswith("h.db")]
    assert db in files
    for p in files:
        assert p.stat().st_mode & 0o777 == 0o600, p.name


async def _one_stored_turn(proxy: Any, db: Path) -> None:
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        async with s.post(proxy.url + "/chat/completions", json=CHAT) as r:
            assert r.status == 200
    await until(lambda: len(stored_turns(db)) == 1)


def _modes(paths: list[Path]) -> dict[str, str]:
    return {p.name: f"{p.stat().st_mode & 0o777:04o}" for p in paths}


@pytest.mark.parametrize("writer", ["thread", "process"])
async def test_store_files_are_private_whatever_the_umask(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path, writer: str
) -> None:
    """Under umask 000 every directory handoff makes for the store (missing parents
    included) is 0700, and the database, its -wal, -shm and lock files 0600."""
    db = tmp_path / "a" / "b" / "h.db"
    old = os.umask(0)
    try:
        proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "writer": writer})
        await _one_stored_turn(proxy, db)
    finally:
        os.umask(old)
    files = sorted(db.parent.iterdir())
    assert {p.name for p in files} >= {"h.db", "h.db-wal", "h.db-shm", "h.db.lock"}
    assert _modes([tmp_path / "a", db.parent]) == {"a": "0700", "b": "0700"}
    assert _modes(files) == {p.name: "0600" for p in files}


@pytest.mark.parametrize("writer", ["thread", "process"])
async def test_a_store_open_to_others_is_warned_about_once_and_tightened(
    fake_upstream: FakeUpstream,
    make_proxy: MakeProxy,
    tmp_path: Path,
    writer: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A store found readable by others: one warning names what is open; the database and
    its -wal/-shm (ours) become 0600; the directory handoff did not make is left as is."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o755)
    db = shared / "h.db"
    connect(db).close()
    for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        p.touch()
        p.chmod(0o644)
    capsys.readouterr()
    proxy = await make_proxy(fake_upstream.url, store={"path": str(db), "writer": writer})
    await _one_stored_turn(proxy, db)
    assert _modes([shared]) == {"shared": "0755"}
    assert _modes([db, Path(f"{db}-wal"), Path(f"{db}-shm")]) == {
        "h.db": "0600",
        "h.db-wal": "0600",
        "h.db-shm": "0600",
    }
    warnings = [ln for ln in capsys.readouterr().err.splitlines() if "store_permissions" in ln]
    assert len(warnings) == 1, warnings
    for name in (f"{shared} 0755", "h.db 0644", "h.db-wal 0644", "h.db-shm 0644"):
        assert name in warnings[0]


SHADOWS = ("inspect", "json", "sqlite3")


async def test_modules_in_the_working_directory_never_reach_the_writer(
    fake_upstream: FakeUpstream, tmp_path: Path
) -> None:
    """``handoff serve`` started from a folder holding ``inspect.py``, ``json.py`` and
    ``sqlite3.py`` that would break any process importing them: its writer process
    imports the standard library's, and the turn is recorded."""
    here = tmp_path / "project"
    here.mkdir()
    for name in SHADOWS:
        (here / f"{name}.py").write_text(f'raise SystemExit("{name}.py of the working folder")\n')
    db = tmp_path / "h.db"
    args = ["--upstream", fake_upstream.url, "--store", str(db)]
    env = {"HANDOFF_STORE__WRITER": "process"}
    async with handoff_serve(tmp_path, args, env, cwd=here) as server:
        assert "writer: process" in server.banner
        async with aiohttp.ClientSession(timeout=BOUND) as s:
            await read_stream(s, server.url, "recorded")
            await until(lambda: len(stored_turns(db)) == 1, 15)
            async with s.get(server.root + "/healthz") as r:
                store = (await r.json())["store"]
        server.proc.send_signal(signal.SIGTERM)
        assert await server.wait() == 0
    assert store["ok"] and store["write_failures"] == 0
    assert "of the working folder" not in server.stderr.read_text()


# ---------------------------------------------------------------- where requests go


async def _raw_http(port: int, head: bytes, body: bytes = b"") -> bytes:
    """Send a hand-written HTTP/1.1 request (no client library normalising it)."""
    reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5)
    try:
        writer.write(head + b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body))
        writer.write(body)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def test_nothing_in_a_request_chooses_the_host(
    fake_upstream_factory: Any, make_proxy: MakeProxy
) -> None:
    """Absolute URLs, Host, X-Forwarded-Host, Forwarded, '//host' paths, '..%2F' escapes and
    base_url fields in the body never reach anything but the configured upstream's /v1."""
    good: FakeUpstream = await fake_upstream_factory()
    evil: FakeUpstream = await fake_upstream_factory()
    proxy = await make_proxy(good.url)
    port, evil_host = proxy.server.port, evil.url.split("/")[2]
    assert port is not None
    body = json.dumps({**CHAT, "base_url": evil.url, "api_base": evil.url}).encode()
    json_head = b"\r\nContent-Type: application/json"
    h = evil_host.encode()
    me = b"\r\nHost: localhost"  # a Host handoff answers to (any other it refuses at once)
    attempts = [
        b"POST http://" + h + b"/v1/chat/completions HTTP/1.1\r\nHost: " + h + json_head,
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: " + h + json_head,
        b"POST /v1/chat/completions HTTP/1.1" + me + b"\r\nX-Forwarded-Host: " + h + json_head,
        b"POST /v1/chat/completions HTTP/1.1" + me + b"\r\nForwarded: host=" + h + json_head,
        b"GET //" + h + b"/v1/models HTTP/1.1" + me,
        b"GET /v1//" + h + b"/v1/models HTTP/1.1" + me,
        b"GET /v1/http://" + h + b"/v1/models HTTP/1.1" + me,
        b"GET /v1/@" + h + b"/v1/models HTTP/1.1" + me,
        b"GET /v1/..%2F..%2Fadmin HTTP/1.1" + me,
        b"GET /v1/models/..%2F..%2F..%2Fadmin HTTP/1.1" + me,
    ]
    answers = [await _raw_http(port, a, body if a.startswith(b"POST") else b"") for a in attempts]
    assert all(a.startswith(b"HTTP/1.1 ") for a in answers)
    assert [a[9:12] for a in answers[-2:]] == [b"400", b"400"]  # escapes refused outright
    assert evil.requests == []
    assert good.requests and all(r.path.startswith("/v1/") for r in good.requests)


# ---------------------------------------------------------------- upstream TLS


@pytest.fixture(scope="module")
def self_signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for 127.0.0.1 (openssl CLI; skipped without it)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI to make a self-signed certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"),
            *("-keyout", str(key), "-out", str(cert), "-subj", "/CN=handoff-test"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return cert, key


@pytest.fixture
async def https_upstream(self_signed: tuple[Path, Path]) -> AsyncIterator[FakeUpstream]:
    """The fake upstream behind HTTPS with the self-signed certificate."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(*self_signed)
    fake = FakeUpstream()
    runner = web.AppRunner(fake.app(), shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    fake.attach(f"https://127.0.0.1:{runner.addresses[0][1]}/v1", runner.cleanup)
    yield fake
    await fake.stop()


def _tls_upstream(fake: FakeUpstream, ca: Path | None) -> dict[str, Any]:
    return {"name": "tls", "base_url": fake.url, "ca_bundle": str(ca) if ca else None}


async def test_self_signed_upstream_rejected_without_ca_bundle(
    https_upstream: FakeUpstream, make_proxy: MakeProxy
) -> None:
    """TLS is verified: a self-signed upstream gets a 502 that names the certificate problem."""
    proxy = await make_proxy(upstreams=[_tls_upstream(https_upstream, None)])
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        async with s.post(proxy.url + "/chat/completions", json=CHAT) as r:
            status, err = r.status, (await r.json())["error"]
    assert status == 502
    assert "certificate" in err["message"].lower() and "ca_bundle" in err["message"]
    assert https_upstream.chat_requests == []


async def test_self_signed_upstream_accepted_with_its_ca_bundle(
    https_upstream: FakeUpstream, make_proxy: MakeProxy, self_signed: tuple[Path, Path]
) -> None:
    """With ca_bundle naming its certificate, the same upstream serves, streaming too."""
    proxy = await make_proxy(upstreams=[_tls_upstream(https_upstream, self_signed[0])])
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        async with s.post(proxy.url + "/chat/completions", json=CHAT) as r:
            assert r.status == 200, await r.text()
        assert (await read_stream(s, proxy.url, "over tls"))[-1] == "[DONE]"
    assert len(https_upstream.chat_requests) == 2


def test_ssl_context_verifies_and_trusts_the_ca_bundle(self_signed: tuple[Path, Path]) -> None:
    """The upstream's SSL context requires a valid certificate and hostname, trusts the
    bundle, and is built once (aiohttp pools connections per context)."""
    plain = Upstream(name="p", base_url="https://x/v1", patterns=("*",))
    assert plain.ssl_context() is True  # aiohttp's default: verify against system CAs
    up = Upstream(name="t", base_url="https://x/v1", patterns=("*",), ca_bundle=str(self_signed[0]))
    ctx = up.ssl_context()
    assert isinstance(ctx, ssl.SSLContext)
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    subjects = [str(c["subject"]) for c in ctx.get_ca_certs()]
    assert any("handoff-test" in subject for subject in subjects)
    assert up.ssl_context() is ctx


def test_unreadable_ca_bundle_fails_at_start_naming_the_key(tmp_path: Path) -> None:
    """A ca_bundle that is missing or not PEM stops start-up with the key named."""
    from proxy.config import Settings
    from proxy.server.app import create_app

    bad = tmp_path / "bad.pem"
    bad.write_text("not a certificate")
    for path in (bad, tmp_path / "missing.pem"):
        ups = [{"name": "tls", "base_url": "https://127.0.0.1:1/v1", "ca_bundle": str(path)}]
        with pytest.raises(ConfigError, match=r"upstreams\[tls\]\.ca_bundle"):
            create_app(Settings(upstreams=ups, store={"enabled": False}))


async def test_message_content_is_logged_only_on_request(
    fake_upstream: Any, make_proxy: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Message text stays out of the logs unless server.log_content asks for it."""
    import openai

    for log_content in (False, True):
        proxy = await make_proxy(fake_upstream.url, server={"log_content": log_content})
        client = openai.AsyncOpenAI(base_url=proxy.url, api_key="k", max_retries=0)
        msgs = [{"role": "user", "content": f"a secret recipe {log_content}"}]
        await client.chat.completions.create(model="gpt-4o", messages=msgs)  # type: ignore[arg-type]
        await client.close()
        err = capsys.readouterr().err
        assert ("a secret recipe" in err) is log_content


async def test_one_canonical_request_event_with_its_fields(
    fake_upstream: Any, make_proxy: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each chat request logs exactly one 'request' event carrying the documented fields."""
    import openai

    proxy = await make_proxy(fake_upstream.url)
    capsys.readouterr()
    client = openai.AsyncOpenAI(base_url=proxy.url, api_key="k", max_retries=0)
    msgs = [{"role": "user", "content": "hi"}]
    await client.chat.completions.create(model="gpt-4o", messages=msgs, stream=True)  # type: ignore[arg-type]
    await client.close()
    # The test session logs in console format: "<time> [info     ] request  key=value ..."
    err = capsys.readouterr().err
    (line,) = [ln for ln in err.splitlines() if "] request " in ln and "path=/v1/chat" in ln]
    fields = dict(tok.split("=", 1) for tok in line.split() if "=" in tok)
    for field in (
        "request_id",
        "method",
        "path",
        "model",
        "upstream",
        "stream",
        "status",
        "upstream_status",
        "latency_ms",
        "bytes_out",
        "decision",
        "cancelled",
    ):
        assert field in fields, field
    assert fields["model"] == "gpt-4o" and fields["status"] == "200" and fields["stream"] == "True"
    assert int(fields["bytes_out"]) > 0 and fields["decision"] == "passthrough"
