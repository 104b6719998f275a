"""The SDK's own rules, without a broker: configuration, redaction, DPoP proofs,
error mapping, retries (over httpx's MockTransport, on a loopback address)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import traceback
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

import tessera
from tessera._config import RetryPolicy, broker_address, check_transport
from tessera._core import SyncDriver, decode
from tessera.dpop import htu_of

TOKEN = "tsr_run_" + "A" * 43
ADDR = "http://127.0.0.1:1"


def test_addresses_and_transport_rules() -> None:
    assert broker_address("127.0.0.1:8700") == "http://127.0.0.1:8700"
    assert broker_address(" https://b.example:8700/ ") == "https://b.example:8700"
    for ok in ["http://127.0.0.1:8700", "http://127.9.9.9", "http://[::1]:8700", "http://localhost:8700", "https://t.example"]:
        check_transport(ok, False, False)
    for refused in ["http://192.0.2.10:8700", "http://tessera.internal", "http://[2001:db8::1]", "http://127.0.0.1.nip.io", "http://localhost.example"]:
        with pytest.raises(tessera.ConfigError, match="in clear"):
            check_transport(refused, False, False)
        check_transport(refused, False, True)
    with pytest.raises(tessera.ConfigError, match="TESSERA_CA_FILE"):
        check_transport("http://127.0.0.1:8700", True, False)
    with pytest.raises(tessera.ConfigError, match="in clear"):
        tessera.Tool("192.0.2.10:8700", TOKEN, env={})


def test_token_file_modes(tmp_path: Path) -> None:
    f = tmp_path / "run.token"
    f.write_text(TOKEN + "\n")
    env = {"TESSERA_ADDR": ADDR, "TESSERA_RUN_TOKEN_FILE": str(f)}
    for mode in (0o644, 0o640, 0o604, 0o666, 0o660):
        os.chmod(f, mode)
        with pytest.raises(tessera.ConfigError) as e:
            tessera.Tool(env=env)
        assert f"{mode:o}" in str(e.value) and "chmod 600" in str(e.value)
        assert TOKEN not in str(e.value)
    for mode in (0o600, 0o400):
        os.chmod(f, mode)
        t = tessera.Tool(env=env)
        assert t.run_token.reveal() == TOKEN
        t.close()


def test_token_from_descriptor_is_read_and_closed() -> None:
    r, w = os.pipe()
    os.write(w, TOKEN.encode())
    os.close(w)
    t = tessera.Tool(env={"TESSERA_ADDR": ADDR, "TESSERA_RUN_TOKEN_FD": str(r)})
    assert t.run_token.reveal() == TOKEN
    with pytest.raises(OSError):
        os.fstat(r)
    t.close()
    with pytest.raises(tessera.ConfigError, match="above 2"):
        tessera.Tool(env={"TESSERA_ADDR": ADDR, "TESSERA_RUN_TOKEN_FD": "2"})


def test_configuration_errors_are_clear() -> None:
    with pytest.raises(tessera.ConfigError, match="TESSERA_ADDR"):
        tessera.Tool(env={})
    with pytest.raises(tessera.ConfigError, match="TESSERA_RUN_TOKEN_FILE"):
        tessera.Tool(env={"TESSERA_ADDR": ADDR})
    with pytest.raises(tessera.ConfigError, match="TESSERA_ALLOW_TOKEN_ENV"):
        tessera.Tool(env={"TESSERA_ADDR": ADDR, "TESSERA_RUN_TOKEN": TOKEN})
    ok = tessera.Tool(env={"TESSERA_ADDR": ADDR, "TESSERA_RUN_TOKEN": TOKEN, "TESSERA_ALLOW_TOKEN_ENV": "1"})
    assert TOKEN not in repr(ok) and TOKEN not in str(ok)
    ok.close()
    with pytest.raises(tessera.ConfigError, match="tsr_run_"):
        tessera.Tool(ADDR, "tsr_rt_wrongkind", env={})
    with pytest.raises(tessera.ConfigError, match="tsr_rt_"):
        tessera.Runtime(ADDR, TOKEN, env={})
    with pytest.raises(tessera.ConfigError, match="TESSERA_RUNTIME_KEY"):
        tessera.Runtime(env={"TESSERA_ADDR": ADDR})


def test_secret_never_shows_itself() -> None:
    s = tessera.Secret("hunter2-secret")
    for text in (repr(s), str(s), f"{s}", f"{s!r}", "%s" % s, json.dumps({"a": str(s)})):
        assert "hunter2" not in text
    assert s.reveal() == "hunter2-secret" and s == "hunter2-secret"
    with pytest.raises(TypeError):
        import pickle

        pickle.dumps(s)


def test_dpop_proof_is_rfc9449() -> None:
    key = tessera.DPoPKey()
    proof = key.proof("post", "https://Broker.example:8700/oauth/token?x=1#f", access_token="tok", nonce="n-1")
    header = jwt.get_unverified_header(proof)
    assert header["typ"] == "dpop+jwt" and header["alg"] == "ES256"
    assert set(header["jwk"]) == {"kty", "crv", "x", "y"} and header["jwk"]["crv"] == "P-256"
    claims = jwt.decode(proof, jwt.PyJWK(header["jwk"], "ES256").key, algorithms=["ES256"])
    assert claims["htm"] == "POST"
    assert claims["htu"] == "https://broker.example:8700/oauth/token"
    assert claims["ath"] == base64.urlsafe_b64encode(hashlib.sha256(b"tok").digest()).rstrip(b"=").decode()
    assert claims["nonce"] == "n-1" and len(claims["jti"]) <= 128 and isinstance(claims["iat"], int)
    assert key.proof("GET", "http://h/x") != key.proof("GET", "http://h/x")  # fresh jti
    # RFC 7638: SHA-256 of the required members in lexicographic order, no whitespace.
    jwk = key.public_jwk
    canonical = '{"crv":"P-256","kty":"EC","x":"%s","y":"%s"}' % (jwk["x"], jwk["y"])
    expected = base64.urlsafe_b64encode(hashlib.sha256(canonical.encode()).digest()).rstrip(b"=").decode()
    assert key.thumbprint == expected
    assert "private" not in repr(key).replace("private_key=<redacted>", "")
    assert htu_of("http://h:1/a/b?c") == "http://h:1/a/b"


def _response(status: int, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.Response(status, content=json.dumps(body).encode(), headers=headers or {})


def test_errors_map_by_code_in_both_shapes() -> None:
    e = decode(_response(403, {"error": {"code": "capability_denied", "message": "no", "request_id": "r-1"}}))
    assert isinstance(e, tessera.Denied) and e.code == "capability_denied" and e.request_id == "r-1" and e.status == 403
    e = decode(_response(400, {"error": "invalid_scope", "error_description": "denied", "code": "capability_denied", "request_id": "r-2"}))
    assert isinstance(e, tessera.Denied) and e.code == "capability_denied" and e.request_id == "r-2"
    assert e.oauth_error == "invalid_scope"
    e = decode(_response(400, {"error": "authorization_pending", "code": "approval_pending", "approval_id": "a-1"}))
    assert isinstance(e, tessera.ApprovalRequired) and e.approval_id == "a-1"
    e = decode(_response(400, {"error": "invalid_target"}, {"x-request-id": "r-3"}))
    assert isinstance(e, tessera.Rejected) and e.code == "invalid_target" and e.request_id == "r-3"
    e = decode(_response(429, {"error": "slow_down"}, {"retry-after": "7"}))
    assert isinstance(e, tessera.RateLimited) and e.retry_after == 7
    e = decode(_response(401, {"error": {"code": "invalid_dpop_proof", "message": "m", "request_id": "r"}}))
    assert isinstance(e, tessera.Unauthenticated)
    e = decode(_response(403, {"error": {"code": "run_ended", "message": "m", "request_id": "r"}}))
    assert isinstance(e, tessera.Expired)
    e = decode(httpx.Response(503, content=b"", headers={"retry-after": "1"}))
    assert isinstance(e, tessera.Unavailable)
    e = decode(httpx.Response(302, headers={"location": "http://elsewhere/"}))
    assert isinstance(e, tessera.ProtocolError) and "redirect" in str(e)
    assert all(isinstance(x, tessera.TesseraError) for x in [tessera.Denied("m")])


def test_backoff_is_jittered_and_bounded() -> None:
    p = RetryPolicy()
    for retry in range(10):
        nominal = min(p.base * 2**retry, p.max_backoff)
        b = p.backoff(retry)
        assert nominal / 2 <= b < nominal * 1.5


def _tool_with(handler: Any, **kw: Any) -> tessera.Tool:
    t = tessera.Tool(ADDR, TOKEN, env={}, retry=RetryPolicy(max_retries=3, base=0.01, budget=1.0), **kw)
    assert isinstance(t._driver, SyncDriver)
    t._driver.client = httpx.Client(transport=httpx.MockTransport(handler))
    return t


CAP = "eyJhbGciOiJFZERTQSJ9." + base64.urlsafe_b64encode(b'{"jti":"x"}').rstrip(b"=").decode() + ".sig"
ISSUED = {"capability_id": "00000000-0000-4000-8000-000000000000", "token": CAP, "expires_at": "2030-01-01T00:00:00Z", "uses": 1}


def test_retries_503_and_429_but_never_a_decision() -> None:
    seen: list[int] = []

    def flaky(req: httpx.Request) -> httpx.Response:
        seen.append(1)
        if len(seen) == 1:
            return httpx.Response(503, json={"error": {"code": "store_unavailable", "message": "m", "request_id": "r"}})
        if len(seen) == 2:
            return httpx.Response(429, json={"error": {"code": "rate_limited", "message": "m", "request_id": "r"}}, headers={"retry-after": "0"})
        if len(seen) == 3:
            raise httpx.ConnectError("refused")
        return httpx.Response(201, json=ISSUED)

    t = _tool_with(flaky)
    assert t.capability("read", "svc-reports:x").id == ISSUED["capability_id"]
    assert len(seen) == 4

    denied: list[int] = []

    def deny(req: httpx.Request) -> httpx.Response:
        denied.append(1)
        return httpx.Response(403, json={"error": {"code": "capability_denied", "message": "no", "request_id": "r-9"}})

    t = _tool_with(deny)
    with pytest.raises(tessera.Denied) as e:
        t.capability("read", "svc-reports:x")
    assert len(denied) == 1 and e.value.request_id == "r-9"

    internal: list[int] = []

    def broken(req: httpx.Request) -> httpx.Response:
        internal.append(1)
        return httpx.Response(500, json={"error": {"code": "internal", "message": "m", "request_id": "r"}})

    t = _tool_with(broken)
    with pytest.raises(tessera.Unavailable):
        t.capability("read", "svc-reports:x")
    assert len(internal) == 1


def test_use_dpop_nonce_is_retried_once_with_the_nonce() -> None:
    proofs: list[dict[str, Any]] = []

    def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/.well-known/oauth-authorization-server":
            return httpx.Response(200, json={"issuer": "http://127.0.0.1:1"})
        proofs.append(jwt.decode(req.headers["dpop"], options={"verify_signature": False}))
        if "nonce" not in proofs[-1]:
            return httpx.Response(
                401,
                json={"error": {"code": "use_dpop_nonce", "message": "m", "request_id": "r"}},
                headers={"dpop-nonce": "n-42", "www-authenticate": 'DPoP error="use_dpop_nonce"'},
            )
        return httpx.Response(201, json=ISSUED, headers={"dpop-nonce": "n-43"})

    t = _tool_with(handler, dpop=True)
    t.capability("read", "svc-reports:x")
    assert [p.get("nonce") for p in proofs] == [None, "n-42"]
    assert proofs[0]["jti"] != proofs[1]["jti"] and proofs[1]["htu"] == "http://127.0.0.1:1/v1/capabilities"
    assert t.dpop_key.nonce_for("http://127.0.0.1:1/x") == "n-43"

    always: list[int] = []

    def stubborn(req: httpx.Request) -> httpx.Response:
        if req.url.path.startswith("/.well-known"):
            return httpx.Response(404, json={"error": {"code": "not_found", "message": "m", "request_id": "r"}})
        always.append(1)
        return httpx.Response(
            400, json={"error": "use_dpop_nonce", "error_description": "nonce"}, headers={"dpop-nonce": "n"}
        )

    t = _tool_with(stubborn)
    with pytest.raises(tessera.Unauthenticated) as e:
        t.access_token("http://127.0.0.1:8931/mcp", "notes:read")
    assert e.value.code == "use_dpop_nonce" and len(always) == 2


def test_redirects_are_never_followed() -> None:
    calls: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(str(req.url))
        return httpx.Response(307, headers={"location": "http://127.0.0.1:2/v1/capabilities"})

    t = _tool_with(handler)
    with pytest.raises(tessera.ProtocolError, match="redirect"):
        t.capability("read", "svc-reports:x")
    assert calls == ["http://127.0.0.1:1/v1/capabilities"]


def test_models_redact() -> None:
    cap = tessera.Capability._from(ISSUED, "read", "svc-reports:x")
    assert CAP not in repr(cap) and CAP not in str(cap)
    cred = tessera.Credential(
        {"kind": "postgres", "lease_id": "l", "expires_at": "2030-01-01T00:00:00.123456789Z", "uses_left": 0,
         "host": "h", "port": 5432, "database": "d", "username": "u", "password": "pw-secret", "dsn": "postgres://u:pw-secret@h/d"}
    )  # fmt: skip
    db = tessera.DatabaseCredentials._from(cap, cred)
    for obj in (cred, db):
        assert "pw-secret" not in repr(obj) and "pw-secret" not in str(obj)
    assert db.password.reveal() == "pw-secret" and cred["port"] == 5432


def test_the_body_exception_wins_when_ending_fails_too() -> None:
    run_id = "00000000-0000-4000-8000-00000000000a"
    calls: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(f"{req.method} {req.url.path}")
        if req.url.path == "/v1/runs":
            return httpx.Response(
                201, json={"run_id": run_id, "run_token": TOKEN, "expires_at": "2030-01-01T00:00:00Z"}
            )
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "m", "request_id": "r"}})

    rt = tessera.Runtime(ADDR, "tsr_rt_" + "B" * 43, env={})
    rt._driver.client = httpx.Client(transport=httpx.MockTransport(handler))
    with pytest.raises(ValueError, match="body") as e:
        with rt.run(user="alice", task={"id": "t", "kind": "summarize"}):
            raise ValueError("body")
    assert calls == ["POST /v1/runs", f"POST /v1/runs/{run_id}/end"]
    assert any("ending run" in n for n in e.value.__notes__)
    # Without an exception in the body, a failed end is raised.
    with pytest.raises(tessera.Rejected):
        with rt.run(user="alice", task={"id": "t", "kind": "summarize"}):
            pass


def test_internal_objects_in_a_traceback_show_no_secret() -> None:
    from tessera._core import Call, Reply

    call = Call("POST", "/oauth/token", form={"subject_token": TOKEN}, bearer=tessera.Secret(TOKEN))
    reply = Reply(201, httpx.Headers(), {"run_token": TOKEN})
    for obj in (call, reply):
        assert TOKEN not in repr(obj)
    t = tessera.Tool(ADDR, TOKEN, env={})
    assert TOKEN not in repr(t._transport) and TOKEN not in repr(vars(t))
    t.close()


# ------------------------------------------------------------------ reviewer's findings


RT_KEY = "tsr_rt_" + "S" * 43
RUN_ID = "00000000-0000-4000-8000-00000000000b"
CAP_ID = ISSUED["capability_id"]
NOTES_URL = "http://127.0.0.1:8931/mcp"
RUN_BODY = {"run_id": RUN_ID, "run_token": TOKEN, "expires_at": "2030-01-01T00:00:00Z"}


def _traceback_text(exc: BaseException) -> str:
    """What a crash reporter sees: the chain with every frame's locals."""
    return "".join(traceback.TracebackException(type(exc), exc, exc.__traceback__, capture_locals=True).format())


