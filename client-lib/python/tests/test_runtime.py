"""Runs, capabilities, exchanges and errors against a real broker."""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any, Callable

import pytest

import tessera
from conftest import TASK
from support import Broker, write_secret

REPORT = "svc-reports:reports/2026/q1.csv"


def test_the_run_is_ended_when_the_body_raises(runtime: tessera.Runtime) -> None:
    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with runtime.run(user="alice", task=TASK, ttl="30m") as run:
            tool = run.tool()
            cap = tool.capability("read", REPORT)
            kept = (run.run_id, run.token, cap)
            raise Boom("the task failed")
    run_id, token, cap = kept
    assert runtime.get_run(run_id)["state"] == "ended"
    assert runtime.introspect(cap) == {"active": False}
    # The run token no longer obtains anything.
    with tessera.Tool(runtime.address, token, env={}) as tool:
        with pytest.raises(tessera.Expired) as e:
            tool.capability("read", REPORT)
    assert e.value.code == "run_ended" and e.value.status == 403 and e.value.request_id


def test_the_run_is_ended_after_a_normal_exit_too(runtime: tessera.Runtime) -> None:
    with runtime.run(user="alice", task=TASK) as run:
        run.tool().capability("read", REPORT)
    assert run.ended is not None and run.ended["revoked"]["capabilities"] == 1
    assert runtime.get_run(run.run_id)["state"] == "ended"


