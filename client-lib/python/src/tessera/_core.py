"""One request to the broker, sync or async: building, retrying, decoding.

Operations are written once, as generators that yield :class:`Call` and get
:class:`Reply` back (``Generator[Call, Reply, T]``); :class:`SyncDriver` and
:class:`AsyncDriver` run them over ``httpx.Client`` and ``httpx.AsyncClient``.
Each attempt is built anew, so a DPoP proof (whose ``jti`` the broker accepts
once) is fresh on every retry.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Generator, Mapping, TypeVar

import httpx

from . import __version__
from ._config import Transport
from ._secret import Secret
from .dpop import DPoPKey
from .errors import ProtocolError, RateLimited, TesseraError, Unavailable, from_response

log = logging.getLogger("tessera")
T = TypeVar("T")

USER_AGENT = f"tessera-python/{__version__}"


@dataclass(repr=False)
class Call:
    """One request. A secret in ``json`` or ``form`` stays a :class:`Secret` until
    the request is built (inside httpx's request object, in no frame's locals)."""

    method: str
    path: str  # starts with "/"; may carry a query
    json: Any = None
    form: Mapping[str, str | Secret] | None = None
    bearer: Secret | None = None
    #: Send a DPoP proof made with this key, for ``htu`` (the OAuth issuer + path).
    dpop: DPoPKey | None = None
    htu: str | None = None
    #: The bound token the proof presents (its ``ath``).
    ath_of: Secret | None = None
    extra_timeout: float = 0.0
    retry: bool = True
    #: Whether sending it twice does what sending it once does (``None``: GETs are,
    #: POSTs are not). Decides which failures are retried.
    idempotent: bool | None = None

    @property
    def repeatable(self) -> bool:
        return self.idempotent if self.idempotent is not None else self.method in ("GET", "HEAD")

    def __repr__(self) -> str:
        # Bodies carry capabilities and the run token (the token endpoint's form):
        # never in a traceback.
        return f"Call({self.method} {self.path.split('?')[0]}, body=<redacted>)"


@dataclass(repr=False)
class Reply:
    status: int
    headers: httpx.Headers
    body: Any = field(default=None)

    def __repr__(self) -> str:
        return f"Reply(status={self.status}, body=<redacted>)"


Op = Generator[Call, Reply, T]


class JsonObject(dict):  # type: ignore[type-arg]
    """A JSON object from the broker. Its ``repr`` names its keys, not its values:
    answers carry run tokens, capabilities and credentials, and a frame that holds
    one (a crash reporter's locals) must not show them. Equal to a plain ``dict``;
    ``tessera.models.plain`` makes one of what is handed to callers."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k!r}: <redacted>" for k in self) + "}"

    __str__ = __repr__


def _revealed(value: Any) -> Any:
    """A body with its :class:`Secret` values revealed (called inside an argument
    list, so no frame's locals hold the result)."""
    if isinstance(value, Secret):
        return value.reveal()
    if isinstance(value, Mapping):
        return {k: _revealed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_revealed(v) for v in value]
    return value


# 503 codes after which nothing was done: a request that is not idempotent may be
# sent again (client-lib/src/error_code.rs). `store_unavailable`: the broker failed
# closed, nothing was issued; `backend_throttled`: the backend refused before
# issuing. Not `backend_unavailable` (a use may have been reserved) nor
# `request_timeout` (the request may have taken effect).
NOTHING_DONE_503 = frozenset({"store_unavailable", "backend_throttled"})

# How a request failed without an answer: never sent (the connection could not be
# had), maybe processed (it was sent, the answer did not come), or a failure that a
# new attempt would not cure.
UNSENT, MAYBE_SENT, FATAL, ANSWERED = "unsent", "maybe_sent", "fatal", "answered"


def _retry_after(headers: httpx.Headers) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(int(value.strip())))
    except ValueError:
        return None