def _chain(exc: BaseException | None, seen: list[BaseException] | None = None) -> list[BaseException]:
    """The exception and all it links to (``__cause__``, ``__context__``), recursively."""
    seen = [] if seen is None else seen
    if exc is not None and not any(exc is s for s in seen):
        seen.append(exc)
        _chain(exc.__cause__, seen)
        _chain(exc.__context__, seen)
    return seen


def _runtime_with(handler: Any, **kw: Any) -> tessera.Runtime:
    rt = tessera.Runtime(ADDR, RT_KEY, env={}, retry=RetryPolicy(max_retries=3, base=0.01, budget=1.0), **kw)
    rt._driver.client = httpx.Client(transport=httpx.MockTransport(handler))
    return rt


def _refuse_token_exchange(req: httpx.Request) -> httpx.Response:
    if req.url.path.startswith("/.well-known"):
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "m", "request_id": "r"}})
    return httpx.Response(400, json={"error": "invalid_grant", "error_description": "ended", "code": "run_ended"})


def test_no_secret_in_the_frame_locals_of_a_traceback() -> None:
    # The token endpoint refuses: the run token went in the form (finding 2).
    for dpop in (False, True):
        with pytest.raises(tessera.Expired) as e:
            _tool_with(_refuse_token_exchange).access_token(NOTES_URL, "notes:read", dpop=dpop)
        assert TOKEN not in _traceback_text(e.value)

    # A token response the SDK refuses: the access token is in no local either.
    def bearer_for_dpop(req: httpx.Request) -> httpx.Response:
        if req.url.path.startswith("/.well-known"):
            return httpx.Response(404, json={"error": {"code": "not_found", "message": "m", "request_id": "r"}})
        return httpx.Response(200, json={"access_token": "AT-secret-value", "token_type": "Bearer", "expires_in": 60})

    with pytest.raises(tessera.ProtocolError) as e:
        _tool_with(bearer_for_dpop).access_token(NOTES_URL, "notes:read", dpop=True)
    text = _traceback_text(e.value)
    assert TOKEN not in text and "AT-secret-value" not in text

    # A refused capability and a refused exchange.
    def deny(req: httpx.Request) -> httpx.Response:
        return httpx.Response(403, json={"error": {"code": "capability_denied", "message": "no", "request_id": "r"}})

    with pytest.raises(tessera.Denied) as e:
        _tool_with(deny).capability("read", "svc-reports:x")
    assert TOKEN not in _traceback_text(e.value)
    cap = tessera.Capability._from(ISSUED, "read", "svc-reports:x")
    with pytest.raises(tessera.Denied) as e:
        _tool_with(deny).exchange(cap)
    assert CAP not in _traceback_text(e.value)

    # A run whose answer the SDK cannot read: the body with the run token is in a frame.
    def bad_run(req: httpx.Request) -> httpx.Response:
        return httpx.Response(201, json=dict(RUN_BODY, expires_at="not a time"))

    with pytest.raises(tessera.ProtocolError) as e:
        _runtime_with(bad_run).start_run("alice", {"id": "t", "kind": "summarize"})
    text = _traceback_text(e.value)
    assert TOKEN not in text and RT_KEY not in text and "repr() failed" not in text

    # Configuration errors: the secret passed in, or read from the environment.
    refused: list[Any] = [
        lambda: tessera.Tool("192.0.2.10:8700", TOKEN, env={}),  # http:// off loopback
        lambda: tessera.Tool(ADDR, RT_KEY, env={}),  # a runtime key where the run token goes
        lambda: tessera.Tool(env={"TESSERA_ADDR": ADDR, "TESSERA_RUN_TOKEN": TOKEN}),  # no opt-in
        lambda: tessera.Runtime("192.0.2.10:8700", RT_KEY, env={}),
        lambda: tessera.Runtime(ADDR, TOKEN, env={}),
        lambda: tessera.Runtime(env={"TESSERA_RUNTIME_KEY": RT_KEY}),  # no address
        lambda: tessera.AsyncTool("192.0.2.10:8700", TOKEN, env={}),
        lambda: tessera.AsyncRuntime(env={"TESSERA_RUNTIME_KEY": RT_KEY}),
    ]
    for make in refused:
        with pytest.raises(tessera.ConfigError) as e:
            make()
        text = _traceback_text(e.value)
        assert TOKEN not in text and RT_KEY not in text and "repr() failed" not in text, text


