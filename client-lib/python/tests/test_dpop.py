"""DPoP-bound capabilities (RFC 9449 on the Tessera API) against a real broker."""

from __future__ import annotations

import httpx
import jwt
import pytest

import tessera
from conftest import TASK
from support import Broker

REPORT = "svc-reports:reports/2026/q1.csv"


def _raw_exchange(broker: Broker, cap: tessera.Capability, proof: str | None) -> httpx.Response:
    headers = {"DPoP": proof} if proof else {}
    return httpx.post(
        f"{broker.addr}/v1/exchange", json={"capability": cap.token.reveal()}, headers=headers, trust_env=False
    )


def test_a_bound_capability_is_exchanged_with_a_proof_only(
    oauth_broker: Broker, oauth_runtime: tessera.Runtime
) -> None:
    with oauth_runtime.run(user="alice", task=TASK) as run:
        tool = run.tool(dpop=True)
        cap = tool.capability("read", REPORT)
        assert cap.bound and cap.jkt == tool.dpop_key.thumbprint
        assert cap.claims()["cnf"] == {"jkt": tool.dpop_key.thumbprint}

        # Without a proof: refused, and the capability is not used up by it.
        r = _raw_exchange(oauth_broker, cap, None)
        assert r.status_code == 401, r.text
        assert r.json()["error"]["code"] == "invalid_dpop_proof" and r.headers.get("x-request-id")
        # A proof of another key, with the right ath: refused.
        other = tessera.DPoPKey()
        url = f"{oauth_broker.addr}/v1/exchange"
        r = _raw_exchange(oauth_broker, cap, other.proof("POST", url, access_token=cap.token))
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_dpop_proof", r.text
        # The right key without ath: refused.
        r = _raw_exchange(oauth_broker, cap, tool.dpop_key.proof("POST", url))
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_dpop_proof", r.text
        # A tool without the key refuses before sending anything.
        with tessera.Tool(oauth_broker.addr, run.token, env={}) as plain:
            with pytest.raises(tessera.ConfigError, match="bound"):
                plain.exchange(cap)
        # The SDK sends the proof (htu = issuer + /v1/exchange, ath of the capability).
        cred = tool.exchange(cap)
        assert cred.kind == "token"


def test_a_proof_is_accepted_once(oauth_broker: Broker, oauth_runtime: tessera.Runtime) -> None:
    with oauth_runtime.run(user="alice", task=TASK) as run:
        tool = run.tool(dpop=True)
        cap = tool.capability("read", REPORT)
        proof = tool.dpop_key.proof("POST", f"{oauth_broker.addr}/v1/exchange", access_token=cap.token)
        assert _raw_exchange(oauth_broker, cap, proof).status_code == 200
        again = _raw_exchange(oauth_broker, cap, proof)
        assert again.status_code == 401 and again.json()["error"]["code"] == "invalid_dpop_proof", again.text


def test_introspection_of_a_bound_capability_needs_the_proof(oauth_runtime: tessera.Runtime) -> None:
    with oauth_runtime.run(user="alice", task=TASK) as run:
        tool = run.tool(dpop=True)
        cap = tool.capability("read", REPORT)
        assert oauth_runtime.introspect(cap) == {"active": False}
        info = oauth_runtime.introspect(cap, dpop_key=tool.dpop_key)
        assert info["active"] is True and info["cnf"]["jkt"] == tool.dpop_key.thumbprint
        assert oauth_runtime.introspect(cap, dpop_key=tessera.DPoPKey()) == {"active": False}


def test_an_unbound_tool_gets_unbound_capabilities(oauth_runtime: tessera.Runtime) -> None:
    with oauth_runtime.run(user="alice", task=TASK) as run:
        cap = run.tool().capability("read", REPORT)
        assert not cap.bound and "cnf" not in cap.claims()
        assert run.tool().exchange(cap).kind == "token"


def test_server_nonces_are_fetched_and_used(nonce_broker: Broker, nonce_runtime: tessera.Runtime) -> None:
    with nonce_runtime.run(user="alice", task=TASK) as run:
        # A proof without a nonce, asking for a bound capability: use_dpop_nonce with the
        # nonce; 400, as at a token endpoint (RFC 9449 §5: nothing bound is presented).
        key = tessera.DPoPKey()
        r = httpx.post(
            f"{nonce_broker.addr}/v1/capabilities",
            json={"action": "read", "resource": REPORT},
            headers={
                "Authorization": f"Bearer {run.token.reveal()}",
                "DPoP": key.proof("POST", f"{nonce_broker.addr}/v1/capabilities"),
            },
            trust_env=False,
        )
        assert r.status_code == 400 and r.json()["error"]["code"] == "use_dpop_nonce", r.text
        assert r.headers.get("dpop-nonce")
        # The SDK retries once with the nonce, and keeps the newest one.
        tool = run.tool(dpop=True)
        cap = tool.capability("read", REPORT)
        assert cap.bound
        assert tool.dpop_key.nonce_for(nonce_broker.addr) is not None
        # Presenting the bound capability without a nonce: 401 with the DPoP challenge (§7.1).
        url = f"{nonce_broker.addr}/v1/exchange"
        r = _raw_exchange(nonce_broker, cap, tool.dpop_key.proof("POST", url, access_token=cap.token, use_remembered_nonce=False))
        assert r.status_code == 401 and r.json()["error"]["code"] == "use_dpop_nonce", r.text
        assert r.headers.get("dpop-nonce") and 'error="use_dpop_nonce"' in r.headers.get("www-authenticate", "")
        assert tool.exchange(cap).kind == "token"
        claims = jwt.decode(
            tool.dpop_key.proof("GET", nonce_broker.addr + "/x"), options={"verify_signature": False}
        )
        assert claims["nonce"] == tool.dpop_key.nonce_for(nonce_broker.addr)
