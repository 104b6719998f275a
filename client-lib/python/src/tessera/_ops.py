"""The operations, written once for the sync and the async clients."""

from __future__ import annotations

import datetime as _dt
import re
import time
import urllib.parse
from typing import Any, Callable, Mapping

from ._core import Call, Op, Reply
from ._secret import Secret
from .dpop import DPoPKey
from .errors import ApprovalRequired, ConfigError, ProtocolError, Rejected
from .models import AccessToken, Capability, Credential, GatewaySession, parse_time, plain

_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
APPROVAL_POLL = 20.0

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
RUN_TOKEN_TYPE = "urn:tessera:params:oauth:token-type:run_token"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"


def check_id(value: str, what: str) -> str:
    if not isinstance(value, str) or not _UUID.match(value):
        raise ConfigError(f"not a {what} id")
    return value


class Endpoint:
    """What the operations need of a client: the base address and, lazily, the
    OAuth issuer (the base of every DPoP ``htu``)."""

    def __init__(self, base: str, issuer: str | None) -> None:
        self.base = base
        self.issuer = issuer.rstrip("/") if issuer else None

    def issuer_op(self) -> Op[str]:
        """The issuer from ``/.well-known/oauth-authorization-server`` (RFC 8414),
        asked once. Requests always go to the configured address; the issuer is
        only what proofs name as ``htu``. A broker without the document: its address."""
        if self.issuer is None:
            try:
                reply = yield Call("GET", "/.well-known/oauth-authorization-server")
                issuer = reply.body.get("issuer") if isinstance(reply.body, dict) else None
                if not isinstance(issuer, str) or not issuer.startswith(("http://", "https://")):
                    raise ProtocolError("authorization server metadata without an issuer")
                self.issuer = issuer.rstrip("/")
            except Rejected as e:
                if e.status != 404:
                    raise
                self.issuer = self.base
        return self.issuer

    def htu_op(self, path: str) -> Op[str]:
        issuer = yield from self.issuer_op()
        return issuer + path


# ------------------------------------------------------------------ tool side