@pytest.mark.parametrize(
    "failure", [httpx.ReadTimeout, httpx.WriteTimeout, httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError]
)
def test_no_exception_in_the_chain_holds_the_request(failure: type[httpx.TransportError]) -> None:
    """httpx's errors keep the request (its headers and body): none may be in the chain (finding 5)."""

    def handler(req: httpx.Request) -> httpx.Response:
        raise failure("boom", request=req)

    def holds_secret(x: BaseException) -> bool:
        try:
            req = x.request  # type: ignore[attr-defined]
        except (AttributeError, RuntimeError):
            return False
        raw = repr(req.headers.raw).encode() + req.content
        return TOKEN.encode() in raw or RT_KEY.encode() in raw

    calls: list[Any] = [
        lambda: _tool_with(handler).access_token(NOTES_URL, "notes:read", dpop=False),  # the token in the form
        lambda: _tool_with(handler).capability("read", "svc-reports:x"),  # the token as bearer
        lambda: _tool_with(handler).revoke(CAP_ID),  # idempotent: retried, then raised
        lambda: _runtime_with(handler).end_run(RUN_ID),
    ]
    for call in calls:
        with pytest.raises(tessera.TesseraError) as e:
            call()
        chain = _chain(e.value)
        assert not any(holds_secret(x) for x in chain), [type(x).__name__ for x in chain]
        assert not any(isinstance(x, httpx.HTTPError) for x in chain)
        text = _traceback_text(e.value)
        assert TOKEN not in text and RT_KEY not in text
    # How they read: a timeout is Unavailable, a broken connection a ProtocolError.
    expected = {
        httpx.ReadTimeout: tessera.Unavailable,
        httpx.WriteTimeout: tessera.Unavailable,
        httpx.ConnectError: tessera.Unavailable,
        httpx.RemoteProtocolError: tessera.ProtocolError,
        httpx.ReadError: tessera.ProtocolError,
    }[failure]
    with pytest.raises(expected):
        _tool_with(handler).capability("read", "svc-reports:x")


