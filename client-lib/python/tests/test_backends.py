"""Downstream credentials: PostgreSQL (the machine's server on 127.0.0.1:5432),
AWS (moto on loopback), and the egress gateway."""

from __future__ import annotations

import datetime as dt
import secrets
import time
from typing import Any, Iterator

import psycopg
import pytest
import requests
from botocore.exceptions import ClientError

import tessera
from conftest import PG_SERVER, TASK
from support import Broker, Moto, Recorder

Q1 = "aws-main:arn:aws:s3:::tessera-reports/reports/2026/q1.csv"


@pytest.fixture
def analytics_table() -> Iterator[tuple[str, psycopg.Connection[Any]]]:
    """A table of this test's own in the `analytics` database (policy lets
    analysts' summarizing tasks SELECT from analytics.public.*), and a superuser
    connection to look at roles."""
    try:
        admin = psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as e:
        pytest.fail(f"PostgreSQL on 127.0.0.1:5432 is required: {e}")
    if admin.execute("SELECT 1 FROM pg_database WHERE datname = 'analytics'").fetchone() is None:
        try:
            admin.execute("CREATE DATABASE analytics")
        except psycopg.errors.DuplicateDatabase:
            pass
    table = f"tsr_py_{secrets.token_hex(4)}"
    with psycopg.connect(f"{PG_SERVER}/analytics", autocommit=True) as db:
        db.execute(f"CREATE TABLE public.{table} (n int, note text)")
        db.execute(f"INSERT INTO public.{table} VALUES (1, 'one'), (2, 'two')")
    try:
        yield table, admin
    finally:
        with psycopg.connect(f"{PG_SERVER}/analytics", autocommit=True) as db:
            db.execute(f"DROP TABLE IF EXISTS public.{table}")
        admin.close()


def _role_gone(admin: psycopg.Connection[Any], user: str, within: float = 20.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (user,)).fetchone() is None:
            return True
        time.sleep(0.2)
    return False


def test_postgres_connect(runtime: tessera.Runtime, analytics_table: tuple[str, Any]) -> None:
    table, admin = analytics_table
    resource = f"pg-main:analytics.public.{table}"
    with runtime.run(user="alice", task=TASK) as run:
        tool = run.tool()
        with tool.postgres_connect("select", resource) as conn:
            user = conn.info.user
            assert user.startswith("tsr_")
            assert conn.execute(f"SELECT n, note FROM public.{table} ORDER BY n").fetchall() == [(1, "one"), (2, "two")]
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(f"INSERT INTO public.{table} VALUES (3, 'three')")
        creds = tool.database_credentials("select", resource)
        assert creds.kind == "postgres" and creds.password.reveal() not in repr(creds)
        assert creds.dsn.reveal() not in repr(creds)
        with pytest.raises(tessera.Denied):
            tool.postgres_connect("delete", resource)
    # Ending the run removes the user.
    assert _role_gone(admin, user), f"{user} outlived its run"
    assert _role_gone(admin, creds.username)


def test_aws_session_reads_exactly_its_object_and_refreshes(
    aws_runtime: tessera.Runtime, moto: Moto
) -> None:
    with aws_runtime.run(user="alice", task=TASK) as run:
        tool = run.tool()
        session = tool.aws_session("s3:GetObject", Q1)
        assert session.region_name == "us-east-1"
        s3 = session.client("s3", endpoint_url=moto.endpoint)
        body = s3.get_object(Bucket="tessera-reports", Key="reports/2026/q1.csv")["Body"].read()
        assert body == b"quarter,revenue\nq1,100\n"
        with pytest.raises(ClientError) as denied:
            s3.get_object(Bucket="tessera-reports", Key="reports/2025/q4.csv")
        assert denied.value.response["Error"]["Code"] == "AccessDenied"
        creds = session.get_credentials()
        first = creds.get_frozen_credentials()
        assert first.secret_key not in repr(creds) and first.token not in repr(creds)
        # Near expiry, botocore asks Tessera again: a new capability, superseding the last.
        creds._expiry_time = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=5)
        second = creds.get_frozen_credentials()
        assert second.access_key != first.access_key
        body = s3.get_object(Bucket="tessera-reports", Key="reports/2026/q1.csv")["Body"].read()
        assert body.startswith(b"quarter")
        states = sorted(c["state"] for c in run.info()["capabilities"])
        assert states == ["active", "revoked"], states
        with pytest.raises(tessera.Denied):
            tool.aws_session("s3:GetObject", "aws-main:arn:aws:s3:::tessera-reports/private/salaries.csv")


