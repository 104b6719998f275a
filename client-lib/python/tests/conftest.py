"""Fixtures: real brokers started from $TESSERA_BIN on 127.0.0.1 (one per
configuration, shared by the session), moto, the machine's PostgreSQL."""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

import tessera  # noqa: E402
from support import Broker, Moto, free_port, start_broker, start_moto, write_secret  # noqa: E402
from support import SDK_POLICY  # noqa: E402

PG_SERVER = "postgres://postgres@127.0.0.1:5432"
# The `notes` resource server's URL: a free port, so a test can stand a server up there
# (AccessToken.auth() sends the token to its resource's origin and path only).
NOTES_PORT = free_port()
NOTES = f"http://127.0.0.1:{NOTES_PORT}/mcp"
NOTES_SECRET = "sdk-test-introspection-" + secrets.token_hex(16)
API_SECRET = "sdk-test-api-secret-" + secrets.token_hex(16)
TASK = {"id": "t-1", "kind": "summarize"}

SVC_REPORTS = """
[backends.svc-reports]
kind = "token"
audience = "https://reports.internal"
"""


def _oauth_config(nonce: bool) -> "object":
    def config(port: int) -> str:
        return f"""
[oauth]
issuer = "http://127.0.0.1:{port}"
dpop_nonce = {"true" if nonce else "false"}
{SVC_REPORTS}
[backends.notes]
kind = "oauth-resource"
resource = "{NOTES}"
scopes = ["notes:read", "notes:write"]
max_ttl = "15m"
introspection_secret_env = "NOTES_INTROSPECTION_SECRET"
"""

    return config


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """svc-reports and deployer (token; deploys need an approval), pg-main (the machine's PostgreSQL, database analytics),
    the egress gateway with one injection rule."""
    gw = free_port()

    def config(port: int) -> str:
        return f"""
{SVC_REPORTS}
[backends.deployer]
kind = "token"
audience = "https://deployer.internal"

[backends.pg-main]
kind = "postgres"
url_env = "TESSERA_SDK_PG"
strict = false

[backends.net]
kind = "net"

[backends.sdk-api]
kind = "http"
hosts = ["api.sdk.test"]
requests = ["GET /*"]
auth = "bearer"
secret_env = "SDK_TEST_API_SECRET"
placeholder_env = "SDK_API_TOKEN"

[gateway]
listen = "127.0.0.1:{gw}"
"""

    b = start_broker(
        tmp_path_factory.mktemp("broker"),
        config,
        policy_extra=SDK_POLICY,
        env={"TESSERA_SDK_PG": f"{PG_SERVER}/analytics", "SDK_TEST_API_SECRET": API_SECRET},
        gateway_port=gw,
    )
    yield b
    b.stop()


@pytest.fixture(scope="session")
def oauth_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """[oauth] with the `notes` oauth-resource backend; DPoP nonces off."""
    b = start_broker(
        tmp_path_factory.mktemp("oauth"),
        _oauth_config(False),  # type: ignore[arg-type]
        oauth=True,
        env={"NOTES_INTROSPECTION_SECRET": NOTES_SECRET},
    )
    yield b
    b.stop()


@pytest.fixture(scope="session")
def nonce_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """As oauth_broker, with `dpop_nonce = true`."""
    b = start_broker(
        tmp_path_factory.mktemp("nonce"),
        _oauth_config(True),  # type: ignore[arg-type]
        oauth=True,
        env={"NOTES_INTROSPECTION_SECRET": NOTES_SECRET},
    )
    yield b
    b.stop()


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Moto]:
    m = start_moto(tmp_path_factory.mktemp("moto") / "moto.log")
    yield m
    m.stop()


@pytest.fixture(scope="session")
def aws_broker(tmp_path_factory: pytest.TempPathFactory, moto: Moto) -> Iterator[Broker]:
    def config(port: int) -> str:
        return f"""
{SVC_REPORTS}
[backends.aws-main]
kind = "aws-sts"
role_arn = "arn:aws:iam::123456789012:role/tessera-agents"
region = "us-east-1"
endpoint_url = "{moto.endpoint}"
external_id = "tessera-test"
"""

    b = start_broker(
        tmp_path_factory.mktemp("aws"),
        config,
        policy_extra=SDK_POLICY,
        env={
            "AWS_ACCESS_KEY_ID": moto.broker_keys["access_key_id"],
            "AWS_SECRET_ACCESS_KEY": moto.broker_keys["secret_access_key"],
        },
    )
    yield b
    b.stop()


def _runtime_key(b: Broker, cache: dict[str, str]) -> str:
    if b.addr not in cache:
        cache[b.addr] = b.runtime_key()
    return cache[b.addr]


@pytest.fixture(scope="session")
def _keys() -> dict[str, str]:
    return {}


@pytest.fixture
def runtime_key(broker: Broker, _keys: dict[str, str]) -> str:
    return _runtime_key(broker, _keys)


@pytest.fixture
def runtime(broker: Broker, runtime_key: str) -> Iterator[tessera.Runtime]:
    with tessera.Runtime(broker.addr, runtime_key) as rt:
        yield rt


@pytest.fixture
def run(runtime: tessera.Runtime) -> Iterator[tessera.Run]:
    with runtime.run(user="alice", task=TASK, ttl="30m") as r:
        yield r


@pytest.fixture
def oauth_runtime(oauth_broker: Broker, _keys: dict[str, str]) -> Iterator[tessera.Runtime]:
    with tessera.Runtime(oauth_broker.addr, _runtime_key(oauth_broker, _keys)) as rt:
        yield rt


@pytest.fixture
def nonce_runtime(nonce_broker: Broker, _keys: dict[str, str]) -> Iterator[tessera.Runtime]:
    with tessera.Runtime(nonce_broker.addr, _runtime_key(nonce_broker, _keys)) as rt:
        yield rt


@pytest.fixture
def aws_runtime(aws_broker: Broker, _keys: dict[str, str]) -> Iterator[tessera.Runtime]:
    with tessera.Runtime(aws_broker.addr, _runtime_key(aws_broker, _keys)) as rt:
        yield rt


@pytest.fixture
def token_file(tmp_path: Path) -> "object":
    """Writes a run token to a 0600 file; returns its path."""

    def write(token: tessera.Secret) -> Path:
        return write_secret(tmp_path / f"run-{secrets.token_hex(3)}.token", token.reveal())

    return write


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.startswith("TESSERA_") and name != "TESSERA_BIN":
            monkeypatch.delenv(name)
    return monkeypatch
