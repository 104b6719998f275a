"""OAuth 2.0 token exchange (RFC 8693) with DPoP (RFC 9449) against a real broker."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
from typing import Any

import httpx
import jwt
import pytest

import tessera
from conftest import NOTES, NOTES_PORT, NOTES_SECRET, TASK
from support import Broker, Recorder


def _introspect(broker: Broker, token: tessera.AccessToken, secret: str = NOTES_SECRET) -> httpx.Response:
    return httpx.post(
        f"{broker.addr}/oauth/introspect",
        data={"token": token.token.reveal(), "token_type_hint": "access_token"},
        auth=("notes", secret),
        trust_env=False,
    )


def test_metadata_is_rfc8414(oauth_broker: Broker, oauth_runtime: tessera.Runtime) -> None:
    with oauth_runtime.run(user="alice", task=TASK) as run:
        meta = run.tool().oauth_metadata()
    issuer = oauth_broker.addr
    assert meta["issuer"] == issuer
    assert meta["token_endpoint"] == issuer + "/oauth/token"
    assert meta["jwks_uri"] == issuer + "/.well-known/jwks.json"
    assert meta["introspection_endpoint"] == issuer + "/oauth/introspect"
    assert meta["grant_types_supported"] == ["urn:ietf:params:oauth:grant-type:token-exchange"]
    assert "ES256" in meta["dpop_signing_alg_values_supported"]
    assert {"notes:read", "notes:write"} <= set(meta["scopes_supported"])


def test_a_dpop_bound_access_token(oauth_broker: Broker, oauth_runtime: tessera.Runtime) -> None:
    with oauth_runtime.run(user="alice", task=TASK) as run:
        tool = run.tool()
        token = tool.access_token(NOTES, "notes:read")
        assert token.token_type == "DPoP" and token.bound and token.scope == "notes:read"
        assert token.issued_token_type == "urn:ietf:params:oauth:token-type:access_token"
        now = dt.datetime.now(dt.timezone.utc)
        assert now < token.expires_at <= now + dt.timedelta(minutes=15, seconds=5)
        header = jwt.get_unverified_header(token.token.reveal())
        assert header["typ"] == "at+jwt" and header["alg"] == "EdDSA" and header["kid"]
        # Verified with the broker's JWKS.
        jwks = httpx.get(f"{oauth_broker.addr}/.well-known/jwks.json", trust_env=False).json()
        key = next(k for k in jwks["keys"] if k["kid"] == header["kid"])
        claims = jwt.decode(
            token.token.reveal(), jwt.PyJWK(key).key, algorithms=["EdDSA"], audience=NOTES, issuer=oauth_broker.addr
        )
        assert claims["cnf"] == {"jkt": tool.dpop_key.thumbprint}
        assert claims["sub"] == "alice" and claims["scope"] == "notes:read"
        assert claims["act"] == {"sub": f"run:{run.run_id}"} and claims["run"] == run.run_id
        assert claims["client_id"].startswith("tessera-runtime:")
        # The resource server's view.
        info = _introspect(oauth_broker, token).json()
        assert info["active"] is True and info["token_type"] == "DPoP" and info["aud"] == NOTES
        assert info["cnf"] == {"jkt": tool.dpop_key.thumbprint}
        bad = _introspect(oauth_broker, token, "wrong")
        assert bad.status_code == 401 and bad.json()["error"] == "invalid_client"
        assert "basic" in bad.headers.get("www-authenticate", "").lower()
        # No secret in any repr.
        for text in (repr(token), str(token), repr(token.auth())):
            assert token.token.reveal() not in text and run.token.reveal() not in text
    # It dies with the run.
    assert _introspect(oauth_broker, token).json() == {"active": False}


def test_a_bearer_access_token(oauth_runtime: tessera.Runtime) -> None:
    with oauth_runtime.run(user="alice", task=TASK) as run:
        token = run.tool().access_token(NOTES, "notes:read", dpop=False)
        assert token.token_type == "Bearer" and not token.bound and "cnf" not in token.claims()
        assert token.headers("GET", NOTES) == {"Authorization": f"Bearer {token.token.reveal()}"}


def test_headers_carry_a_fresh_proof_with_ath(oauth_runtime: tessera.Runtime) -> None:
    with oauth_runtime.run(user="alice", task=TASK) as run:
        tool = run.tool()
        token = tool.access_token(NOTES, "notes:read")
        h = token.headers("post", NOTES + "?cursor=2")
        assert h["Authorization"] == f"DPoP {token.token.reveal()}"
        header = jwt.get_unverified_header(h["DPoP"])
        assert header["jwk"] == tool.dpop_key.public_jwk
        claims = jwt.decode(h["DPoP"], jwt.PyJWK(header["jwk"], "ES256").key, algorithms=["ES256"])
        digest = hashlib.sha256(token.token.reveal().encode()).digest()
        assert claims["ath"] == base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        assert claims["htm"] == "POST" and claims["htu"] == NOTES
        assert token.headers("GET", NOTES)["DPoP"] != token.headers("GET", NOTES)["DPoP"]


def test_oauth_errors_map_to_the_sdk_classes(oauth_runtime: tessera.Runtime) -> None:
    with oauth_runtime.run(user="alice", task=TASK) as run:
        tool = run.tool()
        with pytest.raises(tessera.Denied) as denied:
            tool.access_token(NOTES, "notes:write")  # no permit
        assert denied.value.code == "capability_denied" and denied.value.oauth_error == "invalid_scope"
        assert denied.value.status == 400 and denied.value.request_id
        with pytest.raises(tessera.Rejected) as target:
            tool.access_token("http://127.0.0.1:1/not-registered", "notes:read")
        assert target.value.oauth_error == "invalid_target" and target.value.code == "invalid_resource"
        assert target.value.status == 400 and target.value.request_id
        with pytest.raises(tessera.Rejected) as scope:
            tool.access_token(NOTES, "notes:read notes:write")  # one scope per token
        assert scope.value.oauth_error == "invalid_scope" and scope.value.status == 400
    with pytest.raises(tessera.Expired) as ended:
        with tessera.Tool(oauth_runtime.address, run.token, env={}) as after:
            after.access_token(NOTES, "notes:read")
    assert ended.value.code == "run_ended" and ended.value.oauth_error == "invalid_grant"
    assert ended.value.status == 400 and ended.value.request_id
    with tessera.Tool(oauth_runtime.address, "tsr_run_" + "A" * 43, env={}) as stranger:
        with pytest.raises(tessera.Unauthenticated) as unknown:
            stranger.access_token(NOTES, "notes:read")
    assert unknown.value.code == "unauthenticated" and unknown.value.oauth_error == "invalid_grant"


def test_nonce_broker_token_endpoint(nonce_broker: Broker, nonce_runtime: tessera.Runtime) -> None:
    with nonce_runtime.run(user="alice", task=TASK) as run:
        tool = run.tool()
        # Without the nonce: 400 use_dpop_nonce with the DPoP-Nonce header.
        r = httpx.post(
            f"{nonce_broker.addr}/oauth/token",
            data={
                "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                "subject_token": run.token.reveal(),
                "subject_token_type": "urn:tessera:params:oauth:token-type:run_token",
                "resource": NOTES,
                "scope": "notes:read",
            },
            headers={"DPoP": tessera.DPoPKey().proof("POST", f"{nonce_broker.addr}/oauth/token")},
            trust_env=False,
        )
        assert r.status_code == 400 and r.json()["error"] == "use_dpop_nonce" and r.headers.get("dpop-nonce")
        token = tool.access_token(NOTES, "notes:read")
        assert token.claims()["cnf"]["jkt"] == tool.dpop_key.thumbprint


def test_the_httpx_auth_answers_a_resource_servers_nonce(oauth_runtime: tessera.Runtime) -> None:
    with oauth_runtime.run(user="alice", task=TASK) as run:
        token = run.tool().access_token(NOTES, "notes:read")
        expected_ath = base64.urlsafe_b64encode(hashlib.sha256(token.token.reveal().encode()).digest()).rstrip(b"=")

        def respond(handler: Any) -> tuple[int, dict[str, str], bytes]:
            proof = handler.headers.get("DPoP")
            header = jwt.get_unverified_header(proof)
            claims = jwt.decode(proof, jwt.PyJWK(header["jwk"], "ES256").key, algorithms=["ES256"])
            ok = (
                handler.headers.get("Authorization") == f"DPoP {token.token.reveal()}"
                and claims["ath"] == expected_ath.decode()
                and claims["htu"] == f"{server.url}/mcp"
            )
            if not ok:
                return 400, {}, b"bad proof"
            if claims.get("nonce") != "rs-nonce-1":
                return 401, {"WWW-Authenticate": 'DPoP error="use_dpop_nonce"', "DPoP-Nonce": "rs-nonce-1"}, b""
            return 200, {"content-type": "application/json"}, b'{"ok": true}'

        server = Recorder(respond, port=NOTES_PORT)  # the token's resource: NOTES
        try:
            assert f"{server.url}/mcp" == NOTES
            with httpx.Client(auth=token.auth(), trust_env=False) as client:
                r = client.get(f"{server.url}/mcp?x=1")
                assert r.status_code == 200 and r.json() == {"ok": True}
                # The nonce is remembered: the next request needs no retry.
                before = len(server.requests)
                assert client.get(f"{server.url}/mcp").status_code == 200
                assert len(server.requests) == before + 1
                # Off the resource's path the token is not sent at all.
                with pytest.raises(tessera.ConfigError, match="refusing to send the access token"):
                    client.get(f"{server.url}/admin")
        finally:
            server.close()
        assert len(server.requests) == 3
