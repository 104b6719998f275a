"""The tool side: one run token, capabilities on demand (sync :class:`Tool`,
async :class:`AsyncTool`)."""

from __future__ import annotations

import asyncio
import ssl
import uuid
from typing import TYPE_CHECKING, Any, Callable, Mapping

import httpx

from ._config import (
    RUN_TOKEN_PREFIX,
    RetryPolicy,
    Transport,
    check_token_shape,
    env_lookup,
    is_loopback_host,
    log,
    run_token_from_env,
    transport,
)
from ._core import AsyncDriver, SyncDriver
from ._ops import ToolOps, host_port
from ._secret import REDACTED, Secret, secret
from .dpop import DPoPKey
from .errors import ConfigError, Rejected
from .models import (
    AccessToken,
    AwsCredentials,
    Capability,
    Credential,
    DatabaseCredentials,
    GatewaySession,
)

if TYPE_CHECKING:
    import boto3  # type: ignore[import-untyped]
    import psycopg
    import requests


class _ToolConfig:
    """Settings shared by :class:`Tool` and :class:`AsyncTool`."""

    _transport: Transport
    _ops: ToolOps

    def _configure(
        self,
        addr: str | None,
        run_token: str | Secret | None,
        dpop: bool,
        dpop_key: DPoPKey | None,
        issuer: str | None,
        ca_file: str | None,
        timeout: float,
        connect_timeout: float,
        retry: RetryPolicy | None,
        insecure_http: bool | None,
        use_proxy: bool | None,
        gateway: str | None,
        env: Mapping[str, str] | None,
    ) -> None:
        e = env_lookup(env)
        self._transport = transport(
            e, addr, ca_file, timeout, connect_timeout, retry, insecure_http, use_proxy, "the run token"
        )
        token = Secret(run_token) if isinstance(run_token, str) else run_token
        if token is None:
            token = run_token_from_env(e)
        check_token_shape(token, RUN_TOKEN_PREFIX, "run token")
        self._ops = ToolOps(self._transport.base, issuer, token, dpop, dpop_key)
        self._gateway = gateway or e.get("TESSERA_GATEWAY")
        self._insecure_http = self._transport.insecure_http

    @property
    def address(self) -> str:
        return self._transport.base

    @property
    def dpop(self) -> bool:
        """Whether capabilities are bound to this tool's DPoP key."""
        return self._ops.dpop

    @property
    def dpop_key(self) -> DPoPKey:
        """This tool's DPoP key (ES256), made on first use; never leaves the process."""
        return self._ops.key

    @property
    def run_token(self) -> Secret:
        return self._ops.token

    def _settings(self) -> dict[str, Any]:
        t = self._transport
        return {
            "addr": t.base,
            "run_token": self._ops.token,
            "dpop": self._ops.dpop,
            "dpop_key": self._ops._key,
            "issuer": self._ops.issuer,
            "ca_file": t.ca_file,
            "timeout": t.timeout,
            "connect_timeout": t.connect_timeout,
            "retry": t.retry,
            "insecure_http": t.insecure_http,
            "use_proxy": t.proxy is not None,
            "gateway": self._gateway,
        }

    def _gateway_url(self, gateway: str | None) -> str:
        gw = gateway or self._gateway
        if not gw:
            raise ConfigError("no gateway address: pass gateway= or set TESSERA_GATEWAY")
        host, url = host_port(gw)
        if not is_loopback_host(host):
            if not self._insecure_http:
                raise ConfigError(
                    f"refusing to send the run token in clear to the gateway at {host}: the gateway "
                    "speaks plain HTTP; run it on this machine, or set TESSERA_INSECURE_HTTP=1"
                )
            log.warning("sending the run token in clear to the gateway at %s (TESSERA_INSECURE_HTTP=1)", host)
        return url

    def _gateway_ssl(self, session: GatewaySession | None) -> ssl.SSLContext:
        ctx = ssl.create_default_context()
        if session is not None:
            ctx.load_verify_locations(cadata=session.ca_pem)
        return ctx

    def _proxy(self, gateway: str | None) -> httpx.Proxy:
        return _GatewayProxy(
            self._gateway_url(gateway),
            headers={"Proxy-Authorization": "Bearer " + self._ops.token.reveal()},
        )

    def _client_kwargs(self, kwargs: dict[str, Any]) -> None:
        refused = sorted(set(kwargs) & _ROUTING_KWARGS)
        if refused:
            raise ConfigError(
                f"http_client() does not take {', '.join(refused)}: every request of this client goes "
                "through the egress gateway (its proxy is the gateway, and the environment's proxies "
                "are ignored); make a plain httpx client for anything else"
            )

    def __repr__(self) -> str:
        # getattr: a constructor that failed leaves a half-built object in its frame,
        # and a traceback (or a debugger) shows it.
        transport = getattr(self, "_transport", None)
        ops = getattr(self, "_ops", None)
        return (
            f"{type(self).__name__}(address={getattr(transport, 'base', None)!r}, "
            f"dpop={getattr(ops, 'dpop', None)}, run_token={REDACTED})"
        )

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a Tool holds a run token and is not pickled")


