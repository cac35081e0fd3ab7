"""The aiohttp application: built by :func:`create_app` from validated settings.

Request path: ``request_log`` (which also answers errors) → ``access`` (only with an access
key), then the route.
State lives under the typed :data:`~proxy.services.SERVICES` key; upstream sessions
and the store are opened and closed in ``cleanup_ctx`` generators (no globals).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hmac
import itertools
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import structlog
from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from proxy.build import build_engine, open_store
from proxy.chat import chat_completions
from proxy.config import Settings
from proxy.engine import Engine
from proxy.errors import HandoffError, Unauthorized, error_body
from proxy.inspect_api import create_inspect_app
from proxy.log import log_request
from proxy.metrics import Metrics
from proxy.passthrough import passthrough
from proxy.process_tuning import raise_gc_threshold
from proxy.request_log import REQUEST_FIELDS
from proxy.services import SERVICES, Planner, Services, history_cache
from proxy.store.base import Store
from proxy.store.process import ProcessStore
from proxy.store.read import SqliteReader
from proxy.store.sqlite import SqliteStore
from proxy.upstreams import Router, build_upstreams
from proxy.windows.discovery import fetch_model_windows

ENGINE = web.AppKey("engine", Engine)
DISCOVERY = web.AppKey("discovery", asyncio.Task[None])
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
log = structlog.get_logger("handoff")


def error_response(exc: Exception, fields: dict[str, Any]) -> web.Response | None:
    """Our own errors → OpenAI-shaped bodies. Anything unexpected is logged with its
    traceback and answered 500 in the same shape; the server keeps running. None:
    not ours to answer (a redirect, a client hang-up), so the caller re-raises."""
    if isinstance(exc, HandoffError):
        fields["error"] = exc.code or exc.type
        return web.json_response(exc.body(), status=exc.status)
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            return None
        return web.json_response(
            error_body(exc.reason, "invalid_request_error", None, None), status=exc.status
        )
    if isinstance(exc, (ConnectionResetError, aiohttp.ClientConnectionResetError)):
        return None
    log.exception("internal_error", exc_info=exc, **fields)
    return web.json_response(
        error_body("handoff hit an internal error; see its log.", "server_error"), status=500
    )


def request_logger() -> Middleware:
    """One canonical log event per request, with fields added along the way, and
    errors answered (one middleware, not two: each is a frame every await of the
    handler resumes through). Request ids are a random per-app prefix and a counter:
    unique, and cheaper than uuid4. No clear_contextvars: aiohttp runs each request
    in its own task, so bindings never outlive the request (aiohttp #3406)."""
    prefix = os.urandom(4).hex()
    counter = itertools.count()

    @web.middleware
    async def request_log(request: web.Request, handler: Handler) -> web.StreamResponse:
        request_id = request.headers.get("x-request-id") or f"{prefix}{next(counter):08x}"
        structlog.contextvars.bind_contextvars(request_id=request_id)
        fields: dict[str, Any] = {"method": request.method, "path": request.path}
        request[REQUEST_FIELDS] = fields
        t0 = time.perf_counter()
        status = 499
        try:
            try:
                resp = await handler(request)
            except Exception as e:
                answer = error_response(e, fields)
                if answer is None:
                    raise
                resp = answer
            status = resp.status
            return resp
        finally:
            latency_ms = round((time.perf_counter() - t0) * 1000, 2)
            fields["status"] = status
            fields["latency_ms"] = latency_ms
            log_request(request_id, fields)

    return request_log


def access_guard(access_key: str) -> Middleware:
    @web.middleware
    async def access(request: web.Request, handler: Handler) -> web.StreamResponse:
        if access_key and request.path != "/healthz":
            given = request.headers.get("x-handoff-key", "")
            if not hmac.compare_digest(given.encode(), access_key.encode()):
                err = Unauthorized(
                    "This handoff requires its access key: send it in the x-handoff-key header "
                    "(your own Authorization header still goes to the upstream)."
                )
                return web.json_response(err.body(), status=err.status)
        return await handler(request)

    return access


async def metrics_endpoint(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    body = await asyncio.to_thread(svc.metrics.render, svc.store)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def healthz(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    body: dict[str, object] = {"status": "ok", "upstreams": [u.name for u in svc.router.upstreams]}
    if svc.store is not None:
        h = svc.store.health()
        body["store"] = {
            "ok": h.ok,
            "path": h.path,
            "queue_depth": h.queue_depth,
            "write_failures": h.write_failures,
            "last_error": h.last_error,
            "writer": h.writer,
            "oldest_unwritten_s": None
            if h.oldest_unwritten_s is None
            else round(h.oldest_unwritten_s, 3),
        }
        if not h.ok:
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
    engine = build_engine(settings, router, metrics=metrics)
    if store is None:
        store = open_store(settings)
    timeout = aiohttp.ClientTimeout(
        total=None, connect=settings.timeouts.connect_s, sock_read=settings.timeouts.read_s
    )
    app = web.Application(
        middlewares=[request_logger(), access_guard(settings.server.access_key)]
        if settings.server.access_key
        else [request_logger()],
        client_max_size=settings.server.max_body_bytes,
    )
    app[SERVICES] = Services(
        settings=settings,
        router=router,
        planner=planner or engine,
        store=store,
        timeout=timeout,
        metrics=metrics,
        bodies=history_cache(settings),
    )
    app[ENGINE] = engine
    app.cleanup_ctx.append(_upstream_sessions)
    app.cleanup_ctx.append(_freeze_startup_objects)  # before warm: it unfreezes last
    app.cleanup_ctx.append(_warm_tokenizers)
    if settings.tokens.discover:
        app.cleanup_ctx.append(_discover_windows)
    if store is not None:
        app.cleanup_ctx.append(_store_lifecycle)
    app.router.add_get("/healthz", healthz)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/chat/completions", chat_completions)
    app.router.add_route("*", "/v1/{tail:.*}", passthrough)
    app.router.add_get("/metrics", metrics_endpoint)
    if isinstance(store, SqliteStore | ProcessStore):
        reader = SqliteReader(store.path)
        app.add_subapp("/handoff/v1", create_inspect_app(reader, settings.server.access_key))
    return app


async def _freeze_startup_objects(app: web.Application) -> AsyncIterator[None]:
    """Move the objects start-up built (modules, settings, tables: ~60k) to the garbage
    collector's permanent generation: they live as long as the server, and every
    full collection under load would otherwise walk them all (~60 ms each, a few
    times a second). And collect the young generation less often: at 700 allocations
    it ran every request or two and walked every in-flight request's objects, which
    then aged into older generations to be walked again; at concurrency 64 a 20,000
    threshold cut CPU per request by ~8% (reference counting still frees everything
    that is not a cycle at once). Both undone at shutdown."""
    thresholds = raise_gc_threshold()
    gc.freeze()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


async def _upstream_sessions(app: web.Application) -> AsyncIterator[None]:
    svc = app[SERVICES]
    for up in svc.router.upstreams:
        up.session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
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
    load = getattr(store, "load_calibration", None)
    if load is not None:
        engine.calibration.load(await asyncio.to_thread(load))
    yield
    save = getattr(store, "save_calibration", None)
    if save is not None:
        save(engine.calibration.snapshot())
    await store.close()


async def _warm_tokenizers(app: web.Application) -> AsyncIterator[None]:
    """Parse the BPE files in a worker thread while the server starts answering; then
    freeze what start-up built (:func:`_freeze_startup_objects`) once more."""
    task = asyncio.create_task(asyncio.to_thread(app[ENGINE].warm), name="handoff-warm")
    task.add_done_callback(lambda _: gc.freeze())
    yield
    with contextlib.suppress(Exception):
        await task  # a thread cannot be cancelled; it is short, so wait for it


async def _discover_windows(app: web.Application) -> AsyncIterator[None]:
    """Ask each upstream's GET /v1/models for windows, in one owned background task
    (requests never wait for it; it is cancelled at shutdown if still running)."""
    svc, engine = app[SERVICES], app[ENGINE]

    async def discover() -> None:
        for up in svc.router.upstreams:
            if up.session is None:
                continue
            headers = {"Authorization": f"Bearer {up.api_key}"} if up.api_key else {}
            windows = await fetch_model_windows(up.session, up.base_url, headers, 5.0)
            if windows:
                engine.registry.learn(up.name, windows)
                log.info("windows_discovered", upstream=up.name, models=len(windows))

    task = asyncio.create_task(discover(), name="handoff-discovery")
    app[DISCOVERY] = task
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
