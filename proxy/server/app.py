"""The aiohttp application: built by :func:`create_app` from validated settings.

Every route is wrapped by :class:`~proxy.server.endpoint.Endpoints` (canonical log event,
browser guard, access key, OpenAI-shaped errors); there is no middleware, and unknown
paths reach a catch-all route of their own.
State lives under the typed :data:`~proxy.server.services.SERVICES` key; upstream sessions
and the store are opened and closed in ``cleanup_ctx`` generators (no globals).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import structlog
from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from proxy.config import Settings
from proxy.decide.engine import Engine
from proxy.decide.plan import Planner
from proxy.decide.windows.discovery import fetch_listing
from proxy.decide.windows.local_servers import fetch_server_windows, probe_server
from proxy.errors import anthropic_shape
from proxy.process_tuning import raise_gc_threshold
from proxy.server.browser_guard import BrowserGuard
from proxy.server.build import build_engine, memory_refiner
from proxy.server.count_tokens import count_tokens
from proxy.server.endpoint import CATCH_ALL, Endpoints, expect_continue, unmatched
from proxy.server.exchange import anthropic_messages, chat_completions, responses
from proxy.server.inspect_api import add_inspect_routes
from proxy.server.mcp_http import add_mcp_route
from proxy.server.mcp_tools import McpWorld
from proxy.server.memory_keeper import MemoryKeeper
from proxy.server.metrics import Metrics
from proxy.server.recall_source import store_recall
from proxy.server.relay import passthrough
from proxy.server.responses_socket import responses_get
from proxy.server.services import SERVICES, Services, history_cache
from proxy.server.store_gate import StoreGate
from proxy.store.base import Store
from proxy.store.configured import open_store
from proxy.store.errors import StoreError
from proxy.upstream.kept_alive import KeptAliveConnector
from proxy.upstream.routing import Router, build_upstreams

ENGINE = web.AppKey("engine", Engine)
DISCOVERY = web.AppKey("discovery", asyncio.Task[None])
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = structlog.get_logger("handoff")


async def metrics_endpoint(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    body = await asyncio.to_thread(svc.metrics.render, svc.store, svc.gate)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def healthz(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    body: dict[str, object] = {"status": "ok", "upstreams": [u.name for u in svc.router.upstreams]}
    if svc.store is not None:
        h = svc.store.health()
        store: dict[str, object] = {
            "ok": h.ok,
            "path": h.path,
            "queue_depth": h.queue_depth,
            "write_failures": h.write_failures,
            "lost_turns": h.lost_turns,
            "last_error": h.last_error,
            "writer": h.writer,
            "oldest_unwritten_s": None
            if h.oldest_unwritten_s is None
            else round(h.oldest_unwritten_s, 3),
            "slowest_write_s": round(h.slowest_write_s, 3),
        }
        if svc.gate is not None:  # requests held for a writer behind (store_gate)
            store.update(
                held_requests=svc.gate.held,
                held_s=round(svc.gate.held_s, 3),
                writer_stalls=svc.gate.stalls,
            )
        body["store"] = store
        if not h.ok or h.lost_turns:  # (turns lost since start: degraded for good)
            body["status"] = "degraded"
    return web.json_response(body)


def create_app(
    settings: Settings,
    *,
    catch_all: str | None = None,
    store: Store | None = None,
    planner: Planner | None = None,
) -> web.Application:
    """The proxy. ``store`` defaults to the configured SQLite store (None if disabled);
    ``planner`` to the decision engine built from ``settings``."""
    router = Router(build_upstreams(settings, catch_all))
    metrics = Metrics()
    if store is None:
        store = open_store(settings)
    reader = store.reader() if store is not None else None
    recall = store_recall(reader) if reader is not None and settings.recall.enabled else None
    engine = build_engine(settings, router, metrics=metrics, recall=recall, store=store)
    keeper = None
    if store is not None and settings.memory.enabled:
        keeper = MemoryKeeper(settings, store, memory_refiner(settings, router))
    timeout = aiohttp.ClientTimeout(
        total=None, connect=settings.timeouts.connect_s, sock_read=settings.timeouts.read_s
    )
    # Request bodies are decoded by proxy.server.request_body, not by aiohttp's parser.
    app = web.Application(
        client_max_size=settings.server.max_body_bytes,
        handler_args={"auto_decompress": False},
    )
    app[SERVICES] = Services(
        settings=settings,
        router=router,
        planner=planner or engine,
        store=store,
        gate=_gate(settings, store),
        timeout=timeout,
        metrics=metrics,
        bodies=history_cache(settings),
        memories=keeper,
    )
    app[ENGINE] = engine
    app.cleanup_ctx.append(_upstream_sessions)
    app.cleanup_ctx.append(_freeze_startup_objects)  # before warm: it unfreezes last
    app.cleanup_ctx.append(_warm_tokenizers)
    app.cleanup_ctx.append(_counting_threads)
    if settings.tokens.discover:
        app.cleanup_ctx.append(_discover_windows)
    if store is not None:
        app.cleanup_ctx.append(_store_lifecycle)
    if keeper is not None:
        app.cleanup_ctx.append(_memory_keeper)  # (after the store: stops before it closes)
    guard = BrowserGuard.from_settings(settings.server)
    guard.install(app)
    wrap = Endpoints(settings.server.access_key, guard).wrap
    expect = expect_continue
    app.router.add_get("/healthz", wrap(healthz, open_to_all=True), expect_handler=expect)
    app.router.add_post("/v1/chat/completions", wrap(chat_completions), expect_handler=expect)
    app.router.add_post("/chat/completions", wrap(chat_completions), expect_handler=expect)
    messages = wrap(anthropic_messages, shape=anthropic_shape)
    app.router.add_post("/v1/messages", messages, expect_handler=expect)
    counting = wrap(count_tokens, shape=anthropic_shape)
    app.router.add_post("/v1/messages/count_tokens", counting, expect_handler=expect)
    app.router.add_post("/v1/responses", wrap(responses), expect_handler=expect)
    app.router.add_get("/v1/responses", wrap(responses_get), expect_handler=expect)
    app.router.add_route("*", "/v1/{tail:.*}", wrap(passthrough), expect_handler=expect)
    app.router.add_get("/metrics", wrap(metrics_endpoint), expect_handler=expect)
    if reader is not None:
        add_inspect_routes(app, reader, settings.server.access_key, wrap)
    save = store.save_memory if store is not None else None
    world = McpWorld(settings, engine, router, reader, save)
    add_mcp_route(app, world, settings.server.access_key, wrap)
    # last: only what nothing else serves
    app.router.add_route("*", CATCH_ALL, wrap(unmatched), expect_handler=expect)
    return app


def _gate(settings: Settings, store: Store | None) -> StoreGate | None:
    s = settings.store
    if store is None or s.max_lag_s == 0:
        return None
    return StoreGate(store, s.max_lag_s, s.max_hold_s)


async def _freeze_startup_objects(app: web.Application) -> AsyncIterator[None]:
    """Move the objects start-up built (modules, settings, tables) to the garbage
    collector's permanent generation: they live as long as the server, and every full
    collection under load would otherwise walk them all. And collect the young
    generation less often, so it does not walk every in-flight request's objects every
    request or two (figures in bench/NOTES.md). Both undone at shutdown."""
    thresholds = raise_gc_threshold()
    gc.freeze()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


async def _upstream_sessions(app: web.Application) -> AsyncIterator[None]:
    svc = app[SERVICES]
    for up in svc.router.upstreams:
        up.session = aiohttp.ClientSession(
            connector=KeptAliveConnector(limit=0, ttl_dns_cache=300),  # see send()
            auto_decompress=True,
            timeout=svc.timeout,
        )
    yield
    for up in svc.router.upstreams:
        if up.session is not None:
            await up.session.close()
            up.session = None


async def _store_lifecycle(app: web.Application) -> AsyncIterator[None]:
    store = app[SERVICES].store
    assert store is not None
    await store.start()
    engine = app[ENGINE]
    try:
        engine.calibration.load(await asyncio.to_thread(store.load_calibration))
        learned = engine.registry.limits.load(await asyncio.to_thread(store.load_limits))
        if learned:
            engine.registry.forget_lookups()
            log.info("learned_windows_loaded", models=learned)
    except (StoreError, sqlite3.Error) as e:  # the store's own health says it too
        log.warning("calibration_not_loaded", error=str(e))
    engine.registry.limits.on_change = store.save_limits
    yield
    engine.registry.limits.on_change = None
    gate = app[SERVICES].gate
    if gate is not None:
        await gate.close()
    store.save_calibration(engine.calibration.snapshot())
    await store.close()


async def _memory_keeper(app: web.Application) -> AsyncIterator[None]:
    """The memory keeper's task: started with the app, drained and stopped before the store."""
    keeper = app[SERVICES].memories
    assert keeper is not None
    keeper.start()
    yield
    await keeper.close()