# What would send a request of http_client() around the gateway, or ignore it.
_ROUTING_KWARGS = frozenset({"proxy", "proxies", "mounts", "transport", "trust_env"})


class _GatewayProxy(httpx.Proxy):
    """The gateway as httpx's proxy, with the run token in ``Proxy-Authorization``.
    httpx's ``Proxy.__repr__`` shows its headers; this one does not (httpx keeps it,
    and frames that hold it show in tracebacks)."""

    def __repr__(self) -> str:
        return f"Proxy({str(self.url)!r}, headers={{'proxy-authorization': {REDACTED!r}}})"

    __str__ = __repr__


class Tool(_ToolConfig):
    """A sandboxed tool's client: capabilities, exchanges, OAuth access tokens.

    ``Tool()`` reads ``TESSERA_ADDR`` and the run token from
    ``TESSERA_RUN_TOKEN_FILE`` (mode 0600/0400) or ``TESSERA_RUN_TOKEN_FD``
    (``TESSERA_RUN_TOKEN`` only with ``TESSERA_ALLOW_TOKEN_ENV=1``). With
    ``dpop=True`` every capability is bound to the tool's DPoP key.
    """

    def __init__(
        self,
        addr: str | None = None,
        run_token: str | Secret | None = None,
        dpop: bool = False,
        *,
        dpop_key: DPoPKey | None = None,
        issuer: str | None = None,
        ca_file: str | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        retry: RetryPolicy | None = None,
        insecure_http: bool | None = None,
        use_proxy: bool | None = None,
        gateway: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        # No clear token or environment in this frame's locals (tracebacks show them).
        run_token, env = secret(run_token), env_lookup(env)
        self._configure(
            addr, run_token, dpop, dpop_key, issuer, ca_file, timeout, connect_timeout,
            retry, insecure_http, use_proxy, gateway, env,
        )  # fmt: skip
        self._driver = SyncDriver(self._transport)

    def close(self) -> None:
        self._driver.close()

    def __enter__(self) -> "Tool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- capabilities

    def capability(
        self,
        action: str,
        resource: str,
        ttl: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        *,
        hold: str | None = None,
        slot: str | None = None,
        approval_id: str | None = None,
        wait_for_approval: float | None = None,
        on_approval: Callable[[dict[str, Any]], None] | None = None,
    ) -> Capability:
        """Asks for a capability for ``action`` on ``resource`` (``BACKEND:PATH``).

        When a human must approve (202), raises :class:`ApprovalRequired` with the
        ``approval_id``, or with ``wait_for_approval`` (seconds) waits for the
        decision and redeems the approval."""
        return self._driver.run(
            self._ops.capability(
                action, resource, ttl, arguments, hold, slot, approval_id, wait_for_approval, on_approval
            )
        )

    def exchange(self, cap: Capability) -> Credential:
        """Exchanges a capability for its downstream credential (one use). A bound
        capability is presented with a DPoP proof (``ath`` of the capability)."""
        return self._driver.run(self._ops.exchange(cap))

    def revoke(self, cap: Capability | str) -> bool:
        """Revokes a capability (and its leases, downstream included). ``False``:
        it was already revoked."""
        return self._driver.run(self._ops.revoke(cap.id if isinstance(cap, Capability) else cap))

    def renew_holds(self, caps: list[Capability | str]) -> dict[str, Any]:
        """Renews the holds of capabilities asked for with ``hold``."""
        ids = [c.id if isinstance(c, Capability) else c for c in caps]
        return self._driver.run(self._ops.renew_holds(ids))

    def approval(self, approval_id: str) -> dict[str, Any]:
        return self._driver.run(self._ops.approval(approval_id))

    # -- downstream credentials

    def aws_credentials(
        self, action: str, resource: str, ttl: str | None = None, *, slot: str | None = None
    ) -> AwsCredentials:
        """A capability exchanged at once for AWS credentials (backend ``aws-sts``)."""
        cap = self.capability(action, resource, ttl, slot=slot)
        return AwsCredentials._from(cap, self.exchange(cap))

    def database_credentials(self, action: str, resource: str, ttl: str | None = None) -> DatabaseCredentials:
        """A capability exchanged at once for a database user (``postgres``, ``mysql``)."""
        cap = self.capability(action, resource, ttl)
        return DatabaseCredentials._from(cap, self.exchange(cap))

    def aws_session(
        self, action: str, resource: str, ttl: str | None = None, *, region_name: str | None = None
    ) -> "boto3.Session":
        """A ``boto3.Session`` whose credentials come from Tessera and are fetched
        again (a new capability in this session's own slot, superseding the last)
        shortly before they expire. Needs the ``aws`` extra."""
        from ._aws import session

        slot = f"py-aws:{uuid.uuid4().hex}:{action}={resource}"[:640]
        return session(lambda: self.aws_credentials(action, resource, ttl, slot=slot), region_name)

    def postgres_connect(
        self, action: str, resource: str, ttl: str | None = None, **connect_kwargs: Any
    ) -> "psycopg.Connection[Any]":
        """A psycopg connection as a throw-away user that may do ``action`` on the
        one table ``resource`` names. Needs the ``postgres`` extra."""
        import psycopg

        creds = self.database_credentials(action, resource, ttl)
        if creds.kind != "postgres":
            raise ConfigError(f"{resource} is a {creds.kind} backend, not postgres")
        return psycopg.connect(**_pg_kwargs(creds, connect_kwargs))

    # -- OAuth

    def access_token(
        self, resource: str, scope: str, dpop: bool = True, *, approval_id: str | None = None
    ) -> AccessToken:
        """An access token for the resource server ``resource`` (its registered
        URL) with one ``scope``, by RFC 8693 token exchange of the run token at
        ``POST /oauth/token``. With ``dpop`` (the default) it is bound to this
        tool's key (``token_type`` ``DPoP``, ``cnf.jkt``)."""
        return self._driver.run(self._ops.access_token(resource, scope, dpop, approval_id))

    def oauth_metadata(self) -> dict[str, Any]:
        """The broker's RFC 8414 authorization server metadata."""
        return self._driver.run(self._ops.oauth_metadata())

    # -- egress gateway

    def gateway_session(self) -> GatewaySession:
        """The run's credential-injection session: its CA and placeholders
        (:class:`Rejected` 404 ``not_found`` when the broker has no injection rule)."""
        return self._driver.run(self._ops.gateway_session())

    def _session_or_none(self) -> GatewaySession | None:
        try:
            return self.gateway_session()
        except Rejected as e:
            if e.status == 404:
                return None
            raise

    def http_client(self, gateway: str | None = None, **kwargs: Any) -> httpx.Client:
        """An ``httpx.Client`` whose every request goes through the egress gateway
        (``gateway`` or ``TESSERA_GATEWAY``, ``HOST:PORT`` on this machine) as this
        run, trusting the run's CA for hosts with an injection rule. ``kwargs`` go to
        ``httpx.Client``, except ``proxy``, ``mounts``, ``transport`` and
        ``trust_env`` (:class:`ConfigError`): they would route around the gateway."""
        self._client_kwargs(kwargs)
        session = self._session_or_none()
        kwargs.setdefault("verify", self._gateway_ssl(session))
        proxy = self._proxy(gateway)
        return httpx.Client(proxy=proxy, trust_env=False, **kwargs)

    def requests_session(
        self,
        gateway: str | None = None,
        *,
        wait_for_approval: float | None = None,
        on_approval: Callable[[dict[str, Any]], None] | None = None,
    ) -> "requests.Session":
        """A ``requests.Session`` through the egress gateway (needs ``requests``).
        A request a permit with ``@approval`` covers is answered ``403
        approval_pending`` with the approval in ``Tessera-Approval-Id``
        (:func:`tessera.gateway_approval`); with ``wait_for_approval`` (seconds)
        the session waits for the decision (``on_approval`` hears each status) and,
        once approved, sends the identical request again, which then passes once."""
        from ._gateway import requests_session

        wait = None
        if wait_for_approval is not None:
            limit = float(wait_for_approval)

            def wait(approval_id: str) -> dict[str, Any]:
                return self.wait_for_approval(approval_id, limit, on_approval)

        return requests_session(self._gateway_url(gateway), self._ops.token, self._session_or_none(), wait)

    def wait_for_approval(
        self,
        approval_id: str,
        limit: float,
        on_status: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Waits up to ``limit`` seconds for an approval of this run to be decided
        (``on_status`` hears each status) and returns it."""
        return self._driver.run(self._ops.wait_for_approval(approval_id, limit, on_status))


class AsyncTool(_ToolConfig):
    """The async twin of :class:`Tool` (``httpx.AsyncClient``): same arguments,
    same methods, awaited."""

    def __init__(
        self,
        addr: str | None = None,
        run_token: str | Secret | None = None,
        dpop: bool = False,
        *,
        dpop_key: DPoPKey | None = None,
        issuer: str | None = None,
        ca_file: str | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        retry: RetryPolicy | None = None,
        insecure_http: bool | None = None,
        use_proxy: bool | None = None,
        gateway: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        run_token, env = secret(run_token), env_lookup(env)
        self._configure(
            addr, run_token, dpop, dpop_key, issuer, ca_file, timeout, connect_timeout,
            retry, insecure_http, use_proxy, gateway, env,
        )  # fmt: skip
        self._driver = AsyncDriver(self._transport)

    async def aclose(self) -> None:
        await self._driver.close()

    async def __aenter__(self) -> "AsyncTool":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def capability(
        self,
        action: str,
        resource: str,
        ttl: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        *,
        hold: str | None = None,
        slot: str | None = None,
        approval_id: str | None = None,
        wait_for_approval: float | None = None,
        on_approval: Callable[[dict[str, Any]], None] | None = None,
    ) -> Capability:
        return await self._driver.run(
            self._ops.capability(
                action, resource, ttl, arguments, hold, slot, approval_id, wait_for_approval, on_approval
            )
        )

    async def exchange(self, cap: Capability) -> Credential:
        return await self._driver.run(self._ops.exchange(cap))

    async def revoke(self, cap: Capability | str) -> bool:
        return await self._driver.run(self._ops.revoke(cap.id if isinstance(cap, Capability) else cap))

    async def renew_holds(self, caps: list[Capability | str]) -> dict[str, Any]:
        ids = [c.id if isinstance(c, Capability) else c for c in caps]
        return await self._driver.run(self._ops.renew_holds(ids))

    async def approval(self, approval_id: str) -> dict[str, Any]:
        return await self._driver.run(self._ops.approval(approval_id))

    async def aws_credentials(
        self, action: str, resource: str, ttl: str | None = None, *, slot: str | None = None
    ) -> AwsCredentials:
        cap = await self.capability(action, resource, ttl, slot=slot)
        return AwsCredentials._from(cap, await self.exchange(cap))

    async def database_credentials(self, action: str, resource: str, ttl: str | None = None) -> DatabaseCredentials:
        cap = await self.capability(action, resource, ttl)
        return DatabaseCredentials._from(cap, await self.exchange(cap))

    async def aws_session(
        self, action: str, resource: str, ttl: str | None = None, *, region_name: str | None = None
    ) -> "boto3.Session":
        """As :meth:`Tool.aws_session`. botocore refreshes synchronously, so the
        session fetches (now and at each refresh) through a sync :class:`Tool` with
        this tool's settings; the first fetch runs in a worker thread."""
        sync = Tool(**self._settings())
        return await asyncio.to_thread(sync.aws_session, action, resource, ttl, region_name=region_name)

    async def postgres_connect(
        self, action: str, resource: str, ttl: str | None = None, **connect_kwargs: Any
    ) -> "psycopg.AsyncConnection[Any]":
        import psycopg

        creds = await self.database_credentials(action, resource, ttl)
        if creds.kind != "postgres":
            raise ConfigError(f"{resource} is a {creds.kind} backend, not postgres")
        return await psycopg.AsyncConnection.connect(**_pg_kwargs(creds, connect_kwargs))

    async def access_token(
        self, resource: str, scope: str, dpop: bool = True, *, approval_id: str | None = None
    ) -> AccessToken:
        return await self._driver.run(self._ops.access_token(resource, scope, dpop, approval_id))

    async def oauth_metadata(self) -> dict[str, Any]:
        return await self._driver.run(self._ops.oauth_metadata())

    async def gateway_session(self) -> GatewaySession:
        return await self._driver.run(self._ops.gateway_session())

    async def http_client(self, gateway: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
        """An ``httpx.AsyncClient`` through the egress gateway (see :meth:`Tool.http_client`)."""
        self._client_kwargs(kwargs)
        try:
            session: GatewaySession | None = await self.gateway_session()
        except Rejected as e:
            if e.status != 404:
                raise
            session = None
        kwargs.setdefault("verify", self._gateway_ssl(session))
        proxy = self._proxy(gateway)
        return httpx.AsyncClient(proxy=proxy, trust_env=False, **kwargs)


def _pg_kwargs(creds: DatabaseCredentials, extra: Mapping[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {
        "host": creds.host,
        "port": creds.port,
        "dbname": creds.database,
        "user": creds.username,
        "password": creds.password.reveal(),
        "connect_timeout": 10,
    }
    kwargs.update(extra)
    return kwargs


