"""``requests`` through the egress gateway (the ``requests`` extra)."""

from __future__ import annotations

import os
import ssl
import tempfile
from typing import Any, Callable

import requests
from requests.adapters import HTTPAdapter

from ._approval import gateway_approval
from ._secret import Secret
from .models import GatewaySession


class _GatewayAdapter(HTTPAdapter):
    """Sends the run token to the gateway as ``Proxy-Authorization`` (on
    ``CONNECT`` and on absolute-form requests), never in a proxy URL, where an
    error message could show it. With ``wait`` (a function that waits for an
    approval and returns it), a request the gateway holds for an approval is
    sent once more, identical, when the approval is given: it then passes once."""

    def __init__(
        self, token: Secret, wait: Callable[[str], dict[str, Any]] | None = None, **kwargs: Any
    ) -> None:
        self._token = token
        self._wait = wait
        super().__init__(**kwargs)

    def proxy_headers(self, proxy: str) -> dict[str, str]:
        return {"Proxy-Authorization": f"Bearer {self._token.reveal()}"}

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> requests.Response:
        response = super().send(request, *args, **kwargs)
        approval_id = gateway_approval(response)
        if self._wait is None or approval_id is None:
            return response
        if request.body is not None and not isinstance(request.body, (bytes, str)):
            return response  # a streamed body cannot be sent a second time
        if self._wait(approval_id).get("status") != "approved":
            return response
        response.close()
        return super().send(request, *args, **kwargs)

    def __repr__(self) -> str:
        return "_GatewayAdapter(token=<redacted>)"


def ca_bundle(session: GatewaySession | None) -> str | bool:
    """A PEM file of the system's roots and the run's CA (no secret in it), or
    ``True`` (the default roots) when the run has no CA."""
    if session is None:
        return True
    paths = ssl.get_default_verify_paths()
    roots = ""
    for candidate in (paths.cafile, paths.openssl_cafile):
        if candidate and os.path.isfile(candidate):
            with open(candidate, encoding="utf-8", errors="replace") as f:
                roots = f.read()
            break
    if not roots:
        import certifi

        with open(certifi.where(), encoding="utf-8") as f:
            roots = f.read()
    fd, path = tempfile.mkstemp(prefix="tessera-ca-", suffix=".pem")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(roots.rstrip("\n") + "\n" + session.ca_pem)
    return path


def requests_session(
    gateway_url: str,
    token: Secret,
    session: GatewaySession | None,
    wait: Callable[[str], dict[str, Any]] | None = None,
) -> requests.Session:
    s = requests.Session()
    s.trust_env = False
    adapter = _GatewayAdapter(token, wait)
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    s.proxies = {"http": gateway_url, "https": gateway_url}
    s.verify = ca_bundle(session)
    return s
