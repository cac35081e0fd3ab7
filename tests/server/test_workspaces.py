"""Workspaces as access control, through the real proxy with its store: a client sees and
writes only the workspace its API key names (``x-handoff-workspace`` picks a sub-workspace
under it), another workspace's sessions answer exactly as missing ones do, and only the
access key's holder who asks for it gets the admin view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.store.read import SqliteReader
from tests.conftest import MakeProxy, ProxyHandle
from tests.fake_upstream import FakeUpstream
from tests.server.test_faults import BOUND, until
from tests.store.test_store_e2e import _sessions as _all_sessions  # every workspace's, as the CLI

ACCESS = "hk-admin-canary-41c9"
ALICE = {"Authorization": "Bearer sk-alice-0001"}
BOB = {"Authorization": "Bearer sk-bob-0002"}
ADMIN = {"x-handoff-admin": "1"}
SYS = {"role": "system", "content": "Be brief."}


async def _chat(
    s: aiohttp.ClientSession, proxy: ProxyHandle, headers: dict[str, str], messages: list[Any]
) -> dict[str, Any]:
    body = {"model": "gpt-4o", "messages": messages}
    async with s.post(proxy.url + "/chat/completions", json=body, headers=headers) as r:
        assert r.status == 200, await r.text()
        answer: dict[str, Any] = await r.json()
        return answer["choices"][0]["message"]


async def _get(
    s: aiohttp.ClientSession, proxy: ProxyHandle, path: str, headers: dict[str, str]
) -> tuple[int, Any]:
    async with s.get(proxy.root + "/handoff/v1" + path, headers=headers) as r:
        return r.status, await r.json()


async def _two_clients(
    s: aiohttp.ClientSession, proxy: ProxyHandle, db: Path, extra: dict[str, str] | None = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Alice and Bob each start a named session; their rows as the CLI lists them."""
    extra = extra or {}
    for who, name in ((ALICE, "alice-chat"), (BOB, "bob-chat")):
        headers = {**who, **extra, "x-handoff-session": name}
        await _chat(s, proxy, headers, [SYS, {"role": "user", "content": f"I am {name}"}])
    await until(lambda: len(_all_sessions(db)) == 2)
    by_name = {r["name"]: r for r in _all_sessions(db)}
    return by_name["alice-chat"], by_name["bob-chat"]


