"""What the broker hands out: runs, capabilities, credentials, access tokens.

Every secret is a :class:`~tessera.Secret` and every ``repr``/``str`` shows ids,
kinds and expiries, never a token, a key or a password: a tool that logs what it
got leaks nothing.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from ._secret import REDACTED, Secret
from .dpop import DPoPKey, decode_jwt_unverified, htu_of
from .errors import ProtocolError

if TYPE_CHECKING:
    from .auth import AccessTokenAuth

_FRACTION = re.compile(r"(\.\d{6})\d+")


def parse_time(text: str | None) -> _dt.datetime | None:
    """An RFC 3339 time as an aware UTC datetime (``None`` passes through)."""
    if text is None:
        return None
    t = text.strip().replace("Z", "+00:00").replace("z", "+00:00")
    t = _FRACTION.sub(r"\1", t)
    try:
        value = _dt.datetime.fromisoformat(t)
    except ValueError:
        raise ProtocolError(f"not an RFC 3339 time: {text[:40]!r}") from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=_dt.timezone.utc)
    return value.astimezone(_dt.timezone.utc)


def plain(value: Any) -> Any:
    """``value`` with every dict in it (the SDK's redacting JSON objects) a plain ``dict``."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def _need(body: Mapping[str, Any], name: str, what: str) -> Any:
    if not isinstance(body, Mapping) or name not in body:
        raise ProtocolError(f"{what} without `{name}`")
    return body[name]


@dataclass(frozen=True, repr=False)
class Capability:
    """A signed grant for one action on one resource (``POST /v1/capabilities``)."""

    id: str
    token: Secret
    action: str
    resource: str
    expires_at: _dt.datetime
    uses: int
    lapses_at: _dt.datetime | None = None
    args: str | None = None
    #: The RFC 7638 thumbprint of the DPoP key it is bound to (``cnf.jkt``), if any.
    jkt: str | None = None

    @property
    def capability_id(self) -> str:
        return self.id

    @property
    def bound(self) -> bool:
        """Whether exchanging it needs a DPoP proof of the key it is bound to."""
        return self.jkt is not None

    def claims(self) -> dict[str, Any]:
        """Its claims, NOT verified (for display; services verify with the JWKS)."""
        return decode_jwt_unverified(self.token)

    @classmethod
    def _from(cls, body: Mapping[str, Any], action: str, resource: str) -> "Capability":
        token = Secret(_need(body, "token", "a capability"))
        try:
            cnf = decode_jwt_unverified(token).get("cnf")
        except ValueError:
            raise ProtocolError("the capability is not a JWT") from None
        jkt = cnf.get("jkt") if isinstance(cnf, Mapping) else None
        return cls(
            id=_need(body, "capability_id", "a capability"),
            token=token,
            action=action,
            resource=resource,
            expires_at=parse_time(_need(body, "expires_at", "a capability")),  # type: ignore[arg-type]
            uses=int(body.get("uses", 1)),
            lapses_at=parse_time(body.get("lapses_at")),
            args=body.get("args"),
            jkt=jkt if isinstance(jkt, str) else None,
        )

    def __repr__(self) -> str:
        bound = f", jkt={self.jkt!r}" if self.jkt else ""
        return (
            f"Capability(id={self.id!r}, action={self.action!r}, resource={self.resource!r}, "
            f"expires_at={self.expires_at.isoformat()!r}, uses={self.uses}{bound}, token={REDACTED})"
        )

    __str__ = __repr__


class Credential:
    """A downstream credential as ``POST /v1/exchange`` returned it: ``kind``
    (``token``, ``aws``, ``postgres``, ``mysql``…), the lease, and the backend's
    own fields (``credential["token"]``). Any field may be a secret: the ``repr``
    lists their names only."""

    __slots__ = ("kind", "lease_id", "expires_at", "uses_left", "args", "_fields")

    def __init__(self, body: Mapping[str, Any]) -> None:
        if not isinstance(body, Mapping):
            raise ProtocolError("an exchange answer that is not an object")
        self.kind: str = _need(body, "kind", "an exchange answer")
        self.lease_id: str = _need(body, "lease_id", "an exchange answer")
        self.expires_at: _dt.datetime = parse_time(_need(body, "expires_at", "an exchange answer"))  # type: ignore[assignment]
        self.uses_left: int = int(body.get("uses_left", 0))
        self.args: str | None = body.get("args")
        skip = {"kind", "lease_id", "expires_at", "uses_left", "args"}
        self._fields = {k: plain(v) for k, v in body.items() if k not in skip}

    def field(self, name: str, default: Any = None) -> Any:
        """A backend field (e.g. ``token`` for kind ``token``). May be a secret."""
        return self._fields.get(name, default)

    def secret(self, name: str) -> Secret:
        """A backend field as a :class:`Secret` (``credential.secret("password")``)."""
        value = self._fields.get(name)
        if not isinstance(value, str):
            raise ProtocolError(f"a {self.kind} credential without `{name}`")
        return Secret(value)

    def text(self, name: str) -> str:
        value = self._fields.get(name)
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise ProtocolError(f"a {self.kind} credential without `{name}`")
        return str(value)

    def __getitem__(self, name: str) -> Any:
        return self._fields[name]

    def __contains__(self, name: object) -> bool:
        return name in self._fields

    def keys(self) -> list[str]:
        return sorted(self._fields)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    @property
    def token(self) -> Secret:
        """The ``token`` field of a ``token`` credential."""
        return self.secret("token")

    def __repr__(self) -> str:
        return (
            f"Credential(kind={self.kind!r}, lease_id={self.lease_id!r}, "
            f"expires_at={self.expires_at.isoformat()!r}, uses_left={self.uses_left}, "
            f"fields={self.keys()!r} <values redacted>)"
        )

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a credential is not pickled")


@dataclass(frozen=True, repr=False)
class AwsCredentials:
    """Temporary AWS credentials for one action on one resource (kind ``aws``)."""

    capability: Capability
    lease_id: str
    access_key_id: str
    secret_access_key: Secret
    session_token: Secret
    expiration: _dt.datetime
    region: str | None

    @property
    def expires_at(self) -> _dt.datetime:
        """The earlier of STS's expiration and the capability's (the session policy
        denies everything after the latter)."""
        return min(self.expiration, self.capability.expires_at)

    @classmethod
    def _from(cls, cap: Capability, ex: Credential) -> "AwsCredentials":
        if ex.kind != "aws":
            raise ProtocolError(f"expected an aws credential, got {ex.kind}")
        return cls(
            capability=cap,
            lease_id=ex.lease_id,
            access_key_id=ex.text("access_key_id"),
            secret_access_key=ex.secret("secret_access_key"),
            session_token=ex.secret("session_token"),
            expiration=parse_time(ex.text("expiration")),  # type: ignore[arg-type]
            region=ex.field("region"),
        )

    def __repr__(self) -> str:
        return (
            f"AwsCredentials(access_key_id={self.access_key_id!r}, "
            f"expires_at={self.expires_at.isoformat()!r}, region={self.region!r}, "
            f"lease_id={self.lease_id!r}, secret_access_key={REDACTED}, session_token={REDACTED})"
        )

    __str__ = __repr__


@dataclass(frozen=True, repr=False)
class DatabaseCredentials:
    """A throw-away database user with one privilege on one table (kinds
    ``postgres``, ``mysql``); removed when the capability expires or the run ends."""

    capability: Capability
    kind: str
    lease_id: str
    host: str
    port: int
    database: str
    username: str
    password: Secret
    dsn: Secret
    expires_at: _dt.datetime

    @classmethod
    def _from(cls, cap: Capability, ex: Credential) -> "DatabaseCredentials":
        if ex.kind not in ("postgres", "mysql"):
            raise ProtocolError(f"expected a database credential, got {ex.kind}")
        try:
            port = int(ex.text("port"))
        except ValueError:
            raise ProtocolError("database port is not a number") from None
        return cls(
            capability=cap,
            kind=ex.kind,
            lease_id=ex.lease_id,
            host=ex.text("host"),
            port=port,
            database=ex.text("database"),
            username=ex.text("username"),
            password=ex.secret("password"),
            dsn=ex.secret("dsn") if isinstance(ex.field("dsn"), str) else Secret(""),
            expires_at=ex.expires_at,
        )

    def __repr__(self) -> str:
        return (
            f"DatabaseCredentials(kind={self.kind!r}, host={self.host!r}, port={self.port}, "
            f"database={self.database!r}, username={self.username!r}, "
            f"expires_at={self.expires_at.isoformat()!r}, password={REDACTED}, dsn={REDACTED})"
        )

    __str__ = __repr__


@dataclass(frozen=True, repr=False)
class Placeholder:
    """A credential-injection placeholder (``tsr_ph_…``): worthless anywhere but
    through the gateway, for this run, to its rule's API."""

    backend: str
    env: str
    value: Secret

    def __repr__(self) -> str:
        return f"Placeholder(backend={self.backend!r}, env={self.env!r}, value={REDACTED})"

    __str__ = __repr__


@dataclass(frozen=True)
class GatewaySession:
    """``POST /v1/gateway/session``: the run's CA (PEM; no secret, its key stays in
    the gateway) for the injection rules' ``hosts``, and the placeholders."""

    ca_pem: str
    expires_at: _dt.datetime
    hosts: list[str]
    placeholders: list[Placeholder] = field(default_factory=list)

    @classmethod
    def _from(cls, body: Mapping[str, Any]) -> "GatewaySession":
        return cls(
            ca_pem=_need(body, "ca_pem", "a gateway session"),
            expires_at=parse_time(_need(body, "expires_at", "a gateway session")),  # type: ignore[arg-type]
            hosts=list(body.get("hosts", [])),
            placeholders=[
                Placeholder(p["backend"], p["env"], Secret(p["value"]))
                for p in body.get("placeholders", [])
            ],
        )

    def environment(self) -> dict[str, str]:
        """The placeholders by variable, as ``tessera exec --egress`` sets them."""
        return {p.env: p.value.reveal() for p in self.placeholders}


class AccessToken:
    """An OAuth access token from ``POST /oauth/token`` (RFC 8693 token exchange):
    for one resource server (``resource``, the token's ``aud``) and one ``scope``.

    ``token_type`` is ``DPoP`` when bound to the tool's key (``cnf.jkt``), else
    ``Bearer``. :meth:`headers` gives what a call to the resource server needs;
    :meth:`auth` an ``httpx.Auth`` that adds it to every request."""

    __slots__ = ("token", "token_type", "expires_at", "scope", "resource", "issued_token_type", "_key")

    def __init__(
        self,
        token: Secret,
        token_type: str,
        expires_at: _dt.datetime,
        scope: str,
        resource: str,
        issued_token_type: str | None = None,
        key: DPoPKey | None = None,
    ) -> None:
        self.token = token
        self.token_type = token_type
        self.expires_at = expires_at
        self.scope = scope
        self.resource = resource
        self.issued_token_type = issued_token_type
        self._key = key

    @property
    def dpop_key(self) -> DPoPKey | None:
        return self._key

    @property
    def bound(self) -> bool:
        return self.token_type.lower() == "dpop"

    def claims(self) -> dict[str, Any]:
        """Its claims, NOT verified (``cnf.jkt``, ``exp``…; the resource server
        verifies them with the JWKS or introspection)."""
        return decode_jwt_unverified(self.token)

    def expired(self, leeway: float = 0.0) -> bool:
        now = _dt.datetime.now(_dt.timezone.utc)
        return now + _dt.timedelta(seconds=leeway) >= self.expires_at

    def headers(self, method: str = "GET", url: str | None = None) -> dict[str, str]:
        """``Authorization`` (``DPoP <token>`` or ``Bearer <token>``) and, for a
        bound token, a fresh ``DPoP`` proof for this ``method`` and ``url`` (with
        ``ath``, and the resource server's last nonce for that origin)."""
        if not self.bound:
            return {"Authorization": f"Bearer {self.token.reveal()}"}
        if self._key is None:
            raise ProtocolError("a DPoP-bound token without its key")
        if url is None:
            raise ValueError("a DPoP proof needs the request URL")
        return {
            "Authorization": f"DPoP {self.token.reveal()}",
            "DPoP": self._key.proof(method, htu_of(url), access_token=self.token),
        }

    def auth(self) -> "AccessTokenAuth":
        """An ``httpx.Auth`` that adds :meth:`headers` to each request and retries
        once on a resource server's ``use_dpop_nonce``."""
        from .auth import AccessTokenAuth

        return AccessTokenAuth(self)

    def __repr__(self) -> str:
        return (
            f"AccessToken(token_type={self.token_type!r}, scope={self.scope!r}, "
            f"resource={self.resource!r}, expires_at={self.expires_at.isoformat()!r}, token={REDACTED})"
        )

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("an access token is not pickled")
