"""Upstreams: which server a model goes to, and how requests are addressed to it.

``[[upstreams]]`` entries are tried in order; the first whose ``models`` glob matches
wins, and ``--upstream`` adds a catch-all at the end. Each upstream owns one pooled
``aiohttp.ClientSession``. Nothing in a request can choose a URL: only configured
base URLs are ever contacted, and only below their paths (:mod:`proxy.upstream.paths`).
"""

from __future__ import annotations

import functools
import os
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from proxy.config import ConfigError, Settings, UpstreamSettings
from proxy.errors import InvalidRequest, NoRoute
from proxy.upstream.paths import check_path

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
# Request headers that are the proxy's to set, or handoff's own. The body handoff sends is
# never compressed (proxy.server.request_body decoded it): no Content-Encoding.
_DROP_REQUEST = HOP_BY_HOP | {"host", "content-length", "accept-encoding", "content-encoding"}
_HANDOFF_PREFIX = "x-handoff-"
_CHAT = "/chat/completions"


@functools.lru_cache(maxsize=1024)
def _forwardable(name: str) -> bool:
    """Cached by the name as the client spelled it: clients send the same few names
    on every request (one C-level lookup instead of a lower() and two tests)."""
    lower = name.lower()
    return lower not in _DROP_REQUEST and not lower.startswith(_HANDOFF_PREFIX)


@dataclass(slots=True)
class Upstream:
    name: str
    base_url: str
    patterns: tuple[str, ...]
    compress: bool = True
    api_key: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    ca_bundle: str | None = None
    kind: str = "any"
    """``openai``, ``anthropic``, or ``any`` (the ``--upstream`` catch-all): which wire
    formats' requests it is routed."""
    discover: bool | None = None
    """Asked for windows at start-up: True, False, or None (by its host)."""
    session: aiohttp.ClientSession | None = field(default=None, repr=False)
    _ssl: ssl.SSLContext | None = field(default=None, init=False, repr=False)
    _base: URL = field(init=False, repr=False)  # base_url's scheme, authority and path
    _root: str = field(init=False, repr=False)  # its path, without a trailing slash
    _chat: URL = field(init=False, repr=False)  # url(_CHAT), built once

    def __post_init__(self) -> None:
        base = URL(self.base_url)
        if base.raw_query_string or base.raw_fragment:
            raise ConfigError(
                f"upstreams[{self.name}].base_url: {self.base_url!r} has a query or fragment; "
                "give the URL requests are sent below, e.g. https://api.openai.com/v1"
            )
        self._base = base
        self._root = base.raw_path.rstrip("/")
        self._chat = self._build(_CHAT, "")

    def matches(self, model: str) -> bool:
        return any(fnmatchcase(model, p) for p in self.patterns)

    def url(self, raw_path: str, raw_query: str = "") -> URL:
        """The URL for ``raw_path`` below ``/v1`` (``/chat/completions``) and ``raw_query``,
        both as the client sent them, escapes intact: they are forwarded byte for byte
        (``encoded=True``: yarl neither decodes nor normalises them, and aiohttp sends
        ``raw_path_qs``). A path that could climb out of ``base_url``'s is refused
        (:func:`~proxy.upstream.paths.check_path`), and the URL built is checked to be below it."""
        if not raw_query and raw_path == _CHAT:
            return self._chat  # the common request: built and checked once
        return self._build(raw_path, raw_query)

    def _build(self, raw_path: str, raw_query: str) -> URL:
        check_path(raw_path)
        root = self._root
        url = URL.build(
            scheme=self._base.scheme,
            authority=self._base.raw_authority,
            path=root + raw_path,
            query_string=raw_query,
            encoded=True,
        )
        if not url.raw_path.startswith(root + "/"):
            raise InvalidRequest(
                f"The request path {raw_path!r} would leave upstream {self.name!r}'s base URL."
            )
        return url

    def request_headers(
        self, incoming: CIMultiDictProxy[str] | Mapping[str, str]
    ) -> CIMultiDict[str]:
        """Client headers minus hop-by-hop and handoff's own, plus this upstream's
        extras; ``api_key`` (from ``api_key_env``) replaces the client's key."""
        out = CIMultiDict([(k, v) for k, v in incoming.items() if _forwardable(k)])
        for k, v in self.headers.items():
            out[k] = v
        if self.api_key is not None and self.kind == "anthropic":
            out["x-api-key"] = self.api_key
            out.popall("Authorization", None)
        elif self.api_key is not None:
            out["Authorization"] = f"Bearer {self.api_key}"
            out.popall("api-key", None)
        out["Accept-Encoding"] = "identity"
        return out

    def ssl_context(self) -> ssl.SSLContext | bool:
        """Verification always on; with ``ca_bundle``, one context trusting that CA.

        Built once: aiohttp pools connections per SSL context object, so a fresh
        context per request would open (and keep) a new connection every time."""
        if not self.ca_bundle:
            return True
        if self._ssl is None:
            self._ssl = ssl.create_default_context(cafile=self.ca_bundle)
        return self._ssl


