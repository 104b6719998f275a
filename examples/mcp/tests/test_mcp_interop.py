"""The MCP interop example end to end: a real Tessera dev broker, the example's MCP server
(examples/mcp/server.py, which knows nothing of Tessera) and its agent (agent.py).

Needs TESSERA_BIN (the broker binary); run by `scripts/python.sh run TESSERA_BIN`.
Everything listens on 127.0.0.1 only. Nothing here skips: a missing binary fails.
"""

from __future__ import annotations

import ast
import asyncio
import base64
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
import jwt
import pytest
import tessera

EXAMPLE = Path(__file__).resolve().parents[1]
ROOT = EXAMPLE.parents[1]
POLICY = ROOT / "policy"

# The test's own backends, beside the example's `notes`: another resource (tokens for it
# must not open the notes server) and a notes server whose tokens live two seconds.
TEST_POLICY = """
@id("test-other-read")
permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"notes:read", resource)
when { resource.kind == "oauth-resource" && resource.backend == "other" };

@id("test-short-read")
permit (principal in Tessera::Group::"analysts", action == Tessera::Action::"notes:read", resource)
when { resource.kind == "oauth-resource" && resource.backend == "notes-short" };
"""

TEST_BACKENDS = """
[backends.other]
kind = "oauth-resource"
resource = "{other}"
scopes = ["notes:read"]
introspection_secret_env = "OTHER_INTROSPECTION_SECRET"

[backends.notes-short]
kind = "oauth-resource"
resource = "{short}"
scopes = ["notes:read"]
max_ttl = "2s"
introspection_secret_env = "SHORT_INTROSPECTION_SECRET"
"""

# Tessera wants introspection secrets of at least 32 characters.
SECRETS = {
    "NOTES_INTROSPECTION_SECRET": "notes-" + uuid.uuid4().hex,
    "OTHER_INTROSPECTION_SECRET": "other-" + uuid.uuid4().hex,
    "SHORT_INTROSPECTION_SECRET": "short-" + uuid.uuid4().hex,
}

MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}