# What each operation answers when it works (MockTransport), by path.
def _success(req: httpx.Request) -> httpx.Response:
    path = req.url.path
    if path == "/v1/capabilities":
        return httpx.Response(201, json=ISSUED)
    if path == "/v1/exchange":
        return httpx.Response(200, json={"kind": "token", "lease_id": "l", "expires_at": "2030-01-01T00:00:00Z", "token": "x"})
    if path == "/oauth/token":
        return httpx.Response(200, json={"access_token": "at", "token_type": "Bearer", "expires_in": 60})
    if path == "/v1/runs":
        return httpx.Response(201, json=RUN_BODY)
    if path == f"/v1/runs/{RUN_ID}/end":
        return httpx.Response(200, json={"run_id": RUN_ID, "revoked": {"capabilities": 0}})
    if path == f"/v1/capabilities/{CAP_ID}/revoke":
        return httpx.Response(200, json={"revoked": True})
    if path == f"/v1/runs/{RUN_ID}":
        return httpx.Response(200, json={"run_id": RUN_ID, "state": "active"})
    if path == "/v1/introspect":
        return httpx.Response(200, json={"active": False})
    raise AssertionError(f"unexpected {req.method} {path}")


def _unavailable(code: str | None, headers: dict[str, str] | None = None) -> httpx.Response:
    if code is None:
        return httpx.Response(503, content=b"", headers=headers or {})
    return httpx.Response(503, json={"error": {"code": code, "message": "m", "request_id": "r"}}, headers=headers or {})


