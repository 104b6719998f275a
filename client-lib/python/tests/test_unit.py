"""The SDK's own rules, without a broker: configuration, redaction, DPoP proofs,
error mapping, retries (over httpx's MockTransport, on a loopback address)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
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
    assert any("ending run" in n for n in getattr(e.value, "__notes__", ["ending run"]))
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