def decode(resp: httpx.Response) -> Reply | TesseraError:
    """A reply for a 2xx, the error (Tessera or OAuth JSON shape) otherwise."""
    status = resp.status_code
    header_id = resp.headers.get("x-request-id")
    raw = resp.content
    body: Any = None
    if raw:
        try:
            body = json.loads(raw, object_hook=JsonObject)
        except (ValueError, RecursionError):
            body = None
    if 200 <= status < 300:
        if raw and body is None:
            return ProtocolError(f"{status}: the answer is not JSON", status=status, request_id=header_id)
        return Reply(status, resp.headers, body if body is not None else {})
    retry_after = _retry_after(resp.headers)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("code"), str):
            return from_response(
                status,
                err["code"],
                str(err.get("message") or err["code"]),
                err.get("request_id") or header_id,
                retry_after,
                err.get("approval_id") if isinstance(err.get("approval_id"), str) else None,
            )
        if isinstance(err, str):
            # RFC 6749 §5.2 (the OAuth endpoints): {"error", "error_description", "code", "request_id"}
            code: str = body["code"] if isinstance(body.get("code"), str) else err
            error = from_response(
                status,
                code,
                str(body.get("error_description") or err),
                body.get("request_id") or header_id,
                retry_after,
                body.get("approval_id") if isinstance(body.get("approval_id"), str) else None,
            )
            error.oauth_error = err
            return error
    if 300 <= status < 400:
        return ProtocolError(
            f"the broker answered {status}, a redirect; clients never follow redirects "
            "(check TESSERA_ADDR)",
            status=status,
            request_id=header_id,
        )
    if status >= 500:
        return Unavailable(f"the broker answered {status}", status=status, request_id=header_id)
    if status == 429:
        return RateLimited(
            "rate limited", retry_after=retry_after or 1.0, status=status, request_id=header_id, code="rate_limited"
        )
    return ProtocolError(f"{status} without an error body", status=status, request_id=header_id)


class _Base:
    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def _request(self, client: httpx.Client | httpx.AsyncClient, call: Call) -> httpx.Request:
        # The secrets (bearer, form, JSON body) are revealed inside the argument list:
        # they go into httpx's request object and no local of this frame holds them.
        return client.build_request(
            call.method,
            self.transport.base + call.path,
            headers=_headers(call),
            timeout=httpx.Timeout(self.transport.timeout + call.extra_timeout, connect=self.transport.connect_timeout),
            **_payload(call),
        )

    def _outcome(self, call: Call, resp: httpx.Response) -> Reply | TesseraError:
        if call.dpop is not None and call.htu is not None:
            call.dpop.remember_nonce(call.htu, resp.headers.get("dpop-nonce"))
        return decode(resp)

    def _failure(self, exc: httpx.HTTPError) -> tuple[TesseraError, str]:
        """The error for a request that got no answer, and whether it was sent. It is
        returned, not raised: raised here (inside the ``except``) it would keep httpx's
        exception as its ``__context__``, and that holds the request, token and all."""
        base = self.transport.base
        name = type(exc).__name__
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)):
            return Unavailable(f"cannot connect to {base}: {name}: {_short(exc)}"), UNSENT
        if isinstance(exc, httpx.TimeoutException):
            return Unavailable(f"no answer from {base} in time ({name})"), MAYBE_SENT
        if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)):
            return ProtocolError(f"talking to {base}: {name}: {_short(exc)}"), MAYBE_SENT
        return ProtocolError(f"talking to {base}: {name}: {_short(exc)}"), FATAL

    def _next_wait(
        self,
        call: Call,
        err: TesseraError,
        resp: httpx.Response | None,
        how: str,
        state: dict[str, Any],
    ) -> float | None:
        """How long to wait before the next attempt, or ``None`` to give up.

        Retried: a 429; a connection that could not be had; a 503 after which nothing
        was done (``store_unavailable``, ``backend_throttled``). A request that is
        idempotent (GETs, ending a run, revoking, introspecting) is also retried after
        any 503, a timeout or a broken connection: it may have been processed, and doing
        it again does no harm. A request that is not (starting a run, asking for a
        capability, an exchange, a token) is not: it would issue twice."""
        if (
            err.code == "use_dpop_nonce"
            and call.dpop is not None
            and resp is not None
            and resp.headers.get("dpop-nonce")
            and not state["nonce_retried"]
        ):
            state["nonce_retried"] = True
            return 0.0
        if not call.retry or how == FATAL:
            return None
        policy = self.transport.retry
        if how == UNSENT:
            wait = policy.backoff(state["retry"])
        elif how == MAYBE_SENT:
            if not call.repeatable:
                return None
            wait = policy.backoff(state["retry"])
        elif isinstance(err, RateLimited):
            wait = err.retry_after
        elif isinstance(err, Unavailable) and err.status == 503:
            if not call.repeatable and err.code not in NOTHING_DONE_503:
                return None
            after = _retry_after(resp.headers) if resp is not None else None
            wait = after if after is not None else policy.backoff(state["retry"])
        else:
            return None
        if state["retry"] >= policy.max_retries or state["waited"] + wait > policy.budget:
            return None
        log.debug("retrying %s %s after %.2fs (%s)", call.method, call.path.split("?")[0], wait, err.code)
        state["retry"] += 1
        state["waited"] += wait
        return wait