def _attempts(op: str, failure: Any) -> tuple[int, BaseException | None]:
    """How many times ``op`` was sent when its first attempt failed with ``failure``
    (a response, or an httpx exception class), and what it raised."""
    sent: list[int] = []

    def handler(req: httpx.Request) -> httpx.Response:
        sent.append(1)
        if len(sent) == 1:
            if isinstance(failure, httpx.Response):
                return failure
            raise failure("first attempt failed", request=req)
        return _success(req)

    tool, runtime = _tool_with(handler), _runtime_with(handler)
    cap = tessera.Capability._from(ISSUED, "read", "svc-reports:x")
    ops = {
        "start_run": lambda: runtime.start_run("alice", {"id": "t", "kind": "summarize"}),
        "capability": lambda: tool.capability("read", "svc-reports:x"),
        "exchange": lambda: tool.exchange(cap),
        "access_token": lambda: tool.access_token(NOTES_URL, "notes:read", dpop=False),
        "end_run": lambda: runtime.end_run(RUN_ID),
        "revoke": lambda: tool.revoke(CAP_ID),
        "get_run": lambda: runtime.get_run(RUN_ID),
        "introspect": lambda: runtime.introspect(cap),
    }
    try:
        ops[op]()
    except tessera.TesseraError as e:
        return len(sent), e
    return len(sent), None


