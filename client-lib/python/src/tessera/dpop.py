"""DPoP (RFC 9449): a key per tool and the proofs that show its possession.

A :class:`DPoPKey` is an ES256 (P-256) key made in memory
(``cryptography``); it is never written anywhere and its private half is in no
``repr``. A proof is a JWT with header ``{"typ": "dpop+jwt", "alg": "ES256",
"jwk": <public key>}`` and claims ``jti`` (unique), ``htm`` (the method),
``htu`` (the URL, no query or fragment), ``iat``, and when needed ``ath``
(base64url SHA-256 of the bound token presented with it) and ``nonce`` (the
server's ``DPoP-Nonce``). A capability or access token asked for with a proof
carries ``cnf.jkt``, the key's RFC 7638 thumbprint, and is refused without a
fresh proof of the same key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import threading
import time
import urllib.parse
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from ._secret import Secret


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def ath(token: str | Secret) -> str:
    """base64url(SHA-256(token)): the ``ath`` claim of a proof presenting ``token``."""
    value = token.reveal() if isinstance(token, Secret) else token
    return b64url(hashlib.sha256(value.encode("ascii")).digest())


def htu_of(url: str) -> str:
    """The ``htu`` of a request URL: scheme, authority and path; no query, no fragment."""
    u = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((u.scheme.lower(), u.netloc.lower(), u.path or "/", "", ""))


def origin_of(url: str) -> str:
    u = urllib.parse.urlsplit(url)
    return f"{u.scheme.lower()}://{u.netloc.lower()}"


class DPoPKey:
    """An ES256 DPoP key, with the server nonces it was last given (per origin)."""

    alg = "ES256"

    def __init__(self, private_key: ec.EllipticCurvePrivateKey | None = None) -> None:
        if private_key is None:
            private_key = ec.generate_private_key(ec.SECP256R1())
        if not isinstance(private_key.curve, ec.SECP256R1):
            raise ValueError("a DPoP key for ES256 is a P-256 key")
        self._key = private_key
        numbers = private_key.public_key().public_numbers()
        self._jwk = {
            "kty": "EC",
            "crv": "P-256",
            "x": b64url(numbers.x.to_bytes(32, "big")),
            "y": b64url(numbers.y.to_bytes(32, "big")),
        }
        canonical = json.dumps(
            {k: self._jwk[k] for k in ("crv", "kty", "x", "y")}, separators=(",", ":")
        )
        self._jkt = b64url(hashlib.sha256(canonical.encode("ascii")).digest())
        self._nonces: dict[str, str] = {}
        self._lock = threading.Lock()

    @classmethod
    def generate(cls) -> "DPoPKey":
        return cls()

    @property
    def public_jwk(self) -> dict[str, str]:
        """The public key as a JWK (EC P-256: kty, crv, x, y)."""
        return dict(self._jwk)

    @property
    def thumbprint(self) -> str:
        """The RFC 7638 SHA-256 thumbprint: what a bound token's ``cnf.jkt`` holds."""
        return self._jkt

    jkt = thumbprint

    def nonce_for(self, url: str) -> str | None:
        with self._lock:
            return self._nonces.get(origin_of(url))

    def remember_nonce(self, url: str, nonce: str | None) -> None:
        """Keeps the ``DPoP-Nonce`` a server at ``url``'s origin sent."""
        if nonce and len(nonce) <= 512 and nonce.isprintable():
            with self._lock:
                self._nonces[origin_of(url)] = nonce

    def proof(
        self,
        method: str,
        url: str,
        *,
        access_token: str | Secret | None = None,
        nonce: str | None = None,
        use_remembered_nonce: bool = True,
    ) -> str:
        """A fresh proof for one request: ``method`` and ``url`` (``htu`` is the URL
        without query or fragment); with ``access_token``, its ``ath``; with the nonce
        given, or else the one last remembered for that origin."""
        if nonce is None and use_remembered_nonce:
            nonce = self.nonce_for(url)
        header = {"typ": "dpop+jwt", "alg": self.alg, "jwk": self._jwk}
        claims: dict[str, Any] = {
            "jti": secrets.token_urlsafe(24),
            "htm": method.upper(),
            "htu": htu_of(url),
            "iat": int(time.time()),
        }
        if access_token is not None:
            claims["ath"] = ath(access_token)
        if nonce is not None:
            claims["nonce"] = nonce
        signing_input = (
            b64url(json.dumps(header, separators=(",", ":")).encode())
            + "."
            + b64url(json.dumps(claims, separators=(",", ":")).encode())
        )
        der = self._key.sign(signing_input.encode("ascii"), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return signing_input + "." + b64url(r.to_bytes(32, "big") + s.to_bytes(32, "big"))

    def __repr__(self) -> str:
        return f"DPoPKey(alg='ES256', jkt={self._jkt!r}, private_key=<redacted>)"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a DPoP key is not pickled: it never leaves the process")


def decode_jwt_unverified(token: str | Secret) -> dict[str, Any]:
    """The claims of a JWT, NOT verified: for showing what a token says
    (expiry, ``cnf``), never for trusting it."""
    value = token.reveal() if isinstance(token, Secret) else token
    try:
        payload = value.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError) as e:
        raise ValueError("not a JWT") from e
    if not isinstance(claims, dict):
        raise ValueError("not a JWT")
    return claims