def test_http_client_goes_through_the_gateway(broker: Broker, run: tessera.Run) -> None:
    assert broker.gateway
    server = Recorder(lambda h: (200, {"content-type": "text/plain"}, b"hello from loopback"))
    try:
        tool = run.tool()
        with tool.http_client(gateway=broker.gateway) as client:
            r = client.get(f"{server.url}/data?x=1")
            assert r.status_code == 200 and r.text == "hello from loopback"
            # Policy permits 127.0.0.1 only: another loopback address is refused by the gateway.
            denied = client.get(f"http://127.0.0.2:{server.port}/data")
            assert denied.status_code == 403 and denied.json()["error"]["code"] == "destination_denied"
        s = tool.requests_session(gateway=broker.gateway)
        r2 = s.get(f"{server.url}/again", timeout=10)
        assert r2.status_code == 200 and r2.text == "hello from loopback"
        assert len(server.requests) == 2
        for req in server.requests:
            seen = str(req["headers"]).lower()
            assert run.token.reveal().lower() not in seen and "proxy-authorization" not in seen
    finally:
        server.close()


def test_a_gated_destination_waits_for_its_approval_and_passes_once(broker: Broker, run: tessera.Run) -> None:
    """@approval at the gateway: 403 approval_pending with Tessera-Approval-Id;
    the session waits for the decision and sends the identical request once more;
    the next request asks anew."""
    import json
    import threading

    import httpx

    assert broker.gateway
    server = Recorder(lambda h: (200, {"content-type": "text/plain"}, b"deployed"), host="127.0.0.4")
    key = json.loads(broker.cli("approvers", "create", f"erin-{secrets.token_hex(3)}", "--user", "erin", "--json"))[
        "key"
    ]
    try:
        tool = run.tool()
        plain = tool.requests_session(gateway=broker.gateway)
        held = plain.post(f"{server.url}/deploy", data=b"web@4f2a9c1", timeout=10)
        first = tessera.gateway_approval(held)
        assert held.status_code == 403 and held.json()["error"]["code"] == "approval_pending" and first
        assert server.requests == []
        approval = tool.approval(first)
        assert approval["status"] == "pending" and approval["action"] == "connect"
        assert approval["resource"] == f"net:127.0.0.4:{server.port}"

        def approve() -> None:
            r = httpx.post(
                f"{broker.addr}/v1/approvals/{first}/approve",
                json={"comment": "sdk gateway test"},
                headers={"Authorization": f"Bearer {key}"},
                trust_env=False,
            )
            assert r.status_code == 200, r.text

        seen: list[str] = []
        waiting = tool.requests_session(
            gateway=broker.gateway, wait_for_approval=30, on_approval=lambda a: seen.append(a["status"])
        )
        t = threading.Timer(1.0, approve)
        t.start()
        passed = waiting.post(f"{server.url}/deploy", data=b"web@4f2a9c1", timeout=40)
        t.join()
        assert passed.status_code == 200 and passed.text == "deployed", passed.text
        assert seen == ["pending", "approved"], seen
        assert [r["body"] for r in server.requests] == [b"web@4f2a9c1"]
        again = plain.post(f"{server.url}/deploy", data=b"web@4f2a9c1", timeout=10)
        second = tessera.gateway_approval(again)
        assert again.status_code == 403 and second and second != first
        assert len(server.requests) == 1
    finally:
        server.close()


def test_gateway_session_gives_the_run_ca_and_placeholders(broker: Broker, run: tessera.Run) -> None:
    session = run.tool().gateway_session()
    assert session.ca_pem.startswith("-----BEGIN CERTIFICATE-----")
    assert "api.sdk.test" in session.hosts
    [ph] = session.placeholders
    assert ph.backend == "sdk-api" and ph.env == "SDK_API_TOKEN" and ph.value.reveal().startswith("tsr_ph_")
    assert ph.value.reveal() not in repr(session) and ph.value.reveal() not in repr(ph)
    assert session.environment() == {"SDK_API_TOKEN": ph.value.reveal()}
    assert session.expires_at <= run.expires_at + dt.timedelta(seconds=1)


def test_gateway_must_be_on_this_machine(run: tessera.Run) -> None:
    with pytest.raises(tessera.ConfigError, match="in clear"):
        run.tool().http_client(gateway="192.0.2.1:8701")
    with pytest.raises(tessera.ConfigError, match="gateway"):
        run.tool().http_client()
    _ = requests  # the requests extra is installed for these tests