class ToolOps(Endpoint):
    def __init__(self, base: str, issuer: str | None, token: Secret, dpop: bool, key: DPoPKey | None) -> None:
        super().__init__(base, issuer)
        self.token = token
        self.dpop = dpop
        self._key = key

    @property
    def key(self) -> DPoPKey:
        if self._key is None:
            self._key = DPoPKey.generate()
        return self._key

    def capability(
        self,
        action: str,
        resource: str,
        ttl: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        hold: str | None = None,
        slot: str | None = None,
        approval_id: str | None = None,
        wait_for_approval: float | None = None,
        on_approval: Callable[[dict[str, Any]], None] | None = None,
    ) -> Op[Capability]:
        body: dict[str, Any] = {"action": action, "resource": resource}
        for name, value in (("ttl", ttl), ("hold", hold), ("slot", slot), ("approval_id", approval_id)):
            if value is not None:
                body[name] = value
        if arguments is not None:
            body["arguments"] = dict(arguments)
        reply = yield from self._ask(body)
        if reply.status != 202:
            return Capability._from(reply.body, action, resource)
        pending = reply.body
        aid = check_id(pending.get("approval_id", ""), "approval")
        if wait_for_approval is None:
            rules = "; ".join(
                f"{a.get('rule')} ({a.get('required')})" for a in pending.get("approvers", []) if isinstance(a, dict)
            )
            raise ApprovalRequired(
                f"approval {aid} is pending (approvers: {rules}); it expires at {pending.get('expires_at')}",
                approval_id=aid,
                code="approval_pending",
                status=202,
            )
        approval = yield from self.wait_for_approval(aid, wait_for_approval, on_approval)
        status = str(approval.get("status"))
        if status != "approved":
            code = {"pending": "approval_pending", "denied": "approval_denied"}.get(status, "approval_expired")
            raise ApprovalRequired(f"approval {aid} is {status}", approval_id=aid, code=code)
        body["approval_id"] = aid
        reply = yield from self._ask(body)
        if reply.status == 202:
            raise ProtocolError("the broker answered 202 to the redemption of an approved request")
        return Capability._from(reply.body, action, resource)

    def _ask(self, body: dict[str, Any]) -> Op[Reply]:
        call = Call("POST", "/v1/capabilities", json=body, bearer=self.token)
        if self.dpop:
            call.dpop = self.key
            call.htu = yield from self.htu_op("/v1/capabilities")
        reply = yield call
        if reply.status not in (201, 202) or not isinstance(reply.body, dict):
            raise ProtocolError(f"POST /v1/capabilities answered {reply.status}")
        return reply

    def approval(self, approval_id: str, wait: float | None = None) -> Op[dict[str, Any]]:
        path = f"/v1/approvals/{check_id(approval_id, 'approval')}"
        extra = 0.0
        if wait is not None:
            secs = max(1, int(wait))
            path += f"?wait={secs}s"
            extra = float(secs)
        reply = yield Call("GET", path, bearer=self.token, extra_timeout=extra)
        if not isinstance(reply.body, dict):
            raise ProtocolError("an approval that is not an object")
        return plain(reply.body)  # type: ignore[no-any-return]

    def wait_for_approval(
        self, approval_id: str, limit: float, on_status: Callable[[dict[str, Any]], None] | None
    ) -> Op[dict[str, Any]]:
        deadline = time.monotonic() + limit
        seen: str | None = None
        while True:
            left = max(0.0, deadline - time.monotonic())
            # The first read does not wait: the caller hears "pending" at once.
            wait = None if seen is None else min(left, APPROVAL_POLL)
            approval = yield from self.approval(approval_id, wait)
            if approval.get("status") != seen:
                seen = approval.get("status")
                if on_status is not None:
                    on_status(approval)
            if seen != "pending" or left <= 0:
                return approval

    def exchange(self, cap: Capability) -> Op[Credential]:
        call = Call("POST", "/v1/exchange", json={"capability": cap.token})
        if cap.bound:
            if self._key is None or self._key.thumbprint != cap.jkt:
                raise ConfigError("the capability is bound to a DPoP key this tool does not hold")
            call.dpop = self._key
            call.htu = yield from self.htu_op("/v1/exchange")
            call.ath_of = cap.token
        reply = yield call
        return Credential(reply.body)

    def revoke(self, capability_id: str) -> Op[bool]:
        path = f"/v1/capabilities/{check_id(capability_id, 'capability')}/revoke"
        reply = yield Call("POST", path, bearer=self.token, idempotent=True)
        return bool(reply.body.get("revoked"))

    def renew_holds(self, ids: list[str]) -> Op[dict[str, Any]]:
        # Renewing moves each hold's lapse forward: twice is once.
        reply = yield Call(
            "POST", "/v1/capabilities/renew", json={"capability_ids": list(ids)}, bearer=self.token, idempotent=True
        )
        return plain(reply.body)  # type: ignore[no-any-return]

    def gateway_session(self) -> Op[GatewaySession]:
        # The run's CA and placeholders: asking twice gives the same.
        reply = yield Call("POST", "/v1/gateway/session", bearer=self.token, idempotent=True)
        return GatewaySession._from(reply.body)

    def access_token(
        self,
        resource: str,
        scope: str,
        dpop: bool,
        approval_id: str | None = None,
    ) -> Op[AccessToken]:
        # The run token stays a Secret here (this generator's frame shows in
        # tracebacks); it is revealed when the request is built.
        form: dict[str, str | Secret] = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": self.token,
            "subject_token_type": RUN_TOKEN_TYPE,
            "resource": resource,
            "scope": scope,
            "requested_token_type": ACCESS_TOKEN_TYPE,
        }
        if approval_id is not None:
            form["approval_id"] = check_id(approval_id, "approval")
        call = Call("POST", "/oauth/token", form=form)
        if dpop:
            call.dpop = self.key
            call.htu = yield from self.htu_op("/oauth/token")
        reply = yield call
        body = reply.body
        if not isinstance(body, dict) or not isinstance(body.get("access_token"), str):
            raise ProtocolError("a token response without access_token")
        token_type = str(body.get("token_type", "Bearer"))
        if dpop and token_type.lower() != "dpop":
            raise ProtocolError(f"asked for a DPoP-bound token, got token_type {token_type!r}")
        try:
            expires_in = int(body.get("expires_in", 0))
        except (TypeError, ValueError):
            raise ProtocolError("expires_in is not a number") from None
        return AccessToken(
            token=Secret(body["access_token"]),
            token_type=token_type,
            expires_at=_dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(seconds=expires_in),
            scope=str(body.get("scope", scope)),
            resource=resource,
            issued_token_type=body.get("issued_token_type"),
            key=self._key if token_type.lower() == "dpop" else None,
        )

    def oauth_metadata(self) -> Op[dict[str, Any]]:
        reply = yield Call("GET", "/.well-known/oauth-authorization-server")
        return plain(reply.body)  # type: ignore[no-any-return]