def build_upstreams(settings: Settings, catch_all: str | None = None) -> list[Upstream]:
    ups = [_from_settings(u) for u in settings.upstreams]
    if catch_all:
        ups.append(Upstream(name="default", base_url=catch_all.rstrip("/"), patterns=("*",)))
    return ups


def _from_settings(u: UpstreamSettings) -> Upstream:
    key = None
    if u.api_key_env:
        key = os.environ.get(u.api_key_env)
        if not key:
            raise ConfigError(
                f"upstreams[{u.name}].api_key_env: environment variable {u.api_key_env} "
                "is not set; export it, or remove api_key_env to forward the client's key"
            )
    up = Upstream(
        name=u.name,
        base_url=u.base_url,
        patterns=tuple(u.models),
        compress=u.compress,
        api_key=key,
        headers=dict(u.headers),
        ca_bundle=u.ca_bundle,
        kind=u.kind,
        discover=u.discover,
    )
    try:
        up.ssl_context()  # load the CA bundle now: a bad one fails at start-up, by name
    except (OSError, ssl.SSLError) as e:
        raise ConfigError(
            f"upstreams[{u.name}].ca_bundle: cannot load {u.ca_bundle!r} as PEM certificates: {e}"
        ) from None
    return up


class Router:
    def __init__(self, upstreams: Sequence[Upstream]):
        self.upstreams = list(upstreams)
        self._by_model: dict[tuple[str, str], Upstream] = {}  # glob matching, once per model

    def route(self, model: str | None, kind: str = "openai") -> Upstream:
        """The first upstream of ``kind`` (or ``any``) whose models match ``model``."""
        if model is not None:
            hit = self._by_model.get((model, kind))
            if hit is not None:
                return hit
            for up in self.upstreams:
                if up.kind in (kind, "any") and up.matches(model):
                    if len(self._by_model) < 10_000:
                        self._by_model[model, kind] = up
                    return up
        elif self.upstreams:
            return self.default(kind)
        names = ", ".join(
            f"{u.name} ({', '.join(u.patterns)})" for u in self.upstreams if u.kind in (kind, "any")
        )
        among = ' of kind = "anthropic"' if kind == "anthropic" else ""
        raise NoRoute(
            f"No upstream is configured for model {model!r}{among}. Configured: "
            f"{names or 'none'}. Add an [[upstreams]] entry{among} whose models match it, "
            "or start with --upstream URL.",
            param="model",
        )

    def default(self, kind: str = "openai") -> Upstream:
        """For requests that name no model (GET /v1/models…): the catch-all, else the
        first (of ``kind`` when there is one)."""
        fit = [u for u in self.upstreams if u.kind in (kind, "any")] or self.upstreams
        for up in fit:
            if "*" in up.patterns:
                return up
        return fit[0]

    def by_name(self, name: str) -> Upstream | None:
        return next((u for u in self.upstreams if u.name == name), None)