def load_agent() -> Any:
    spec = importlib.util.spec_from_file_location("tessera_mcp_example_agent", EXAMPLE / "agent.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


agent = load_agent()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(what: str, check, timeout: float, log: Path | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(0.1)
    tail = log.read_text(errors="replace")[-4000:] if log and log.exists() else ""
    pytest.fail(f"{what} did not come up in {timeout}s\n{tail}")


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass
class Broker:
    addr: str
    dir: Path
    runtime_key: str
    notes_url: str
    short_url: str
    other_url: str

    def run(self, user: str) -> tuple[str, str]:
        """A new run for `user`: its id and the path of its run token file (mode 600)."""
        response = httpx.post(
            f"{self.addr}/v1/runs",
            headers={"Authorization": f"Bearer {self.runtime_key}"},
            json={"user": user, "task": {"id": f"t-{uuid.uuid4().hex[:8]}", "kind": "summarize"}, "ttl": "15m"},
        )
        assert response.status_code == 201, response.text
        body = response.json()
        path = self.dir / f"run-{body['run_id']}.token"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(body["run_token"])
        return body["run_id"], str(path)

    def end(self, run_id: str) -> None:
        response = httpx.post(
            f"{self.addr}/v1/runs/{run_id}/end", headers={"Authorization": f"Bearer {self.runtime_key}"}
        )
        assert response.status_code == 200, response.text

    def tool(self, run_token_file: str) -> tessera.Tool:
        """The SDK's client of a run, as the agent's tool holds it."""
        return tessera.Tool(addr=self.addr, env={"TESSERA_RUN_TOKEN_FILE": run_token_file})

    def access_token(self, resource: str, scope: str, run_token_file: str) -> str:
        """The agent's token request (metadata checks, then the SDK's token exchange)."""
        with self.tool(run_token_file) as tool:
            return agent.get_access_token(resource, scope, tool=tool)

    def token(self, resource: str, scope: str, run_token_file: str) -> httpx.Response:
        """The token exchange on the wire, as the spec writes it."""
        return httpx.post(
            f"{self.addr}/oauth/token",
            data={
                "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                "subject_token": Path(run_token_file).read_text().strip(),
                "subject_token_type": "urn:tessera:params:oauth:token-type:run_token",
                "resource": resource,
                "scope": scope,
                "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
            },
        )


@dataclass
class NotesServer:
    url: str
    log: Path
    process: subprocess.Popen

    def log_since(self, offset: int) -> str:
        return self.log.read_text(errors="replace")[offset:]

    def log_size(self) -> int:
        return len(self.log.read_text(errors="replace"))


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    binary = os.environ.get("TESSERA_BIN")
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail("TESSERA_BIN must name the tessera broker binary (scripts/python.sh run TESSERA_BIN)")
    tmp = Path(tempfile.mkdtemp(prefix="tessera-mcp-"))
    try:
        policy = tmp / "policy"
        policy.mkdir()
        for f in ("schema.cedarschema", "entities.json"):
            shutil.copy(POLICY / f, policy / f)
        shutil.copy(EXAMPLE / "notes.cedar", policy / "notes.cedar")
        (policy / "test.cedar").write_text(TEST_POLICY)

        listen = f"127.0.0.1:{free_port()}"
        addr = f"http://{listen}"
        notes_url = f"http://127.0.0.1:{free_port()}/mcp"
        short_url = f"http://127.0.0.1:{free_port()}/mcp"
        other_url = f"http://127.0.0.1:{free_port()}/mcp"
        config = (EXAMPLE / "tessera.toml").read_text()
        assert 'issuer = "http://127.0.0.1:8700"' in config and "http://127.0.0.1:8931/mcp" in config
        config = config.replace("http://127.0.0.1:8700", addr).replace("http://127.0.0.1:8931/mcp", notes_url)
        config += TEST_BACKENDS.format(other=other_url, short=short_url)
        (tmp / "tessera.toml").write_text(config)

        env = {**os.environ, **SECRETS, "TESSERA_ADMIN_TOKEN_FILE": str(tmp / "admin.token")}
        env.pop("TESSERA_ADDR", None)
        log = tmp / "broker.log"
        with open(log, "ab") as out:
            process = subprocess.Popen(
                [binary, "serve", "--dev", "--listen", listen, "--data-dir", str(tmp)]
                + ["--policy-dir", str(policy), "--config", str(tmp / "tessera.toml")],
                cwd=tmp,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=out,
            )
        try:
            wait_until(
                "tessera serve --dev",
                lambda: process.poll() is None and httpx.get(f"{addr}/readyz").status_code == 200,
                60,
                log,
            )
            out = subprocess.run(
                [binary, "runtimes", "create", f"mcp-{uuid.uuid4().hex[:8]}", "--users", "*"]
                + ["--task-kinds", "summarize", "--json"],
                env={**env, "TESSERA_ADDR": addr},
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0, out.stderr
            yield Broker(addr, tmp, json.loads(out.stdout)["key"], notes_url, short_url, other_url)
        finally:
            stop(process)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def start_server(broker: Broker, url: str, client_id: str, secret_env: str) -> Iterator[NotesServer]:
    yield from start_server_at(broker.addr, broker.dir, url, client_id, secret_env, SECRETS[secret_env])


def start_server_at(
    issuer: str, logdir: Path, url: str, client_id: str, secret_env: str, secret: str
) -> Iterator[NotesServer]:
    """examples/mcp/server.py on `url`, trusting the authorization server `issuer`."""
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    log = logdir / f"server-{port}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")}
    env[secret_env] = secret
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, str(EXAMPLE / "server.py"), "--port", str(port), "--issuer", issuer]
            + ["--client-id", client_id, "--client-secret-env", secret_env],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    server = NotesServer(url, log, process)
    try:
        metadata = agent.well_known_url(url, "oauth-protected-resource")
        wait_until(
            f"server.py on {url}",
            lambda: process.poll() is None and httpx.get(metadata).status_code == 200,
            30,
            log,
        )
        yield server
    finally:
        stop(process)


@pytest.fixture(scope="module")
def notes(broker: Broker) -> Iterator[NotesServer]:
    yield from start_server(broker, broker.notes_url, "notes", "NOTES_INTROSPECTION_SECRET")


@pytest.fixture(scope="module")
def short(broker: Broker) -> Iterator[NotesServer]:
    yield from start_server(broker, broker.short_url, "notes-short", "SHORT_INTROSPECTION_SECRET")