NON_IDEMPOTENT = ["start_run", "capability", "exchange", "access_token"]
IDEMPOTENT = ["end_run", "revoke", "get_run", "introspect"]


def test_a_post_that_may_have_taken_effect_is_not_sent_twice() -> None:
    """Finding 4: a non-idempotent POST is retried only when nothing was done."""
    maybe_done = [
        _unavailable("request_timeout"),  # the broker gave up; the request may have taken effect
        _unavailable("backend_unavailable"),  # a use may have been reserved
        _unavailable("backend_unsafe_defaults"),
        _unavailable(None),  # a 503 that says nothing (a proxy's)
        httpx.ReadTimeout,
        httpx.WriteTimeout,
        httpx.RemoteProtocolError,
        httpx.ReadError,
    ]
    for op in NON_IDEMPOTENT:
        for failure in maybe_done:
            sent, err = _attempts(op, failure)
            assert sent == 1, (op, failure)
            assert isinstance(err, (tessera.Unavailable, tessera.ProtocolError)), (op, failure, err)
    nothing_done = [
        _unavailable("store_unavailable"),  # the broker failed closed before issuing
        _unavailable("backend_throttled", {"retry-after": "0"}),
        httpx.Response(429, json={"error": {"code": "rate_limited", "message": "m", "request_id": "r"}}, headers={"retry-after": "0"}),
        httpx.ConnectError,  # never reached the broker
        httpx.ConnectTimeout,
    ]
    for op in NON_IDEMPOTENT:
        for failure in nothing_done:
            assert _attempts(op, failure) == (2, None), (op, failure)


def test_an_idempotent_call_is_retried_on_timeouts_and_broken_connections_too() -> None:
    for op in IDEMPOTENT:
        for failure in [
            _unavailable("request_timeout"),
            _unavailable(None),
            _unavailable("store_unavailable"),
            httpx.ReadTimeout,
            httpx.RemoteProtocolError,
            httpx.ReadError,
            httpx.ConnectError,
        ]:
            assert _attempts(op, failure) == (2, None), (op, failure)
        # A decision never is.
        sent, err = _attempts(op, httpx.Response(404, json={"error": {"code": "not_found", "message": "m", "request_id": "r"}}))
        assert sent == 1 and isinstance(err, tessera.Rejected)


def test_backend_throttled_waits_for_retry_after(monkeypatch: pytest.MonkeyPatch) -> None:
    import tessera._core as core

    waits: list[float] = []
    monkeypatch.setattr(core.time, "sleep", waits.append)
    sent: list[int] = []

    def handler(req: httpx.Request) -> httpx.Response:
        sent.append(1)
        if len(sent) == 1:
            return _unavailable("backend_throttled", {"retry-after": "1"})
        return _success(req)

    cap = tessera.Capability._from(ISSUED, "read", "svc-reports:x")
    assert _tool_with(handler).exchange(cap).kind == "token"
    assert waits == [1.0] and len(sent) == 2


