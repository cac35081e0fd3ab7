"""An upstream that records every request exactly as it arrived, whatever its path.

Mounted under a base path (``/tenant-a/v1`` by default) with one catch-all route, so a
request that escaped the base path is recorded too, and a test can see where it landed
and with which ``Authorization``. Chat requests (POST) under the base get a minimal completion;
everything else an empty JSON object.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web
from multidict import CIMultiDictProxy

from tests.fake_upstream import build_completion


@dataclass(frozen=True)
class Seen:
    """One request as it came off the wire: the raw path and query, headers, body."""

    method: str
    raw_path: str  # without the query, percent-escapes as received
    raw_query: str
    headers: CIMultiDictProxy[str]
    body: bytes


@dataclass
class RecordingUpstream:
    base_path: str = "/tenant-a/v1"
    seen: list[Seen] = field(default_factory=list)
    url: str = ""
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]] | None = None
    """Answers instead of the default, after the request is recorded (its body unread)."""

    def app(self) -> web.Application:
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._any)
        return app

    def outside(self) -> list[Seen]:
        """Requests that did not stay below the base path."""
        return [s for s in self.seen if not s.raw_path.startswith(self.base_path + "/")]

    async def _any(self, request: web.Request) -> web.StreamResponse:
        if self.handler is not None:
            self.seen.append(self._seen(request, b""))
            return await self.handler(request)
        body = await request.read()
        self.seen.append(self._seen(request, body))
        chat = request.rel_url.raw_path == self.base_path + "/chat/completions"
        if chat and request.method == "POST":
            try:
                return web.json_response(build_completion(json.loads(body), 10))
            except (ValueError, KeyError, TypeError, AttributeError):
                return web.json_response({"error": {"message": "bad chat body"}}, status=400)
        return web.json_response({})

    @staticmethod
    def _seen(request: web.Request, body: bytes) -> Seen:
        url = request.rel_url
        return Seen(request.method, url.raw_path, url.raw_query_string, request.headers, body)
