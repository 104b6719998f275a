"""``httpx.Auth`` for an :class:`~tessera.AccessToken` (sync and async clients)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Generator

import httpx

if TYPE_CHECKING:
    from .models import AccessToken


class AccessTokenAuth(httpx.Auth):
    """Adds ``Authorization`` and, for a DPoP-bound token, a fresh ``DPoP`` proof
    (``htm``/``htu`` of the request, ``ath`` of the token) to every request. A
    resource server that answers 401 with ``WWW-Authenticate: DPoP
    error="use_dpop_nonce"`` and a ``DPoP-Nonce`` is asked once more with that
    nonce, which is remembered for its origin."""

    requires_request_body = False
    requires_response_body = False

    def __init__(self, token: "AccessToken") -> None:
        self._token = token

    def _apply(self, request: httpx.Request) -> None:
        for name, value in self._token.headers(request.method, str(request.url)).items():
            request.headers[name] = value

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
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