def call(url: str, token: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    """The tool call through the official MCP client (the agent's function)."""
    return asyncio.run(agent.call_tool(url, token, tool, arguments or {}))


def result_data(result: Any) -> Any:
    assert not result.is_error, result
    return result.structured_content


def refusal(url: str, token: str, tool: str, arguments: dict[str, Any] | None = None) -> Any:
    with pytest.raises(agent.Refused) as refused:
        call(url, token, tool, arguments)
    return refused.value


def claims_unverified(token: str) -> dict[str, Any]:
    return jwt.decode(token, options={"verify_signature": False})


# (a) ---------------------------------------------------------------------------------

def test_the_agent_gets_a_token_and_calls_a_tool(broker: Broker, notes: NotesServer) -> None:
    _, alice = broker.run("alice")
    token = broker.access_token(notes.url, "notes:read", alice)
    claims = claims_unverified(token)
    assert claims["aud"] == notes.url and claims["iss"] == broker.addr
    assert claims["sub"] == "alice" and claims["scope"] == "notes:read"
    assert jwt.get_unverified_header(token)["typ"] == "at+jwt"
    before = result_data(call(notes.url, token, "list_notes"))["result"]

    # Release managers may write; what dana writes, alice's token reads.
    _, dana = broker.run("dana")
    write = broker.access_token(notes.url, "notes:write", dana)
    added = result_data(call(notes.url, write, "add_note", {"text": "ship it"}))
    assert added == {"author": "dana", "text": "ship it"}
    assert result_data(call(notes.url, token, "list_notes")) == {"result": [*before, added]}

    # As documented: the script, with the run token in a file and nothing else.
    out = subprocess.run(
        [sys.executable, str(EXAMPLE / "agent.py"), "--url", notes.url, "list_notes"],
        env={**os.environ, "TESSERA_ADDR": broker.addr, "TESSERA_RUN_TOKEN_FILE": alice},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["structuredContent"] == {"result": [*before, added]}


def test_the_token_response_is_as_specified(broker: Broker, notes: NotesServer) -> None:
    run_id, alice = broker.run("alice")
    response = broker.token(notes.url, "notes:read", alice)
    assert response.status_code == 200, response.text
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["issued_token_type"] == "urn:ietf:params:oauth:token-type:access_token"
    assert body["token_type"] == "Bearer" and body["scope"] == "notes:read", body
    assert 0 < body["expires_in"] <= 15 * 60, body
    header = jwt.get_unverified_header(body["access_token"])
    assert header["alg"] == "EdDSA" and header["typ"] == "at+jwt" and header["kid"], header
    claims = claims_unverified(body["access_token"])
    assert claims["act"] == {"sub": f"run:{run_id}"} and claims["run"] == run_id, claims
    assert claims["client_id"].startswith("tessera-runtime:") and "cnf" not in claims, claims
    assert claims["nbf"] <= claims["iat"] + 1 and claims["exp"] - claims["iat"] == body["expires_in"], claims


def test_policy_decides_the_token_request(broker: Broker, notes: NotesServer) -> None:
    _, alice = broker.run("alice")
    with pytest.raises(tessera.Denied) as denied:
        broker.access_token(notes.url, "notes:write", alice)
    assert denied.value.status == 400 and denied.value.code == "capability_denied", denied.value
    response = broker.token(notes.url, "notes:write", alice)
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["error"] == "invalid_scope" and body["code"] == "capability_denied", body
    assert body["request_id"] and body["error_description"], body

    _, carol = broker.run("carol")  # in no group
    with pytest.raises(tessera.Denied):
        broker.access_token(notes.url, "notes:read", carol)
    # A URL that is no registered resource: invalid_target.
    response = broker.token(notes.url + "/", "notes:read", alice)
    assert response.status_code == 400 and response.json()["error"] == "invalid_target", response.text


# (b) ---------------------------------------------------------------------------------

def test_the_servers_metadata_points_at_tessera(broker: Broker, notes: NotesServer) -> None:
    prm = httpx.get(agent.well_known_url(notes.url, "oauth-protected-resource")).json()
    assert prm["resource"] == notes.url
    assert prm["authorization_servers"] == [broker.addr]
    assert prm["scopes_supported"] == ["notes:read", "notes:write"]

    response = httpx.get(f"{broker.addr}/.well-known/oauth-authorization-server")
    assert response.status_code == 200, response.text
    asm = response.json()
    assert asm["issuer"] == broker.addr
    assert asm["token_endpoint"] == f"{broker.addr}/oauth/token"
    assert asm["jwks_uri"] == f"{broker.addr}/.well-known/jwks.json"
    assert asm["introspection_endpoint"] == f"{broker.addr}/oauth/introspect"
    assert "urn:ietf:params:oauth:grant-type:token-exchange" in asm["grant_types_supported"]
    assert {"notes:read", "notes:write"} <= set(asm["scopes_supported"])

    # What the server discovered (and checks tokens with) is Tessera's metadata.
    line = next(
        line for line in notes.log.read_text().splitlines() if line.startswith("authorization server: ")
    )
    used = json.loads(line.removeprefix("authorization server: "))
    assert used == {
        "issuer": asm["issuer"],
        "jwks_uri": asm["jwks_uri"],
        "introspection_endpoint": asm["introspection_endpoint"],
    }
    jwks = httpx.get(asm["jwks_uri"]).json()
    assert any(k.get("kty") == "OKP" and k.get("crv") == "Ed25519" for k in jwks["keys"]), jwks


# (c) ---------------------------------------------------------------------------------

def test_a_token_for_another_resource_is_refused(broker: Broker, notes: NotesServer) -> None:
    _, alice = broker.run("alice")
    response = broker.token(broker.other_url, "notes:read", alice)
    assert response.status_code == 200, response.text
    other = response.json()["access_token"]
    assert claims_unverified(other)["aud"] == broker.other_url
    offset = notes.log_size()
    refused = refusal(notes.url, other, "list_notes")
    assert refused.status == 401 and 'error="invalid_token"' in refused.challenge
    assert "Audience doesn't match" in notes.log_since(offset)

    # Nor does Tessera tell the notes server anything about another resource's token.
    response = httpx.post(
        f"{broker.addr}/oauth/introspect",
        data={"token": other},
        auth=("notes", SECRETS["NOTES_INTROSPECTION_SECRET"]),
    )
    assert response.status_code == 200 and response.json() == {"active": False}, response.text


def test_a_dpop_bound_token_is_not_taken_as_a_bearer_token(broker: Broker, notes: NotesServer) -> None:
    _, alice = broker.run("alice")
    with broker.tool(alice) as tool:
        bound = tool.access_token(notes.url, "notes:read", dpop=True)
    assert bound.token_type == "DPoP"
    token = bound.token.reveal()
    assert claims_unverified(token)["cnf"]["jkt"] == bound.dpop_key.thumbprint
    offset = notes.log_size()
    refused = refusal(notes.url, token, "list_notes")
    assert refused.status == 401
    assert "DPoP-bound" in notes.log_since(offset)


# (d) ---------------------------------------------------------------------------------

def test_an_expired_token_is_refused(broker: Broker, short: NotesServer) -> None:
    _, alice = broker.run("alice")
    response = broker.token(short.url, "notes:read", alice)
    assert response.status_code == 200, response.text
    issued = response.json()
    assert issued["expires_in"] <= 2, issued
    token = issued["access_token"]
    assert result_data(call(short.url, token, "list_notes")) == {"result": []}
    exp = claims_unverified(token)["exp"]
    time.sleep(max(0.0, exp - time.time()) + 1.1)
    offset = short.log_size()
    refused = refusal(short.url, token, "list_notes")
    assert refused.status == 401
    assert "Signature has expired" in short.log_since(offset)


# (e) ---------------------------------------------------------------------------------

def test_a_token_from_an_ended_run_is_refused_at_once(broker: Broker, notes: NotesServer) -> None:
    run_id, alice = broker.run("alice")
    token = broker.access_token(notes.url, "notes:read", alice)
    assert result_data(call(notes.url, token, "list_notes")) is not None
    basic = ("notes", SECRETS["NOTES_INTROSPECTION_SECRET"])
    active = httpx.post(f"{broker.addr}/oauth/introspect", data={"token": token}, auth=basic).json()
    assert active["active"] is True and active["aud"] == notes.url and active["scope"] == "notes:read", active
    assert active["sub"] == "alice" and active["run"] == run_id, active

    broker.end(run_id)
    # The JWT alone would still pass: signature, audience and exp are all good.
    key = jwt.PyJWKClient(f"{broker.addr}/.well-known/jwks.json").get_signing_key_from_jwt(token)
    claims = jwt.decode(token, key.key, algorithms=["EdDSA"], audience=notes.url, issuer=broker.addr)
    assert claims["exp"] > time.time() + 60
    offset = notes.log_size()
    refused = refusal(notes.url, token, "list_notes")
    assert refused.status == 401
    assert "inactive at introspection" in notes.log_since(offset)
    inactive = httpx.post(f"{broker.addr}/oauth/introspect", data={"token": token}, auth=basic)
    assert inactive.status_code == 200 and inactive.json() == {"active": False}, inactive.text

    # The introspection endpoint wants the resource server's credential.
    wrong = httpx.post(f"{broker.addr}/oauth/introspect", data={"token": token}, auth=("notes", "wrong"))
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client", wrong.text
    assert wrong.headers["www-authenticate"].lower().startswith("basic")
    # And a new token for the ended run is refused at Tessera.
    with pytest.raises(tessera.Expired) as ended:
        broker.access_token(notes.url, "notes:read", alice)
    assert ended.value.code == "run_ended", ended.value
    response = broker.token(notes.url, "notes:read", alice)
    assert response.status_code == 400 and response.json()["error"] == "invalid_grant", response.text


# (f) ---------------------------------------------------------------------------------

def test_no_token_is_401_with_the_resource_metadata(notes: NotesServer) -> None:
    response = httpx.post(notes.url, json=INITIALIZE, headers=MCP_HEADERS)
    assert response.status_code == 401
    challenge = response.headers["www-authenticate"]
    metadata = agent.well_known_url(notes.url, "oauth-protected-resource")
    assert challenge.startswith("Bearer ") and f'resource_metadata="{metadata}"' in challenge
    assert httpx.get(metadata).json()["resource"] == notes.url

    # A token that is no JWT, or a JWT that is not Tessera's, fares no better.
    for bad in ["not-a-jwt", forged_token(notes.url)]:
        response = httpx.post(
            notes.url, json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {bad}"}
        )
        assert response.status_code == 401, bad
        assert f'resource_metadata="{metadata}"' in response.headers["www-authenticate"]


def forged_token(aud: str) -> str:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    now = int(time.time())
    claims = {"iss": "http://127.0.0.1:1", "aud": aud, "sub": "alice", "jti": "x", "iat": now, "exp": now + 60}
    claims["scope"] = "notes:read"
    return jwt.encode(claims, Ed25519PrivateKey.generate(), algorithm="EdDSA", headers={"typ": "at+jwt", "kid": "x"})


# (g) ---------------------------------------------------------------------------------

def test_the_wrong_scope_is_403_insufficient_scope(broker: Broker, notes: NotesServer) -> None:
    _, alice = broker.run("alice")
    token = broker.access_token(notes.url, "notes:read", alice)
    refused = refusal(notes.url, token, "add_note", {"text": "not mine to write"})
    assert refused.status == 403
    assert 'error="insufficient_scope"' in refused.challenge and 'scope="notes:write"' in refused.challenge
    assert "resource_metadata=" in refused.challenge
    # The same token still lists.
    assert result_data(call(notes.url, token, "list_notes")) is not None


# The server is plain MCP + PyJWT + httpx: it imports nothing of Tessera's.

def test_the_server_does_not_import_tessera() -> None:
    tree = ast.parse((EXAMPLE / "server.py").read_text())
    modules = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    modules |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert "tessera" not in modules
    assert {"mcp", "jwt", "httpx"} <= modules


# (h) A stand-in authorization server, to forge what Tessera never issues ------------------
#
# The notes server trusts whatever issuer it is pointed at: here one on 127.0.0.1 with its
# own Ed25519 key (RFC 8414 metadata, a JWKS, RFC 7662 introspection whose answer each test
# chooses). Tokens are forged with PyJWT and cryptography.


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class FakeAuthorizationServer:
    def __init__(self) -> None:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        self.key = Ed25519PrivateKey.generate()
        self.public_raw = self.key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64url(self.public_raw), "kid": "fake-1", "alg": "EdDSA", "use": "sig"}
        #: what /introspect answers: "active" (the token's claims), "list" (a JSON array),
        #: "down" (503), "hangup" (the connection closed without an answer)
        self.introspection = "active"
        self.introspected = 0
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                if self.path == "/.well-known/oauth-authorization-server":
                    fake.answer(self, 200, fake.metadata())
                elif self.path == "/jwks":
                    fake.answer(self, 200, {"keys": [fake.jwk]})
                else:
                    fake.answer(self, 404, {"error": "not_found"})

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                if self.path != "/introspect":
                    fake.answer(self, 404, {"error": "not_found"})
                    return
                fake.introspected += 1
                mode = fake.introspection
                if mode == "hangup":
                    self.close_connection = True
                    return
                if mode == "down":
                    fake.answer(self, 503, {"error": "temporarily_unavailable"})
                elif mode == "list":
                    fake.answer(self, 200, [{"active": True}])
                else:
                    token = parse_qs(body.decode())["token"][0]
                    fake.answer(self, 200, {"active": True, **jwt.decode(token, options={"verify_signature": False})})

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.issuer = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def metadata(self) -> dict[str, Any]:
        return {
            "issuer": self.issuer,
            "jwks_uri": f"{self.issuer}/jwks",
            "introspection_endpoint": f"{self.issuer}/introspect",
            "token_endpoint": f"{self.issuer}/token",
        }

    @staticmethod
    def answer(handler: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        out = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(out)))
        handler.end_headers()
        handler.wfile.write(out)

    def claims(self, aud: Any, scope: str = "notes:read") -> dict[str, Any]:
        now = int(time.time())
        return {
            "iss": self.issuer, "aud": aud, "sub": "alice", "jti": uuid.uuid4().hex,
            "iat": now, "nbf": now, "exp": now + 300, "scope": scope, "client_id": "forged",
        }  # fmt: skip

    def token(self, aud: Any, scope: str = "notes:read", headers: dict[str, Any] | None = None) -> str:
        """A token as the authorization server would sign it (EdDSA, typ at+jwt, its kid)."""
        return jwt.encode(
            self.claims(aud, scope), self.key, algorithm="EdDSA", headers={"typ": "at+jwt", "kid": "fake-1", **(headers or {})}
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class FakeSetup:
    server: FakeAuthorizationServer
    notes: NotesServer

    @property
    def url(self) -> str:
        return self.notes.url


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeSetup]:
    server = FakeAuthorizationServer()
    try:
        url = f"http://127.0.0.1:{free_port()}/mcp"
        logdir = tmp_path_factory.mktemp("fake-as")
        for notes in start_server_at(server.issuer, logdir, url, "notes", "NOTES_INTROSPECTION_SECRET", "s" * 40):
            yield FakeSetup(server, notes)
    finally:
        server.close()