@pytest.fixture
async def proxy_db(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> tuple[ProxyHandle, Path]:
    db = tmp_path / "h.db"
    return await make_proxy(fake_upstream.url, store={"path": str(db)}), db


async def test_each_key_lists_only_its_own_sessions(proxy_db: tuple[ProxyHandle, Path]) -> None:
    """Two API keys: each lists its own session and not the other's, whatever
    ``workspace=`` it asks for; a client with no key sees neither."""
    proxy, db = proxy_db
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        alice, bob = await _two_clients(s, proxy, db)
        assert alice["workspace"] != bob["workspace"]
        for who, mine, theirs in ((ALICE, alice, bob), (BOB, bob, alice)):
            status, listing = await _get(s, proxy, "/sessions", who)
            assert status == 200 and [r["id"] for r in listing["data"]] == [mine["id"]]
            status, listing = await _get(
                s, proxy, f"/sessions?workspace={theirs['workspace']}", who
            )
            assert status == 200 and listing["data"] == []
        status, listing = await _get(s, proxy, "/sessions", {})
        assert status == 200 and listing["data"] == []


def _not_found_shape(body: dict[str, Any], ref: str) -> dict[str, Any]:
    """The error with the asked-for reference taken out of its message."""
    err = dict(body["error"])
    err["message"] = err["message"].replace(ref, "<ref>")
    return err


async def test_another_workspaces_session_is_answered_as_missing(
    proxy_db: tuple[ProxyHandle, Path],
) -> None:
    """Bob's session, by id, by its start or end, by its name, and each route under it,
    answers Alice exactly as an id that exists nowhere does: 404 and the same body."""
    proxy, db = proxy_db
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        _, bob = await _two_clients(s, proxy, db)
        sid = bob["id"]
        missing = "f" * len(sid)  # ids start with the time, so none begins with f yet
        refs = [(sid, missing), (sid[:-3], missing[:-3]), (sid[5:], missing[5:])]
        refs.append(("bob-chat", "nobody-chat"))
        for ref, absent in refs:
            for tail in ("", "/turns/1", "/diff/1", "/export"):
                got = await _get(s, proxy, f"/sessions/{ref}{tail}", ALICE)
                none = await _get(s, proxy, f"/sessions/{absent}{tail}", ALICE)
                assert got[0] == none[0] == 404, (ref, tail, got)
                assert _not_found_shape(got[1], ref) == _not_found_shape(none[1], absent)
        # Bob reads his own by each of the same references.
        for ref, _ in refs:
            status, info = await _get(s, proxy, f"/sessions/{ref}", BOB)
            assert status == 200 and info["id"] == sid


async def test_a_shared_prefix_names_only_the_callers_session(
    proxy_db: tuple[ProxyHandle, Path],
) -> None:
    """Ids begun at nearly the same time share a start: to Alice it names her session
    alone (not 'ambiguous', which would tell her Bob's exists)."""
    proxy, db = proxy_db
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        alice, bob = await _two_clients(s, proxy, db)
        n = next(i for i, (a, b) in enumerate(zip(alice["id"], bob["id"], strict=True)) if a != b)
        shared = alice["id"][:n]
        assert len(shared) >= 4
        for who, mine in ((ALICE, alice), (BOB, bob)):
            status, info = await _get(s, proxy, f"/sessions/{shared}", who)
            assert status == 200 and info["id"] == mine["id"]


async def test_workspace_header_cannot_reach_another_workspace(
    proxy_db: tuple[ProxyHandle, Path],
) -> None:
    """Bob naming Alice's workspace (as the listing shows it) and her session continues
    nothing of hers: the turn lands in a sub-workspace under Bob's own key, and Alice's
    session keeps its one turn."""
    proxy, db = proxy_db
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        alice, bob = await _two_clients(s, proxy, db)
        first = [SYS, {"role": "user", "content": "I am alice-chat"}]
        reply = SqliteReader(db).turn(alice["id"], 1)["reply"]
        continued = [*first, reply, {"role": "user", "content": "bob writes here"}]
        forged = {
            **BOB,
            "x-handoff-workspace": alice["workspace"],
            "x-handoff-session": "alice-chat",
        }
        await _chat(s, proxy, forged, continued)
        by_history = {**BOB, "x-handoff-workspace": alice["workspace"]}
        await _chat(s, proxy, by_history, [*continued[:-1], {"role": "user", "content": "again"}])
        await until(lambda: sum(r["turns"] for r in _all_sessions(db)) == 4)
        rows = {r["id"]: r for r in _all_sessions(db)}
        assert rows[alice["id"]]["turns"] == 1
        new = [r for r in rows.values() if r["id"] not in (alice["id"], bob["id"])]
        assert {r["workspace"] for r in new} == {f"{bob['workspace']}/{alice['workspace']}"}
        # Alice still lists only her own; Bob lists his and his sub-workspace's.
        status, listing = await _get(s, proxy, "/sessions", ALICE)
        assert status == 200 and [r["id"] for r in listing["data"]] == [alice["id"]]
        status, listing = await _get(s, proxy, "/sessions", BOB)
        assert status == 200 and {r["id"] for r in listing["data"]} == {
            bob["id"],
            *(r["id"] for r in new),
        }


async def test_a_session_name_never_threads_across_workspaces(
    proxy_db: tuple[ProxyHandle, Path],
) -> None:
    """Bob sending Alice's session name starts a session of his own under that name."""
    proxy, db = proxy_db
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        alice, bob = await _two_clients(s, proxy, db)
        hint = {**BOB, "x-handoff-session": "alice-chat"}
        await _chat(s, proxy, hint, [SYS, {"role": "user", "content": "bob again"}])
        await until(lambda: len(_all_sessions(db)) == 3)
        rows = {r["id"]: r for r in _all_sessions(db)}
        assert rows[alice["id"]]["turns"] == 1
        (new,) = [r for r in rows.values() if r["id"] not in (alice["id"], bob["id"])]
        assert (new["workspace"], new["name"]) == (bob["workspace"], "alice-chat")


async def test_no_key_means_the_local_default_workspace(
    proxy_db: tuple[ProxyHandle, Path],
) -> None:
    """A client with no key writes to 'default' (its header picks 'default/<name>') and
    sees those; a keyed client does not."""
    proxy, db = proxy_db
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        await _chat(s, proxy, {}, [{"role": "user", "content": "local one"}])
        team = {"x-handoff-workspace": "team"}
        await _chat(s, proxy, team, [{"role": "user", "content": "local two"}])
        await until(lambda: len(_all_sessions(db)) == 2)
        assert {r["workspace"] for r in _all_sessions(db)} == {"default", "default/team"}
        status, listing = await _get(s, proxy, "/sessions", {})
        assert status == 200 and len(listing["data"]) == 2
        status, listing = await _get(s, proxy, "/sessions", ALICE)
        assert status == 200 and listing["data"] == []


async def test_admin_view_needs_the_access_key_and_asking(
    fake_upstream: FakeUpstream, make_proxy: MakeProxy, tmp_path: Path
) -> None:
    """With server.access_key presented, a client still sees its own workspace unless it
    asks for the admin view (x-handoff-admin), which then lists and reads every one."""
    db = tmp_path / "h.db"
    proxy = await make_proxy(
        fake_upstream.url, server={"access_key": ACCESS}, store={"path": str(db)}
    )
    key = {"x-handoff-key": ACCESS}
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        alice, bob = await _two_clients(s, proxy, db, key)
        status, listing = await _get(s, proxy, "/sessions", {**ALICE, **key})
        assert status == 200 and [r["id"] for r in listing["data"]] == [alice["id"]]
        status, _ = await _get(s, proxy, f"/sessions/{bob['id']}", {**ALICE, **key})
        assert status == 404
        admin = {**ALICE, **key, **ADMIN}
        status, listing = await _get(s, proxy, "/sessions", admin)
        assert status == 200 and {r["id"] for r in listing["data"]} == {alice["id"], bob["id"]}
        status, info = await _get(s, proxy, f"/sessions/{bob['id']}", admin)
        assert status == 200 and info["workspace"] == bob["workspace"]
        q = f"/sessions?workspace={bob['workspace']}"
        status, listing = await _get(s, proxy, q, admin)
        assert [r["id"] for r in listing["data"]] == [bob["id"]]
        status, body = await _get(s, proxy, "/sessions", {**ALICE, **ADMIN})
        assert status == 401 and "x-handoff-key" in body["error"]["message"]


async def test_admin_view_refused_without_an_access_key(
    proxy_db: tuple[ProxyHandle, Path],
) -> None:
    """With no server.access_key there is no admin view over HTTP: asking for it is a 403
    that says how to get one, and nothing is listed."""
    proxy, db = proxy_db
    async with aiohttp.ClientSession(timeout=BOUND) as s:
        await _two_clients(s, proxy, db)
        for path in ("/sessions", "/sessions/bob-chat"):
            status, body = await _get(s, proxy, path, {**ALICE, **ADMIN, "x-handoff-key": "x"})
            assert status == 403, body
            err = body["error"]
            assert set(err) == {"message", "type", "param", "code"}
            assert err["type"] == "permission_error"
            assert "server.access_key" in err["message"] and "handoff sessions" in err["message"]