def _short(exc: BaseException) -> str:
    text = str(exc) or repr(exc)
    return text[:300]


def _headers(call: Call) -> dict[str, str]:
    headers = {"accept": "application/json"}
    if call.dpop is not None:
        assert call.htu is not None
        headers["dpop"] = call.dpop.proof(call.method, call.htu, access_token=call.ath_of)
    if call.bearer is not None:
        headers["authorization"] = "Bearer " + call.bearer.reveal()
    return headers


def _payload(call: Call) -> dict[str, Any]:
    if call.json is not None:
        return {"json": _revealed(call.json)}
    if call.form is not None:
        return {"data": _revealed(call.form)}
    return {}


class SyncDriver(_Base):
    def __init__(self, transport: Transport) -> None:
        super().__init__(transport)
        self.client = httpx.Client(
            verify=transport.ssl_context(),
            trust_env=False,
            follow_redirects=False,
            proxy=transport.proxy,
            headers={"user-agent": USER_AGENT},
        )

    def send(self, call: Call) -> Reply:
        state = {"retry": 0, "waited": 0.0, "nonce_retried": False}
        while True:
            resp: httpx.Response | None = None
            outcome: Reply | TesseraError
            try:
                resp = self.client.send(self._request(self.client, call))
                try:
                    resp.read()
                finally:
                    resp.close()
            except httpx.HTTPError as exc:
                resp = None
                outcome, how = self._failure(exc)
            else:
                outcome, how = self._outcome(call, resp), ANSWERED
            # Raised out here, after the `except`: nothing links it to httpx's exception.
            if isinstance(outcome, Reply):
                return outcome
            wait = self._next_wait(call, outcome, resp, how, state)
            if wait is None:
                raise outcome
            if wait:
                time.sleep(wait)

    def run(self, op: Op[T]) -> T:
        try:
            call = next(op)
            while True:
                try:
                    reply = self.send(call)
                except TesseraError as err:
                    call = op.throw(err)
                else:
                    call = op.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            op.close()

    def close(self) -> None:
        self.client.close()


class AsyncDriver(_Base):
    def __init__(self, transport: Transport) -> None:
        super().__init__(transport)
        self.client = httpx.AsyncClient(
            verify=transport.ssl_context(),
            trust_env=False,
            follow_redirects=False,
            proxy=transport.proxy,
            headers={"user-agent": USER_AGENT},
        )

    async def send(self, call: Call) -> Reply:
        state = {"retry": 0, "waited": 0.0, "nonce_retried": False}
        while True:
            resp: httpx.Response | None = None
            outcome: Reply | TesseraError
            try:
                resp = await self.client.send(self._request(self.client, call))
                try:
                    await resp.aread()
                finally:
                    await resp.aclose()
            except httpx.HTTPError as exc:
                resp = None
                outcome, how = self._failure(exc)
            else:
                outcome, how = self._outcome(call, resp), ANSWERED
            # Raised out here, after the `except`: nothing links it to httpx's exception.
            if isinstance(outcome, Reply):
                return outcome
            wait = self._next_wait(call, outcome, resp, how, state)
            if wait is None:
                raise outcome
            if wait:
                await asyncio.sleep(wait)

    async def run(self, op: Op[T]) -> T:
        try:
            call = next(op)
            while True:
                try:
                    reply = await self.send(call)
                except TesseraError as err:
                    call = op.throw(err)
                else:
                    call = op.send(reply)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        finally:
            op.close()

    async def close(self) -> None:
        await self.client.aclose()


def blocking(fn: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    async def wrapper(*args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    return wrapper