@pytest.fixture
def introspection(fake: FakeSetup) -> Iterator[FakeAuthorizationServer]:
    """The stand-in's introspection, set back to "active" after each test."""
    yield fake.server
    fake.server.introspection = "active"


def initialize(url: str, token: str) -> httpx.Response:
    return httpx.post(url, json=INITIALIZE, headers={**MCP_HEADERS, "Authorization": f"Bearer {token}"}, timeout=30)


def test_a_token_of_the_stand_in_is_accepted(fake: FakeSetup) -> None:
    # The control: what the refusals below differ from is only what each test changes.
    token = fake.server.token(fake.url)
    assert initialize(fake.url, token).status_code == 200
    assert result_data(call(fake.url, token, "list_notes")) == {"result": []}


def test_forged_tokens_are_refused(fake: FakeSetup) -> None:
    s = fake.server
    claims = s.claims(fake.url)
    forged = {
        # Algorithm confusion: HS256 keyed with the JWKS's public key (raw, and as its JWK `x`).
        "HS256 with the public key": jwt.encode(claims, s.public_raw, algorithm="HS256", headers={"typ": "at+jwt", "kid": "fake-1"}),
        "HS256 with the JWK x": jwt.encode(claims, s.jwk["x"], algorithm="HS256", headers={"typ": "at+jwt", "kid": "fake-1"}),
        # Signed by the right key, but no access token type: an ID token or any other JWT.
        "no typ": s.token(fake.url, headers={"typ": None}),
        "typ JWT": s.token(fake.url, headers={"typ": "JWT"}),
        # Meant for this server and another: the other could replay it here.
        "aud list": s.token([fake.url, "http://127.0.0.1:1/other"]),
        "aud list of one": s.token([fake.url]),
        "another aud": s.token("http://127.0.0.1:1/other"),
        "alg none": jwt.encode(claims, None, algorithm="none", headers={"typ": "at+jwt", "kid": "fake-1"}),
    }
    assert "typ" not in jwt.get_unverified_header(forged["no typ"])
    offset = fake.notes.log_size()
    for what, token in forged.items():
        response = initialize(fake.url, token)
        assert response.status_code == 401, (what, response.status_code, response.text)
        assert 'error="invalid_token"' in response.headers["www-authenticate"], what
        refused = refusal(fake.url, token, "list_notes")
        assert refused.status == 401, what
    log = fake.notes.log_since(offset)
    assert "The specified alg value is not allowed" in log and "is not at+jwt" in log
    assert "Invalid claim format in token (strict)" in log


