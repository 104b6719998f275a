"""What can go wrong when asking the broker for something.

Classes by meaning, as in the Rust client (``tessera_client::Error``): a tool
reacts differently to "policy said no" (:class:`Denied`), "a human must
approve" (:class:`ApprovalRequired`), "slow down" (:class:`RateLimited`),
"your grant has lapsed" (:class:`Expired`) and "the broker is unreachable"
(:class:`Unavailable`). Every error that came from a response keeps the
broker's stable ``code`` and ``request_id`` (also the ``X-Request-Id`` header
and the key to the audit log). No error ever holds a token.
"""

from __future__ import annotations

from typing import Any


class TesseraError(Exception):
    """Base class of every error the SDK raises.

    ``code`` is the broker's stable error code (``capability_denied``, ``run_ended``,
    ``invalid_dpop_proof``…; for an OAuth error, its ``code`` member, else its
    ``error``), ``request_id`` the broker's request id, ``status`` the HTTP status;
    each is ``None`` when the error did not come from a response. ``oauth_error`` is
    the RFC 6749 ``error`` of an OAuth endpoint's refusal (``invalid_target``,
    ``invalid_scope``…), ``None`` elsewhere.
    """

    oauth_error: str | None = None

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        request_id: str | None = None,
        status: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.request_id = request_id
        self.status = status

    def __str__(self) -> str:
        parts = [p for p in (str(self.status) if self.status else None, self.code) if p]
        where = f" ({' '.join(parts)}" if parts else ""
        if self.request_id:
            where += f", request {self.request_id}" if where else f" (request {self.request_id}"
        if where:
            where += ")"
        return f"{self.message}{where}"

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(code={self.code!r}, status={self.status!r}, "
            f"request_id={self.request_id!r}, message={self.message!r})"
        )


class Denied(TesseraError):
    """Policy (or the runtime's scope) refused: ``capability_denied``, ``runtime_scope``."""


class ApprovalRequired(TesseraError):
    """A human approval is needed and was not given (yet): ``approval_pending``,
    ``approval_denied``, ``approval_expired``, ``approval_mismatch``,
    ``approval_redeemed``, OAuth ``authorization_pending``. ``approval_id`` names it
    when known: ask again with it once approved."""

    def __init__(self, message: str, *, approval_id: str | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.approval_id = approval_id


class RateLimited(TesseraError):
    """Over a rate limit (``rate_limited``, OAuth ``slow_down``); ``retry_after`` in
    seconds is when to come back."""

    def __init__(self, message: str, *, retry_after: float = 1.0, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.retry_after = retry_after


class Expired(TesseraError):
    """The capability or the run has expired, ended, been revoked or used up:
    ``token_expired``, ``run_expired``, ``run_ended``, ``capability_revoked``,
    ``capability_lapsed``, ``uses_exhausted``. Ask for a new capability (or run)."""


class Unauthenticated(TesseraError):
    """The credential was not accepted: ``unauthenticated``, ``invalid_token``,
    ``invalid_dpop_proof``, ``use_dpop_nonce`` (after the one retry), mTLS
    ``client_certificate_*``, OAuth ``invalid_grant``/``invalid_client``."""


class Rejected(TesseraError):
    """The request itself was wrong (a 4xx such as ``invalid_resource``,
    ``unknown_action``, ``not_found``, OAuth ``invalid_target``); ``status`` says which."""


class Unavailable(TesseraError):
    """The broker (its store, or the downstream backend) is unavailable or could not
    be reached, after the retries allowed (5xx, a refused connection, a timeout)."""


class ConfigError(TesseraError):
    """The SDK is not configured: no address, no credential, an unreadable or
    group-readable token file, ``http://`` to a host off this machine."""


class ProtocolError(TesseraError):
    """The broker answered something this SDK does not understand."""


_DENIED = {"capability_denied", "runtime_scope"}
_APPROVAL = {
    "approval_pending",
    "approval_denied",
    "approval_expired",
    "approval_mismatch",
    "approval_redeemed",
    "authorization_pending",
}
_RATE = {"rate_limited", "slow_down"}
_EXPIRED = {
    "token_expired",
    "run_expired",
    "run_ended",
    "capability_revoked",
    "capability_lapsed",
    "uses_exhausted",
}
_UNAUTH = {
    "unauthenticated",
    "invalid_token",
    "client_certificate_required",
    "client_certificate_mismatch",
    "invalid_dpop_proof",
    "use_dpop_nonce",
    "invalid_grant",
    "invalid_client",
}


def from_response(
    status: int,
    code: str,
    message: str,
    request_id: str | None,
    retry_after: float | None = None,
    approval_id: str | None = None,
) -> TesseraError:
    """Maps a broker error (Tessera or OAuth shape, already decoded) to its class."""
    kw: dict[str, Any] = {"code": code, "request_id": request_id, "status": status}
    if code in _DENIED:
        return Denied(message, **kw)
    if code in _APPROVAL:
        return ApprovalRequired(message, approval_id=approval_id, **kw)
    if code in _RATE or status == 429:
        return RateLimited(message, retry_after=retry_after if retry_after is not None else 1.0, **kw)
    if code in _EXPIRED:
        return Expired(message, **kw)
    if code in _UNAUTH:
        return Unauthenticated(message, **kw)
    if status >= 500:
        return Unavailable(message, **kw)
    return Rejected(message, **kw)