def test_module_level_run_reads_the_environment(
    broker: Broker, runtime_key: str, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("TESSERA_ADDR", broker.addr)
    clean_env.setenv("TESSERA_RUNTIME_KEY_FILE", str(write_secret(tmp_path / "rt.key", runtime_key)))
    with pytest.raises(KeyError):
        with tessera.run(user="alice", task={"id": "t-env", "kind": "summarize"}, ttl="5m") as run:
            assert run.tool().exchange(run.tool().capability("read", REPORT)).kind == "token"
            run_id = run.run_id
            raise KeyError("boom")
    with tessera.Runtime(broker.addr, runtime_key) as rt:
        assert rt.get_run(run_id)["state"] == "ended"


def test_capability_and_exchange_round_trip(run: tessera.Run, runtime: tessera.Runtime) -> None:
    tool = run.tool()
    cap = tool.capability("read", REPORT, ttl="5m")
    assert cap.action == "read" and cap.resource == REPORT and cap.uses >= 1 and not cap.bound
    claims = cap.claims()
    assert claims["sub"] == "alice" and claims["jti"] == cap.id and claims["run"] == run.run_id
    cred = tool.exchange(cap)
    assert cred.kind == "token" and cred.lease_id
    access = cred.field("token")
    assert isinstance(access, str) and access.count(".") == 2
    assert cred["audience"] == "https://reports.internal"
    assert runtime.introspect(cap)["active"] is True
    assert tool.revoke(cap) is True
    assert tool.revoke(cap) is False
    assert runtime.introspect(cap) == {"active": False}
    with pytest.raises(tessera.Expired) as e:
        tool.exchange(cap)
    assert e.value.code == "capability_revoked"


def test_errors_carry_code_and_request_id(run: tessera.Run, runtime: tessera.Runtime) -> None:
    tool = run.tool()
    # Policy: analysts read reports/*, nothing else.
    with pytest.raises(tessera.Denied) as denied:
        tool.capability("read", "svc-reports:payroll/2026.csv")
    e = denied.value
    assert e.code == "capability_denied" and e.status == 403
    assert e.request_id and e.request_id in str(e) and "capability_denied" in str(e)
    # A run token the broker never issued.
    forged = "tsr_run_" + secrets.token_urlsafe(32)[:43]
    with tessera.Tool(runtime.address, forged, env={}) as stranger:
        with pytest.raises(tessera.Unauthenticated) as unauth:
            stranger.capability("read", REPORT)
    assert unauth.value.code == "unauthenticated" and unauth.value.status == 401 and unauth.value.request_id
    # A request the broker rejects as malformed.
    with pytest.raises(tessera.Rejected) as rejected:
        tool.capability("read", "no-such-backend:x")
    assert rejected.value.status == 400 and rejected.value.code == "unknown_backend"
    # A runtime key the broker does not know.
    with tessera.Runtime(runtime.address, "tsr_rt_" + "A" * 43, env={}) as unknown:
        with pytest.raises(tessera.Unauthenticated) as other:
            unknown.get_run(run.run_id)
    assert other.value.code == "unauthenticated" and other.value.request_id


def test_a_user_without_a_permit_is_denied(runtime: tessera.Runtime) -> None:
    with runtime.run(user="carol", task=TASK) as run:
        with pytest.raises(tessera.Denied) as e:
            run.tool().capability("read", REPORT)
    assert e.value.code == "capability_denied" and e.value.request_id


def test_no_secret_in_any_repr(run: tessera.Run, runtime: tessera.Runtime, runtime_key: str) -> None:
    tool = run.tool()
    dtool = run.tool(dpop=True)
    cap = tool.capability("read", REPORT)
    cred = tool.exchange(cap)
    secrets_held = [run.token.reveal(), runtime_key, cap.token.reveal(), cred.token.reveal()]
    objects: list[Any] = [run, runtime, tool, dtool, cap, cred, run.token, cap.token, cred.token, dtool.dpop_key]
    for obj in objects:
        for text in (repr(obj), str(obj), f"{obj}"):
            for s in secrets_held:
                assert s not in text, f"{type(obj).__name__} shows a secret"
    assert "<redacted>" in repr(run) and "<redacted>" in repr(cap) and "<redacted>" in repr(runtime)
    # The private half of the DPoP key is nowhere in its repr.
    from cryptography.hazmat.primitives import serialization

    pem = dtool.dpop_key._key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    d = dtool.dpop_key._key.private_numbers().private_value
    assert pem not in repr(dtool.dpop_key) and str(d) not in repr(dtool.dpop_key)


def test_tool_from_the_environment(
    broker: Broker, run: tessera.Run, token_file: Callable[[tessera.Secret], Path], clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("TESSERA_ADDR", broker.addr)
    clean_env.setenv("TESSERA_RUN_TOKEN_FILE", str(token_file(run.token)))
    # A proxy in the environment is ignored: the token goes to the broker only.
    clean_env.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    clean_env.setenv("ALL_PROXY", "http://127.0.0.1:9")
    with tessera.Tool() as tool:
        assert tool.exchange(tool.capability("read", REPORT)).kind == "token"


def test_arguments_are_checked_against_the_schema(run: tessera.Run) -> None:
    # The shipped schema declares no context.arguments for `read`.
    with pytest.raises(tessera.Rejected) as e:
        run.tool().capability("read", REPORT, arguments={"why": "summary"})
    assert e.value.code == "invalid_arguments" and e.value.status == 400 and e.value.request_id


def test_approvals_are_reported_waited_for_and_redeemed(broker: Broker, runtime: tessera.Runtime) -> None:
    import json
    import threading

    import httpx

    approver = json.loads(broker.cli("approvers", "create", f"dana-{secrets.token_hex(3)}", "--user", "dana", "--json"))
    key = approver["key"]

    def approve(approval_id: str, delay: float = 0.0) -> None:
        time.sleep(delay)
        r = httpx.post(
            f"{broker.addr}/v1/approvals/{approval_id}/approve",
            json={"comment": "sdk test"},
            headers={"Authorization": f"Bearer {key}"},
            trust_env=False,
        )
        assert r.status_code == 200, r.text

    args = {"service": "web", "commit": "abc123", "environment": "staging"}
    with runtime.run(user="bob", task=TASK) as run:
        tool = run.tool()
        # Not waiting: ApprovalRequired with the approval's id.
        with pytest.raises(tessera.ApprovalRequired) as pending:
            tool.capability("invoke", "deployer:web", arguments=args)
        aid = pending.value.approval_id
        assert pending.value.code == "approval_pending" and aid
        assert tool.approval(aid)["status"] == "pending"
        # Redeeming before the decision is refused; after it, the capability is issued.
        with pytest.raises(tessera.ApprovalRequired) as early:
            tool.capability("invoke", "deployer:web", arguments=args, approval_id=aid)
        assert early.value.code == "approval_pending" and early.value.status == 409
        approve(aid)
        cap = tool.capability("invoke", "deployer:web", arguments=args, approval_id=aid)
        assert cap.args and cap.claims()["args"] == cap.args
        # Waiting: the decision arrives while the SDK long-polls, then it redeems.
        seen: list[str] = []
        args2 = dict(args, commit="def456")

        def approve_when_asked() -> None:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                r = httpx.get(f"{broker.addr}/v1/approvals", headers={"Authorization": f"Bearer {key}"}, trust_env=False)
                todo = [a for a in r.json()["approvals"] if a["status"] == "pending" and a["arguments"] == args2]
                if todo:
                    approve(todo[0]["approval_id"], 0.5)
                    return
                time.sleep(0.2)

        t = threading.Thread(target=approve_when_asked)
        t.start()
        cap2 = tool.capability(
            "invoke", "deployer:web", arguments=args2, wait_for_approval=30, on_approval=lambda a: seen.append(a["status"])
        )
        t.join()
        assert seen == ["pending", "approved"] and cap2.args != cap.args
        assert tool.exchange(cap2).kind == "token"
