"""The MCP interop example end to end: a real Tessera dev broker, the example's MCP server
(examples/mcp/server.py, which knows nothing of Tessera) and its agent (agent.py).

Needs TESSERA_BIN (the broker binary); run by `scripts/python.sh run TESSERA_BIN`.
Everything listens on 127.0.0.1 only. Nothing here skips: a missing binary fails.
"""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    log = broker.dir / f"server-{port}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TESSERA_")}
    env[secret_env] = SECRETS[secret_env]
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [sys.executable, str(EXAMPLE / "server.py"), "--port", str(port), "--issuer", broker.addr]
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
