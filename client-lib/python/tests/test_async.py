"""The async twins against a real broker."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import tessera
from conftest import NOTES, TASK
from support import Broker, Moto, Recorder, write_secret
from test_backends import Q1, _role_gone, analytics_table  # noqa: F401

REPORT = "svc-reports:reports/2026/q1.csv"


@pytest.mark.asyncio
async def test_async_run_is_ended_when_the_body_raises(broker: Broker, runtime_key: str) -> None:
    async with tessera.AsyncRuntime(broker.addr, runtime_key) as rt:
        with pytest.raises(ZeroDivisionError):
            async with rt.run(user="alice", task=TASK) as run:
                tool = run.tool()
                cap = await tool.capability("read", REPORT)
                assert (await tool.exchange(cap)).kind == "token"
                kept = (run.run_id, cap)
                1 / 0
        run_id, cap = kept
        assert (await rt.get_run(run_id))["state"] == "ended"
        assert await rt.introspect(cap) == {"active": False}


@pytest.mark.asyncio
async def test_async_module_level_run(broker: Broker, runtime_key: str, tmp_path: Any, clean_env: Any) -> None:
    clean_env.setenv("TESSERA_ADDR", broker.addr)
    clean_env.setenv("TESSERA_RUNTIME_KEY_FILE", str(write_secret(tmp_path / "rt.key", runtime_key)))
    async with tessera.run(user="alice", task={"id": "t-async", "kind": "summarize"}) as run:
        assert isinstance(run, tessera.AsyncRun)
        tool = run.tool()
        cap = await tool.capability("read", REPORT)
        assert await tool.revoke(cap) is True
        with pytest.raises(tessera.Expired):
            await tool.exchange(cap)
        with pytest.raises(tessera.Denied) as e:
            await tool.capability("read", "svc-reports:payroll/x")
        assert e.value.code == "capability_denied" and e.value.request_id
    assert run.ended is not None


@pytest.mark.asyncio
async def test_async_dpop_and_access_token(oauth_broker: Broker, _keys: dict[str, str]) -> None:
    from conftest import _runtime_key

    async with tessera.AsyncRuntime(oauth_broker.addr, _runtime_key(oauth_broker, _keys)) as rt:
        async with rt.run(user="alice", task=TASK) as run:
            tool = run.tool(dpop=True)
            cap = await tool.capability("read", REPORT)
            assert cap.jkt == tool.dpop_key.thumbprint
            assert (await tool.exchange(cap)).kind == "token"
            token = await tool.access_token(NOTES, "notes:read")
            assert token.token_type == "DPoP" and token.claims()["cnf"]["jkt"] == tool.dpop_key.thumbprint
            assert token.token.reveal() not in repr(tool) + repr(token) + repr(run)


@pytest.mark.asyncio
async def test_async_postgres_and_gateway(
    broker: Broker, runtime_key: str, analytics_table: tuple[str, Any]  # noqa: F811
) -> None:
    table, admin = analytics_table
    server = Recorder(lambda h: (200, {}, b"ok"))
    try:
        async with tessera.AsyncRuntime(broker.addr, runtime_key) as rt:
            async with rt.run(user="alice", task=TASK) as run:
                tool = run.tool()
                conn = await tool.postgres_connect("select", f"pg-main:analytics.public.{table}")
                async with conn:
                    user = conn.info.user
                    cur = await conn.execute(f"SELECT count(*) FROM public.{table}")
                    assert await cur.fetchone() == (2,)
                    with pytest.raises(psycopg.errors.InsufficientPrivilege):
                        await conn.execute(f"DELETE FROM public.{table}")
                async with await tool.http_client(gateway=broker.gateway) as client:
                    r = await client.get(f"{server.url}/x")
                    assert r.status_code == 200 and r.text == "ok"
        assert _role_gone(admin, user)
    finally:
        server.close()


@pytest.mark.asyncio
async def test_async_aws_session(aws_broker: Broker, moto: Moto, _keys: dict[str, str]) -> None:
    from conftest import _runtime_key

    async with tessera.AsyncRuntime(aws_broker.addr, _runtime_key(aws_broker, _keys)) as rt:
        async with rt.run(user="alice", task=TASK) as run:
            session = await run.tool().aws_session("s3:GetObject", Q1)
            s3 = session.client("s3", endpoint_url=moto.endpoint)
            body = s3.get_object(Bucket="tessera-reports", Key="reports/2026/q1.csv")["Body"].read()
            assert body.startswith(b"quarter")


async def _assert_ended(rt: tessera.AsyncRuntime, broker: Broker, run: tessera.AsyncRun, cap: tessera.Capability) -> None:
    """The broker's view: the run ended, its capability inactive, its token refused."""
    assert run.ended is not None
    assert (await rt.get_run(run.run_id))["state"] == "ended"
    assert await rt.introspect(cap) == {"active": False}
    async with tessera.AsyncTool(broker.addr, run.token, env={}) as tool:
        with pytest.raises(tessera.Expired) as e:
            await tool.capability("read", REPORT)
    assert e.value.code == "run_ended"


@pytest.mark.asyncio
async def test_async_run_is_ended_when_an_anyio_scope_cancels_it(broker: Broker, runtime_key: str) -> None:
    """anyio's cancellation reaches every await in the scope: the end is shielded from it."""
    import anyio

    kept: dict[str, Any] = {}
    async with tessera.AsyncRuntime(broker.addr, runtime_key) as rt:
        with anyio.move_on_after(30) as scope:
            async with rt.run(user="alice", task=TASK) as run:
                kept["cap"] = await run.tool().capability("read", REPORT)
                kept["run"] = run
                scope.cancel()  # as a deadline or a task group would
                await anyio.sleep(30)
        assert scope.cancelled_caught
        await _assert_ended(rt, broker, kept["run"], kept["cap"])


@pytest.mark.asyncio
async def test_async_run_is_ended_when_the_task_is_cancelled_again_while_ending(
    broker: Broker, runtime_key: str
) -> None:
    """asyncio: the task is cancelled, and cancelled again while its run is being ended
    (a supervisor that insists); the end still reaches the broker, then the task is cancelled."""
    import asyncio

    import httpx

    ending = asyncio.Event()

    class SlowEnd(httpx.AsyncBaseTransport):
        def __init__(self) -> None:
            self.inner = httpx.AsyncHTTPTransport()

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.path.endswith("/end"):
                ending.set()
                await asyncio.sleep(0.5)  # a slow broker: the second cancel lands here
            return await self.inner.handle_async_request(request)

        async def aclose(self) -> None:
            await self.inner.aclose()

    kept: dict[str, Any] = {}
    entered = asyncio.Event()
    async with tessera.AsyncRuntime(broker.addr, runtime_key) as rt:
        await rt._driver.client.aclose()
        rt._driver.client = httpx.AsyncClient(transport=SlowEnd(), trust_env=False, follow_redirects=False)

        async def task() -> None:
            async with rt.run(user="alice", task=TASK) as run:
                kept["cap"] = await run.tool().capability("read", REPORT)
                kept["run"] = run
                entered.set()
                await asyncio.sleep(30)

        t = asyncio.create_task(task())
        await asyncio.wait_for(entered.wait(), 30)
        t.cancel()
        await asyncio.wait_for(ending.wait(), 30)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(t, 30)
        assert t.cancelled()
        await _assert_ended(rt, broker, kept["run"], kept["cap"])
