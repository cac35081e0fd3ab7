"""``handoff serve``: run the proxy."""

from __future__ import annotations

import argparse
import errno
import sys
from typing import Any

import structlog

from proxy.config import Settings, load_settings
from proxy.log import configure_logging
from proxy.process_tuning import raise_open_file_limit, tune_malloc
from proxy.server.app import create_app
from proxy.server.serving import serve
from proxy.store.configured import store_writer
from proxy.store.errors import StoreInUse

DEFAULT_UPSTREAM = "https://api.openai.com/v1"


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser("serve", help="run the proxy")
    p.add_argument("--host", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="listen port (default 8787)")
    p.add_argument(
        "--upstream",
        metavar="URL",
        help="catch-all upstream base URL, e.g. https://api.openai.com/v1",
    )
    p.add_argument("--store", metavar="PATH", help="snapshot store file (SQLite)")
    p.add_argument("--no-store", action="store_true", help="do not record snapshots")
    p.add_argument("--log-format", choices=["console", "json"])
    p.set_defaults(func=run)


def settings_from_args(args: argparse.Namespace) -> Settings:
    server: dict[str, Any] = {}
    for key in ("host", "port", "log_format"):
        if getattr(args, key, None) is not None:
            server[key] = getattr(args, key)
    store: dict[str, Any] = {}
    if getattr(args, "store", None):
        store["path"] = args.store
    if getattr(args, "no_store", False):
        store["enabled"] = False
    overrides: dict[str, Any] = {}
    if server:
        overrides["server"] = server
    if store:
        overrides["store"] = store
    return load_settings(args.config, overrides)


def run(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    configure_logging(settings.server.log_format)
    tune_malloc()
    before, fd_limit = raise_open_file_limit()
    if fd_limit != before:
        structlog.get_logger("handoff").info(
            "open_file_limit_raised", before=before, after=fd_limit
        )
    catch_all = args.upstream
    if not settings.upstreams and not catch_all:
        catch_all = DEFAULT_UPSTREAM
        print(
            f"no upstream configured: forwarding every model to {DEFAULT_UPSTREAM} "
            "(use --upstream URL or [[upstreams]] in the config)",
            flush=True,
        )
    app = create_app(settings, catch_all=catch_all)
    host = settings.server.host

    def banner(port: int) -> None:  # once the store has started (and is ours) and it listens
        print(f"handoff listening on http://{host}:{port}/v1; {_snapshots(settings)}", flush=True)

    try:
        serve(app, settings.server, fd_limit, banner)
    except StoreInUse as e:
        print(f"handoff: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"handoff: {_cannot_listen(settings, e)}", file=sys.stderr)
        return 1
    return 0


def _cannot_listen(settings: Settings, e: OSError) -> str:
    where = f"{settings.server.host}:{settings.server.port}"
    if e.errno == errno.EADDRINUSE:
        return (
            f"cannot listen on {where}: the port is in use (another handoff?). Stop it, or "
            "choose another port with --port or server.port."
        )
    if e.errno == errno.EACCES:
        return f"cannot listen on {where}: permission denied; choose a port above 1023."
    return f"cannot listen on {where}: {e.strerror or e}"


def _snapshots(settings: Settings) -> str:
    if not settings.store.enabled:
        return "snapshots off"
    return f"snapshots in {settings.store_path()} (writer: {store_writer(settings.store)})"
