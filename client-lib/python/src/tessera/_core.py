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
    method: str
    path: str  # starts with "/"; may carry a query
    json: Any = None
    form: Mapping[str, str] | None = None
    bearer: Secret | None = None
    #: Send a DPoP proof made with this key, for ``htu`` (the OAuth issuer + path).
    dpop: DPoPKey | None = None
    htu: str | None = None
    #: The bound token the proof presents (its ``ath``).
    ath_of: Secret | None = None
    extra_timeout: float = 0.0
    retry: bool = True

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
            body = json.loads(raw)
        except ValueError:
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
        headers = {"accept": "application/json"}
        if call.bearer is not None:
            headers["authorization"] = f"Bearer {call.bearer.reveal()}"
        if call.dpop is not None:
            assert call.htu is not None
            headers["dpop"] = call.dpop.proof(call.method, call.htu, access_token=call.ath_of)
        timeout = httpx.Timeout(
            self.transport.timeout + call.extra_timeout, connect=self.transport.connect_timeout
        )
        kwargs: dict[str, Any] = {"headers": headers, "timeout": timeout}
        if call.json is not None:
            kwargs["json"] = call.json
        elif call.form is not None:
            kwargs["data"] = dict(call.form)
        return client.build_request(call.method, self.transport.base + call.path, **kwargs)

    def _outcome(self, call: Call, resp: httpx.Response) -> Reply | TesseraError:
        if call.dpop is not None and call.htu is not None:
            call.dpop.remember_nonce(call.htu, resp.headers.get("dpop-nonce"))
        return decode(resp)

    def _failure(self, exc: httpx.HTTPError) -> TesseraError:
        base = self.transport.base
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            return Unavailable(f"cannot connect to {base}: {type(exc).__name__}: {_short(exc)}")
        if isinstance(exc, httpx.TimeoutException):
            # The request may have been processed: not retried.
            raise Unavailable(f"no answer from {base} in time") from None
        raise ProtocolError(f"talking to {base}: {type(exc).__name__}: {_short(exc)}") from None

    def _next_wait(
        self, call: Call, err: TesseraError, resp: httpx.Response | None, state: dict[str, Any]
    ) -> float | None:
        """How long to wait before the next attempt, or ``None`` to give up."""
        if (
            err.code == "use_dpop_nonce"
            and call.dpop is not None
            and resp is not None
            and resp.headers.get("dpop-nonce")
            and not state["nonce_retried"]
        ):
            state["nonce_retried"] = True
            return 0.0
        if not call.retry:
            return None
        policy = self.transport.retry
        if isinstance(err, RateLimited):
            wait = err.retry_after
        elif isinstance(err, Unavailable) and (err.status is None or err.status == 503):
            wait = policy.backoff(state["retry"])
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
            resp = None
            try:
                resp = self.client.send(self._request(self.client, call))
                try:
                    resp.read()
                finally:
                    resp.close()
                outcome = self._outcome(call, resp)
            except httpx.HTTPError as exc:
                outcome = self._failure(exc)
            if isinstance(outcome, Reply):
                return outcome
            wait = self._next_wait(call, outcome, resp, state)
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
            resp = None
            try:
                resp = await self.client.send(self._request(self.client, call))
                try:
                    await resp.aread()
                finally:
                    await resp.aclose()
                outcome = self._outcome(call, resp)
            except httpx.HTTPError as exc:
                outcome = self._failure(exc)
            if isinstance(outcome, Reply):
                return outcome
            wait = self._next_wait(call, outcome, resp, state)
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