@pytest.mark.parametrize("mode", ["down", "hangup", "list"])
def test_introspection_that_fails_refuses_the_token(fake: FakeSetup, introspection: FakeAuthorizationServer, mode: str) -> None:
    """Fail closed: a token whose state cannot be learned is refused (401, never a 500)."""
    token = fake.server.token(fake.url)
    assert initialize(fake.url, token).status_code == 200
    introspection.introspection = mode
    before, offset = introspection.introspected, fake.notes.log_size()
    response = initialize(fake.url, token)
    assert response.status_code == 401, (mode, response.status_code, response.text)
    assert 'error="invalid_token"' in response.headers["www-authenticate"]
    assert introspection.introspected > before
    assert "token refused" in fake.notes.log_since(offset)
    with pytest.raises(agent.Refused):
        call(fake.url, token, "list_notes")


def test_a_body_over_1_mib_is_413_not_unchecked(fake: FakeSetup) -> None:
    """The scope check reads at most 1 MiB; a larger body is refused, never passed on unchecked."""
    token = fake.server.token(fake.url, "notes:read")  # add_note needs notes:write
    init = initialize(fake.url, token)
    assert init.status_code == 200
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}", "mcp-session-id": init.headers["mcp-session-id"]}
    big = json.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "add_note", "arguments": {"text": "x" * (1 << 20)}}}
    ).encode()
    assert len(big) > 1 << 20
    # With a Content-Length, and chunked (no length said up front).
    for content in (big, iter([big[i : i + 65536] for i in range(0, len(big), 65536)])):
        response = httpx.post(fake.url, content=content, headers=headers, timeout=30)
        assert response.status_code == 413, response.text[:300]
    # Nothing was written; a small body with the same call is the scope check's 403.
    small = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "add_note", "arguments": {"text": "x"}}}
    response = httpx.post(fake.url, json=small, headers=headers, timeout=30)
    assert response.status_code == 403 and 'scope="notes:write"' in response.headers["www-authenticate"]
    assert result_data(call(fake.url, token, "list_notes")) == {"result": []}


def test_deeply_nested_json_is_refused_not_a_500(fake: FakeSetup) -> None:
    token = fake.server.token(fake.url)
    init = initialize(fake.url, token)
    headers = {**MCP_HEADERS, "Authorization": f"Bearer {token}", "mcp-session-id": init.headers["mcp-session-id"]}
    depth = 100_000
    for body in (
        b"[" * depth + b"]" * depth,
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add_note","arguments":'
        + b'{"a":' * depth + b"1" + b"}" * depth + b"}}",
    ):
        assert len(body) < 1 << 20
        response = httpx.post(fake.url, content=body, headers=headers, timeout=30)
        assert response.status_code == 400, (response.status_code, response.text[:300])
        assert response.json()["error"]["code"] == -32700
    # The server is still up and answers.
    assert result_data(call(fake.url, token, "list_notes")) == {"result": []}