def test_the_gateway_proxy_shows_no_run_token() -> None:
    """Finding 3: httpx.Proxy's repr shows its headers; the SDK's does not."""

    def no_session(req: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"error": {"code": "not_found", "message": "m", "request_id": "r"}})

    t = _tool_with(no_session)
    proxy = t._proxy("127.0.0.1:8701")
    assert isinstance(proxy, httpx.Proxy) and proxy.headers["proxy-authorization"] == f"Bearer {TOKEN}"
    for text in (repr(proxy), str(proxy), f"{proxy!r}"):
        assert TOKEN not in text
    # An error inside httpx while the client is made: the proxy is in its frames' locals.
    with pytest.raises(AttributeError) as e:
        t.http_client(gateway="127.0.0.1:8701", limits="not limits")
    assert "httpx" in _traceback_text(e.value) and TOKEN not in _traceback_text(e.value)
    with t.http_client(gateway="127.0.0.1:8701") as client:
        assert TOKEN not in repr(vars(client))
    # What would route requests around the gateway is refused, by name.
    for kwargs in ({"proxy": "http://127.0.0.1:9"}, {"trust_env": True}, {"mounts": {}}, {"transport": None}):
        with pytest.raises(tessera.ConfigError, match="gateway"):
            t.http_client(gateway="127.0.0.1:8701", **kwargs)


def test_repr_of_a_half_built_object_does_not_raise() -> None:
    """Finding 6: a constructor that fails leaves ``self`` in its frame; its repr must work."""
    for cls in (tessera.Tool, tessera.AsyncTool, tessera.Runtime, tessera.AsyncRuntime, tessera.Run, tessera.AsyncRun):
        obj = cls.__new__(cls)
        assert "<redacted>" in repr(obj) and str(obj) == repr(obj)
    with pytest.raises(tessera.ConfigError) as e:
        tessera.Tool("192.0.2.10:8700", TOKEN, env={})
    selves = [f.f_locals["self"] for f, _ in traceback.walk_tb(e.value.__traceback__) if "self" in f.f_locals]
    assert selves and all("<redacted>" in repr(s) for s in selves)


def test_access_token_auth_stays_on_its_resource() -> None:
    """Finding 8: ``token.auth()`` sends the token to its resource only."""
    import datetime as dt

    sent: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        sent.append(str(req.url))
        assert req.headers["authorization"] == "Bearer at-secret"
        return httpx.Response(200)

    token = tessera.AccessToken(
        token=tessera.Secret("at-secret"),
        token_type="Bearer",
        expires_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(minutes=5),
        scope="notes:read",
        resource="http://127.0.0.1:8931/mcp",
    )
    with httpx.Client(auth=token.auth(), transport=httpx.MockTransport(handler)) as client:
        for ok in ["http://127.0.0.1:8931/mcp", "http://127.0.0.1:8931/mcp/", "http://127.0.0.1:8931/mcp/x?y=1", "HTTP://127.0.0.1:8931/mcp"]:
            assert client.get(ok).status_code == 200
        for off in [
            "http://evil.example/mcp",
            "http://127.0.0.1:8932/mcp",  # another port
            "https://127.0.0.1:8931/mcp",  # another scheme
            "http://localhost:8931/mcp",  # another host name
            "http://127.0.0.1:8931/mcpx",  # not under the path
            "http://127.0.0.1:8931/",
            "http://127.0.0.1:8931/other/mcp",
            "http://127.0.0.1:8931/mcp/%2e%2e/admin",  # a server may read it as /admin
        ]:
            with pytest.raises(tessera.ConfigError, match="refusing to send the access token"):
                client.get(off)
    assert len(sent) == 4
    # A resource at the root covers the origin; default ports are the same origin.
    root = tessera.AccessToken(tessera.Secret("at-secret"), "Bearer", token.expires_at, "s", "https://rs.example")
    with httpx.Client(auth=root.auth(), transport=httpx.MockTransport(handler)) as client:
        assert client.get("https://rs.example:443/any/path").status_code == 200
        with pytest.raises(tessera.ConfigError):
            client.get("https://rs.example.evil/any")