async def _warm_tokenizers(app: web.Application) -> AsyncIterator[None]:
    """Parse the BPE files in a worker thread while the server starts answering; then
    freeze what start-up built (:func:`_freeze_startup_objects`) once more."""
    task = asyncio.create_task(asyncio.to_thread(app[ENGINE].warm), name="handoff-warm")
    task.add_done_callback(lambda _: gc.freeze())
    yield
    with contextlib.suppress(Exception):
        await task  # a thread cannot be cancelled; it is short, so wait for it


async def _counting_threads(app: web.Application) -> AsyncIterator[None]:
    """The engine's counting threads (:mod:`proxy.decide.count_lanes`) stop with the app."""
    yield
    app[ENGINE].close()


async def _discover_windows(app: web.Application) -> AsyncIterator[None]:
    """Ask each upstream's GET /v1/models, and a local server's own endpoints
    (:mod:`~proxy.decide.windows.local_servers`), for windows, in one owned background task
    (requests never wait for it; it is cancelled at shutdown if still running)."""
    svc, engine = app[SERVICES], app[ENGINE]

    async def discover() -> None:
        for up in svc.router.upstreams:
            if up.session is None or up.kind == "anthropic" or up.discover is False:
                continue  # an Anthropic list names no windows
            headers = {"Authorization": f"Bearer {up.api_key}"} if up.api_key else {}
            windows, listed = await fetch_listing(up.session, up.base_url, headers, 5.0)
            kind = None
            if probe_server(up.base_url, up.discover):
                served, kind = await fetch_server_windows(
                    up.session, up.base_url, headers, 5.0, listed
                )
                windows.update(served)  # what the server runs with beats what it lists
            if windows:
                engine.registry.learn(up.name, windows)
                log.info("windows_discovered", upstream=up.name, models=len(windows), server=kind)

    task = asyncio.create_task(discover(), name="handoff-discovery")
    app[DISCOVERY] = task
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