# ------------------------------------------------------------------ runtime side


class RuntimeOps(Endpoint):
    def __init__(self, base: str, issuer: str | None, key: Secret) -> None:
        super().__init__(base, issuer)
        self.key = key

    def start_run(
        self,
        user: str,
        task: Mapping[str, Any],
        ttl: str | None,
        labels: list[str] | None,
    ) -> Op[dict[str, Any]]:
        if not isinstance(task, Mapping) or "id" not in task or "kind" not in task:
            raise ConfigError('task must be a mapping with "id" and "kind" (and optional "attributes")')
        body: dict[str, Any] = {"user": user, "task": dict(task)}
        if ttl is not None:
            body["ttl"] = ttl
        if labels:
            body["labels"] = list(labels)
        reply = yield Call("POST", "/v1/runs", json=body, bearer=self.key)
        for name in ("run_id", "run_token", "expires_at"):
            if not isinstance(reply.body, dict) or name not in reply.body:
                raise ProtocolError(f"POST /v1/runs answered without {name}")
        return reply.body  # type: ignore[no-any-return]

    def end_run(self, run_id: str) -> Op[dict[str, Any]]:
        # A repeat revokes nothing: ending is idempotent.
        reply = yield Call("POST", f"/v1/runs/{check_id(run_id, 'run')}/end", bearer=self.key, idempotent=True)
        return plain(reply.body)  # type: ignore[no-any-return]

    def get_run(self, run_id: str) -> Op[dict[str, Any]]:
        reply = yield Call("GET", f"/v1/runs/{check_id(run_id, 'run')}", bearer=self.key)
        return plain(reply.body)  # type: ignore[no-any-return]

    def introspect(self, token: Secret, dpop_key: DPoPKey | None) -> Op[dict[str, Any]]:
        call = Call("POST", "/v1/introspect", json={"token": token}, bearer=self.key, idempotent=True)
        if dpop_key is not None:
            call.dpop = dpop_key
            call.htu = yield from self.htu_op("/v1/introspect")
            call.ath_of = token
        reply = yield call
        return plain(reply.body)  # type: ignore[no-any-return]


def token_of(value: "str | Secret | Capability | AccessToken") -> Secret:
    if isinstance(value, (Capability, AccessToken)):
        return value.token
    if isinstance(value, Secret):
        return value
    return Secret(value)


def host_port(text: str) -> tuple[str, str]:
    """A gateway address, ``host:port`` or ``http://host:port``: (host, url)."""
    url = text if "://" in text else f"http://{text}"
    u = urllib.parse.urlsplit(url)
    if u.scheme != "http" or not u.hostname or not u.port or u.path not in ("", "/") or u.username:
        raise ConfigError(f"the gateway address must be HOST:PORT (the gateway speaks plain HTTP), got {text!r}")
    return u.hostname, f"http://{u.netloc}"


__all__ = ["ToolOps", "RuntimeOps", "parse_time", "token_of", "host_port"]
