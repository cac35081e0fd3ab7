"""Requests a web page can make the user's browser send: refused unless handoff was told
to expect them.

Any page can make a browser send requests to 127.0.0.1, and a page whose DNS name is
rebound to 127.0.0.1 is taken by the browser for same-origin with handoff. So a request
whose ``Host`` is not a loopback name, ``server.host`` or a ``server.allowed_hosts``
entry is refused (421), and one a browser marks as sent by another site's page (an
``Origin`` not in ``server.allowed_origins``, or ``Sec-Fetch-Site`` saying another site)
is refused (403). Preflights (``OPTIONS``) are answered here and never relayed; an
allowed origin is granted CORS for exactly itself (``forward`` drops the upstream's own
grant). Three header lookups a request (bench/NOTES.md: "The browser guard").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from aiohttp import hdrs, web
from multidict import istr

from proxy.config import ServerSettings
from proxy.errors import Forbidden, MisdirectedHost

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
_SEC_FETCH_SITE = istr("Sec-Fetch-Site")  # an istr key is not case-folded at each lookup
_OTHER_SITE = frozenset({"cross-site", "same-site"})
"""``Sec-Fetch-Site`` values a browser sends for another site's page (same-site: another
port or subdomain, which may be anyone's)."""
_MAX_SEEN = 64
"""Host values remembered as ours, as sent (a name with each port it came by, in each case)."""


class BrowserGuard:
    """The Host names handoff answers to (``name`` for any port, ``name:port`` for one)
    and the web origins whose pages it serves."""

    def __init__(self, hosts: Iterable[str] = LOOPBACK_NAMES, origins: Iterable[str] = ()):
        self._hosts = frozenset(h.lower() for h in hosts)
        self._origins = frozenset(origins)
        self._seen = set(self._hosts)  # Host values found ours, as sent: one lookup next time

    @classmethod
    def from_settings(cls, server: ServerSettings) -> BrowserGuard:
        bound = f"[{server.host}]" if ":" in server.host else server.host
        return cls([*LOOPBACK_NAMES, bound, *server.allowed_hosts], server.allowed_origins)

    def check(self, headers: Mapping[str, str]) -> None:
        """Raise :class:`MisdirectedHost` or :class:`Forbidden` for a request to refuse."""
        host = headers.get(hdrs.HOST)
        if host is not None and host not in self._seen:
            self._admit(host)
        origin = headers.get(hdrs.ORIGIN)
        if origin is not None:
            if origin not in self._origins:
                raise Forbidden(
                    f"handoff does not serve the web pages of {origin[:200]!r} (a browser sent "
                    "this request for one). To let a page of yours call handoff, add its "
                    "origin to server.allowed_origins.",
                    code="origin_not_allowed",
                )
        elif headers.get(_SEC_FETCH_SITE) in _OTHER_SITE:
            raise Forbidden(
                "handoff does not serve other sites' web pages (a browser sent this request "
                "for one). A page of yours may call handoff once its origin is in "
                "server.allowed_origins.",
                code="origin_not_allowed",
            )

    def _admit(self, host: str) -> None:
        """Remember ``host`` if it is ours in another case or with a port, else refuse it."""
        h = host.lower()
        name, sep, port = h.rpartition(":")
        if h not in self._hosts and not (sep and port.isdigit() and name in self._hosts):
            raise MisdirectedHost(
                f"handoff does not answer to the Host {host[:200]!r}: a web page may have "
                "pointed a DNS name of its own at this machine. If you reach handoff by this "
                "name, add it to server.allowed_hosts."
            )
        if len(self._seen) < _MAX_SEEN:
            self._seen.add(host)

    def preflight(self, headers: Mapping[str, str]) -> web.Response:
        """The answer to an ``OPTIONS`` that :meth:`check` let through: a grant for an
        allowed origin, for the method and headers it asks about; else no grant."""
        resp = web.Response(status=204)
        origin = headers.get(hdrs.ORIGIN)
        if origin is not None:
            _grant(resp, origin)
            method = headers.get(hdrs.ACCESS_CONTROL_REQUEST_METHOD, "GET, POST")
            resp.headers[hdrs.ACCESS_CONTROL_ALLOW_METHODS] = method[:100]
            asked = headers.get(hdrs.ACCESS_CONTROL_REQUEST_HEADERS)
            if asked:
                resp.headers[hdrs.ACCESS_CONTROL_ALLOW_HEADERS] = asked[:1000]
            resp.headers[hdrs.ACCESS_CONTROL_MAX_AGE] = "600"
        return resp

    def install(self, app: web.Application) -> None:
        """Grant CORS on allowed origins' answers, streamed ones too (their headers go out
        before the handler returns); nothing is added when no origin is allowed."""
        if self._origins:
            app.on_response_prepare.append(self._grant_allowed)

    async def _grant_allowed(self, request: web.Request, response: web.StreamResponse) -> None:
        origin = request.headers.get(hdrs.ORIGIN)
        if origin is not None and origin in self._origins:
            _grant(response, origin)


def _grant(response: web.StreamResponse, origin: str) -> None:
    """CORS for ``origin`` alone, without credentials (handoff uses no cookies)."""
    response.headers[hdrs.ACCESS_CONTROL_ALLOW_ORIGIN] = origin
    response.headers[hdrs.ACCESS_CONTROL_EXPOSE_HEADERS] = "*"
    if "Origin" not in response.headers.getall(hdrs.VARY, ()):
        response.headers.add(hdrs.VARY, "Origin")