def test_a_proxy_must_not_see_the_token_in_clear(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Finding 9: with TESSERA_USE_PROXY=1 the proxy hop follows the broker's rule."""
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    on = {"TESSERA_USE_PROXY": "1"}
    monkeypatch.setenv("HTTP_PROXY", "http://192.0.2.7:3128")
    for make in (
        lambda: tessera.Tool(ADDR, TOKEN, env=on),
        lambda: tessera.Tool(ADDR, TOKEN, env={}, use_proxy=True),
        lambda: tessera.Runtime(ADDR, RT_KEY, env=on),
    ):
        with pytest.raises(tessera.ConfigError, match="proxy"):
            make()
    # Without TESSERA_USE_PROXY the proxy is not used at all.
    t = tessera.Tool(ADDR, TOKEN, env={})
    assert t._transport.proxy is None
    t.close()
    # A proxy on this machine, or one reached over TLS, is fine.
    for proxy in ("http://127.0.0.1:3128", "http://localhost:3128", "https://proxy.example:3129"):
        monkeypatch.setenv("HTTP_PROXY", proxy)
        t = tessera.Tool(ADDR, TOKEN, env=on)
        assert t._transport.proxy == proxy
        t.close()
    # TESSERA_INSECURE_HTTP=1 accepts it, with a warning.
    monkeypatch.setenv("HTTP_PROXY", "http://192.0.2.7:3128")
    with caplog.at_level("WARNING", logger="tessera"):
        t = tessera.Tool(ADDR, TOKEN, env={"TESSERA_USE_PROXY": "1", "TESSERA_INSECURE_HTTP": "1"})
    assert t._transport.proxy == "http://192.0.2.7:3128" and "proxy" in caplog.text
    t.close()
    # An https:// broker: the proxy carries a TLS tunnel (CONNECT), the token is not in clear.
    monkeypatch.setenv("HTTPS_PROXY", "http://192.0.2.7:3128")
    t = tessera.Tool("https://broker.example", TOKEN, env=on)
    assert t._transport.proxy == "http://192.0.2.7:3128"
    t.close()


@pytest.mark.asyncio
async def test_an_end_that_hangs_under_cancellation_is_bounded_logged_and_noted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Finding 1: the end is shielded from the cancellation, but not forever."""
    import asyncio

    import anyio

    ends: list[str] = []

    async def handler(req: httpx.Request) -> httpx.Response:
        if req.url.path == "/v1/runs":
            return httpx.Response(201, json=RUN_BODY)
        ends.append(req.url.path)
        await asyncio.sleep(3600)  # the broker never answers the end
        raise AssertionError("unreachable")

    rt = tessera.AsyncRuntime(ADDR, RT_KEY, env={}, timeout=0.3, connect_timeout=0.2)
    rt._driver.client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    # anyio: the scope's cancellation reaches every await in it, the end's too unless shielded.
    with caplog.at_level("ERROR", logger="tessera"):
        with anyio.fail_after(10):  # without the bound the end would hang the test
            with anyio.move_on_after(0.05) as scope:
                async with rt.run(user="alice", task={"id": "t", "kind": "summarize"}):
                    await anyio.sleep(30)
    assert scope.cancelled_caught and ends == [f"/v1/runs/{RUN_ID}/end"]
    assert f"ending run {RUN_ID} failed" in caplog.text
    # asyncio: the cancellation goes on after the bounded end, with a note saying so.
    seen: list[BaseException] = []

    async def body() -> None:
        try:
            async with rt.run(user="alice", task={"id": "t", "kind": "summarize"}):
                await asyncio.sleep(30)
        except asyncio.CancelledError as c:
            seen.append(c)
            raise

    task = asyncio.create_task(body())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)
    assert task.cancelled() and len(ends) == 2
    assert any(f"ending run {RUN_ID} failed" in n for n in seen[0].__notes__)
    await rt.aclose()


def test_the_strict_plugin_fails_on_any_skip(tmp_path: Path) -> None:
    """tessera_strict: a skip anywhere, collection included, fails the session."""
    import subprocess
    import sys

    plugins = Path(__file__).parent / "plugins"
    (tmp_path / "test_fine.py").write_text("def test_fine():\n    pass\n")
    cases = {
        "module_skip": "import pytest\npytest.skip('no service', allow_module_level=True)\n",
        "importorskip": "import pytest\npytest.importorskip('no_such_module_for_tessera')\n",
        "test_skip": "import pytest\ndef test_x():\n    pytest.skip('no service')\n",
        "xfail": "import pytest\n@pytest.mark.xfail\ndef test_x():\n    assert False\n",
        "passes": "def test_x():\n    pass\n",
    }
    for name, source in cases.items():
        d = tmp_path / name
        d.mkdir()
        (d / "test_fine.py").write_text("def test_fine():\n    pass\n")
        (d / f"test_{name}.py").write_text(source)
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "tessera_strict", "-p", "no:cacheprovider", "--rootdir", str(d), str(d)],
            env={**os.environ, "PYTHONPATH": f"{plugins}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
            capture_output=True,
            text=True,
            timeout=120,
            cwd=d,
            check=False,
        )
        if name == "passes":
            assert out.returncode == 0, out.stdout + out.stderr
        else:
            assert out.returncode == 1, (name, out.stdout + out.stderr)
            assert "tessera_strict" in out.stdout, (name, out.stdout)
