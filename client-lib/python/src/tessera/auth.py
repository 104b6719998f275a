"""``httpx.Auth`` for an :class:`~tessera.AccessToken` (sync and async clients)."""

from __future__ import annotations

import re
import urllib.parse
from typing import TYPE_CHECKING, Generator

import httpx

from .errors import ConfigError

if TYPE_CHECKING:
    from .models import AccessToken


class AccessTokenAuth(httpx.Auth):
    """Adds ``Authorization`` and, for a DPoP-bound token, a fresh ``DPoP`` proof
    (``htm``/``htu`` of the request, ``ath`` of the token) to every request. A
    resource server that answers 401 with ``WWW-Authenticate: DPoP
    error="use_dpop_nonce"`` and a ``DPoP-Nonce`` is asked once more with that
    nonce, which is remembered for its origin.

    The token goes to its resource server only: a request to another origin
    (scheme, host and port of ``token.resource``) or outside the resource's path
    raises :class:`~tessera.ConfigError` before anything is sent (a redirect, or a
    client shared with other hosts, would hand the token to whoever answers there)."""

    requires_request_body = False
    requires_response_body = False

    def __init__(self, token: "AccessToken") -> None:
        self._token = token

    def _check(self, request: httpx.Request) -> None:
        resource = self._token.resource
        if not within(str(request.url), resource):
            url = request.url
            raise ConfigError(
                f"refusing to send the access token for {resource} to {url.scheme}://{url.netloc.decode()}"
                f"{url.path}: it is for its resource (that origin, under that path) only"
            )

    def _apply(self, request: httpx.Request) -> None:
        for name, value in self._token.headers(request.method, str(request.url)).items():
            request.headers[name] = value

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        self._check(request)
        self._apply(request)
        response = yield request
        key = self._token.dpop_key
        if key is None or not self._token.bound:
            return
        nonce = response.headers.get("dpop-nonce")
        if nonce:
            key.remember_nonce(str(request.url), nonce)
        challenge = response.headers.get("www-authenticate", "")
        if response.status_code == 401 and nonce and "use_dpop_nonce" in challenge:
            self._apply(request)
            response = yield request
            again = response.headers.get("dpop-nonce")
            if again:
                key.remember_nonce(str(request.url), again)

    def __repr__(self) -> str:
        return f"AccessTokenAuth({self._token!r})"


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(u: urllib.parse.SplitResult) -> tuple[str, str, int | None]:
    scheme = u.scheme.lower()
    return scheme, (u.hostname or "").lower(), u.port or _DEFAULT_PORTS.get(scheme)


def within(url: str, resource: str) -> bool:
    """Whether ``url`` is on ``resource``'s origin (scheme, host, port; default ports
    as such) and at or under its path (``/mcp`` covers ``/mcp`` and ``/mcp/…``, not
    ``/mcpx``)."""
    try:
        u, r = urllib.parse.urlsplit(url), urllib.parse.urlsplit(resource)
        if _origin(u) != _origin(r) or not r.hostname:
            return False
    except ValueError:  # a port that is not a number
        return False
    base = _normalized(r.path).rstrip("/")
    path = _normalized(u.path)
    return not base or path == base or path.startswith(base + "/")


def _normalized(path: str) -> str:
    """The path with dot segments removed (RFC 3986 §5.2.4), ``%2E`` read as ``.``
    (§6.2.2.2: a server may decode it): ``/mcp/%2e%2e/admin`` is ``/admin``."""
    out: list[str] = []
    segments = re.sub("%2[eE]", ".", path or "/").split("/")
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
        elif seg == ".":
            if last:
                out.append("")
        else:
            out.append(seg)
    return "/".join(out) if out and out[0] == "" else "/" + "/".join(out)
