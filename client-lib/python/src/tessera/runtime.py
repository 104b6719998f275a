"""The runtime side: start a run for a user and a task, hand its token to the
tool, and end it — always — when the task is done."""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
from types import TracebackType
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping

import anyio

from ._config import (
    RUNTIME_KEY_PREFIX,
    RetryPolicy,
    check_token_shape,
    env_lookup,
    runtime_key_from_env,
    transport,
)
from ._core import AsyncDriver, SyncDriver
from ._ops import RuntimeOps, token_of
from ._secret import REDACTED, Secret, secret
from .dpop import DPoPKey
from .errors import Unavailable
from .models import AccessToken, Capability, parse_time

if TYPE_CHECKING:
    from .tool import AsyncTool, Tool

log = logging.getLogger("tessera")


class _RuntimeConfig:
    _ops: RuntimeOps

    def _configure(
        self,
        addr: str | None,
        key: str | Secret | None,
        issuer: str | None,
        ca_file: str | None,
        timeout: float,
        connect_timeout: float,
        retry: RetryPolicy | None,
        insecure_http: bool | None,
        use_proxy: bool | None,
        env: Mapping[str, str] | None,
    ) -> None:
        e = env_lookup(env)
        self._transport = transport(
            e, addr, ca_file, timeout, connect_timeout, retry, insecure_http, use_proxy, "the runtime key"
        )
        rt_key = Secret(key) if isinstance(key, str) else key
        if rt_key is None:
            rt_key = runtime_key_from_env(e)
        check_token_shape(rt_key, RUNTIME_KEY_PREFIX, "runtime key")
        self._ops = RuntimeOps(self._transport.base, issuer, rt_key)
        self._gateway = e.get("TESSERA_GATEWAY")

    @property
    def address(self) -> str:
        return self._transport.base

    def _tool_settings(self) -> dict[str, Any]:
        t = self._transport
        return {
            "addr": t.base,
            "issuer": self._ops.issuer,
            "ca_file": t.ca_file,
            "timeout": t.timeout,
            "connect_timeout": t.connect_timeout,
            "retry": t.retry,
            "insecure_http": t.insecure_http,
            "use_proxy": t.proxy is not None,
            "gateway": self._gateway,
        }

    def _end_bound(self) -> float:
        """How long ending a run may take once the caller is cancelled: one attempt."""
        t = self._transport
        return t.connect_timeout + t.timeout

    def __repr__(self) -> str:
        # getattr: a constructor that failed leaves a half-built object in its frame.
        base = getattr(getattr(self, "_transport", None), "base", None)
        return f"{type(self).__name__}(address={base!r}, key={REDACTED})"

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a Runtime holds its key and is not pickled")


class _RunBase:
    """A started run: ``run_id``, ``expires_at``, ``token`` (a :class:`Secret`:
    hand it to the tool's sandbox as a file or descriptor, never log it)."""

    def __init__(self, body: Mapping[str, Any], user: str, task: Mapping[str, Any]) -> None:
        self.run_id: str = body["run_id"]
        self.token: Secret = Secret(body["run_token"])
        self.expires_at: _dt.datetime = parse_time(body["expires_at"])  # type: ignore[assignment]
        self.user = user
        self.task = dict(task)
        self.ended: dict[str, Any] | None = None

    def __repr__(self) -> str:
        # getattr: __init__ may have failed half-way (an answer it could not read).
        expires_at = getattr(self, "expires_at", None)
        task = getattr(self, "task", None)
        return (
            f"{type(self).__name__}(run_id={getattr(self, 'run_id', None)!r}, "
            f"user={getattr(self, 'user', None)!r}, "
            f"task={task.get('id') if isinstance(task, dict) else None!r}, "
            f"expires_at={expires_at.isoformat() if expires_at is not None else None!r}, "
            f"ended={getattr(self, 'ended', None) is not None}, token={REDACTED})"
        )

    __str__ = __repr__

    def __reduce__(self) -> Any:
        raise TypeError("a Run holds its token and is not pickled")


class Run(_RunBase):
    def __init__(self, runtime: "Runtime", body: Mapping[str, Any], user: str, task: Mapping[str, Any]) -> None:
        super().__init__(body, user, task)
        self.runtime = runtime
        self._tools: dict[bool, "Tool"] = {}

    def tool(self, dpop: bool = False) -> "Tool":
        """A :class:`Tool` for this run (one per ``dpop`` setting, closed with the run)."""
        from .tool import Tool

        if dpop not in self._tools:
            self._tools[dpop] = Tool(run_token=self.token, dpop=dpop, env={}, **self.runtime._tool_settings())
        return self._tools[dpop]

    def end(self) -> dict[str, Any]:
        """Ends the run: every capability, lease and downstream credential of it is
        revoked. A repeat revokes nothing."""
        try:
            self.ended = self.runtime.end_run(self.run_id)
            return self.ended
        finally:
            for t in self._tools.values():
                t.close()
            self._tools.clear()

    def info(self) -> dict[str, Any]:
        """``GET /v1/runs/{id}``: state, capabilities and leases."""
        return self.runtime.get_run(self.run_id)

    def __enter__(self) -> "Run":
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _end_on_exit(self.end, exc, self.run_id)


class AsyncRun(_RunBase):
    def __init__(
        self, runtime: "AsyncRuntime", body: Mapping[str, Any], user: str, task: Mapping[str, Any]
    ) -> None:
        super().__init__(body, user, task)
        self.runtime = runtime
        self._tools: dict[bool, "AsyncTool"] = {}

    def tool(self, dpop: bool = False) -> "AsyncTool":
        from .tool import AsyncTool

        if dpop not in self._tools:
            self._tools[dpop] = AsyncTool(
                run_token=self.token, dpop=dpop, env={}, **self.runtime._tool_settings()
            )
        return self._tools[dpop]

    async def end(self) -> dict[str, Any]:
        try:
            self.ended = await self.runtime.end_run(self.run_id)
            return self.ended
        finally:
            for t in self._tools.values():
                await t.aclose()
            self._tools.clear()

    async def info(self) -> dict[str, Any]:
        return await self.runtime.get_run(self.run_id)

    async def __aenter__(self) -> "AsyncRun":
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Also when the block is cancelled (an anyio scope's deadline, a task group,
        # Task.cancel()): the end is shielded from the cancellation, bounded by one
        # attempt's timeouts, and the cancellation propagates once it is done.
        end_error, cancelled = await _shielded(self.end, self.runtime._end_bound())
        if cancelled and not isinstance(exc, asyncio.CancelledError):
            # Cancelled while ending (a body that had finished, or raised something
            # else): the cancellation is what propagates.
            cancellation = asyncio.CancelledError()
            if end_error is not None:
                _note(cancellation, end_error, self.run_id)
            raise cancellation from exc
        if end_error is None:
            return
        if exc is None:
            raise end_error
        _note(exc, end_error, self.run_id)


async def _shielded(end: Callable[[], Awaitable[Any]], bound: float) -> tuple[Exception | None, bool]:
    """Runs ``end()`` to completion whatever cancels the caller, for at most
    ``bound`` seconds. Returns the error it raised (or ``None``) and whether the
    caller's task was cancelled (``Task.cancel()``) meanwhile.

    ``end()`` runs in a task of its own, so a ``Task.cancel()`` of the caller does
    not reach it; the wait is in a shielded anyio scope, so the level-triggered
    cancellation of an enclosing anyio scope (``move_on_after``, a task group) does
    not either."""
    task = asyncio.ensure_future(end())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound
    cancelled = False
    with anyio.CancelScope(shield=True):
        while not task.done():
            left = deadline - loop.time()
            if left <= 0:
                break
            try:
                await asyncio.wait({task}, timeout=left)
            except asyncio.CancelledError:
                cancelled = True  # the end goes on; the cancellation is raised after it
        if not task.done():
            task.cancel()
            # Let it unwind (its connection is closed), briefly.
            while not task.done():
                try:
                    await asyncio.wait({task}, timeout=1.0)
                    break
                except asyncio.CancelledError:
                    cancelled = True
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: asyncio would log it as never retrieved
            return Unavailable(f"the run was not ended within {bound:g}s"), cancelled
    if task.cancelled():
        return Unavailable("ending the run was cancelled"), cancelled
    error = task.exception()
    if error is None:
        return None, cancelled
    if isinstance(error, Exception):
        return error, cancelled
    raise error  # KeyboardInterrupt, SystemExit: not ours to hold


def _note(exc: BaseException, end_error: Exception, run_id: str) -> None:
    # The body's exception (or the cancellation) is the one that propagates; the
    # failed end is said.
    why = "the block was cancelled" if isinstance(exc, asyncio.CancelledError) else "the body raised"
    log.error("ending run %s failed after %s: %s", run_id, why, end_error)
    if hasattr(exc, "add_note"):
        exc.add_note(f"tessera: ending run {run_id} failed too: {end_error}")


def _end_on_exit(end: Any, exc: BaseException | None, run_id: str) -> None:
    try:
        end()
    except Exception as end_error:
        if exc is None:
            raise
        _note(exc, end_error, run_id)


class Runtime(_RuntimeConfig):
    """An agent runtime's client (runtime key ``tsr_rt_…``): starts and ends runs.

    ``Runtime()`` reads ``TESSERA_ADDR`` and ``TESSERA_RUNTIME_KEY_FILE`` (mode
    0600/0400) or ``TESSERA_RUNTIME_KEY``.
    """

    def __init__(
        self,
        addr: str | None = None,
        key: str | Secret | None = None,
        *,
        issuer: str | None = None,
        ca_file: str | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        retry: RetryPolicy | None = None,
        insecure_http: bool | None = None,
        use_proxy: bool | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        # No clear key or environment in this frame's locals (tracebacks show them).
        key, env = secret(key), env_lookup(env)
        self._configure(addr, key, issuer, ca_file, timeout, connect_timeout, retry, insecure_http, use_proxy, env)
        self._driver = SyncDriver(self._transport)

    def close(self) -> None:
        self._driver.close()

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_run(
        self,
        user: str,
        task: Mapping[str, Any],
        ttl: str | None = None,
        labels: list[str] | None = None,
    ) -> Run:
        """Starts a run (``POST /v1/runs``). Prefer :meth:`run`, which ends it."""
        body = self._driver.run(self._ops.start_run(user, task, ttl, labels))
        return Run(self, body, user, task)

    def run(
        self,
        user: str,
        task: Mapping[str, Any],
        ttl: str | None = None,
        labels: list[str] | None = None,
    ) -> Run:
        """``with runtime.run(user=…, task={"id": …, "kind": …}) as run:`` — the run
        is ended when the block exits, also when it raises (that exception
        propagates)."""
        return self.start_run(user, task, ttl, labels)

    def end_run(self, run_id: str) -> dict[str, Any]:
        return self._driver.run(self._ops.end_run(run_id))

    def get_run(self, run_id: str) -> dict[str, Any]:
        return self._driver.run(self._ops.get_run(run_id))

    def introspect(
        self, token: "str | Secret | Capability | AccessToken", *, dpop_key: DPoPKey | None = None
    ) -> dict[str, Any]:
        """``POST /v1/introspect``: ``{"active": false}`` or the claims. A bound
        capability is active only with a proof of its key (``dpop_key``, e.g.
        ``run.tool(dpop=True).dpop_key``)."""
        return self._driver.run(self._ops.introspect(token_of(token), dpop_key))


class AsyncRuntime(_RuntimeConfig):
    """The async twin of :class:`Runtime`: ``async with runtime.run(...) as run:``."""

    def __init__(
        self,
        addr: str | None = None,
        key: str | Secret | None = None,
        *,
        issuer: str | None = None,
        ca_file: str | None = None,
        timeout: float = 30.0,
        connect_timeout: float = 5.0,
        retry: RetryPolicy | None = None,
        insecure_http: bool | None = None,
        use_proxy: bool | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        key, env = secret(key), env_lookup(env)
        self._configure(addr, key, issuer, ca_file, timeout, connect_timeout, retry, insecure_http, use_proxy, env)
        self._driver = AsyncDriver(self._transport)

    async def aclose(self) -> None:
        await self._driver.close()

    async def __aenter__(self) -> "AsyncRuntime":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start_run(
        self,
        user: str,
        task: Mapping[str, Any],
        ttl: str | None = None,
        labels: list[str] | None = None,
    ) -> AsyncRun:
        body = await self._driver.run(self._ops.start_run(user, task, ttl, labels))
        return AsyncRun(self, body, user, task)

    def run(
        self,
        user: str,
        task: Mapping[str, Any],
        ttl: str | None = None,
        labels: list[str] | None = None,
    ) -> "_AsyncRunContext":
        """``async with runtime.run(...) as run:`` — ended on exit, always."""
        return _AsyncRunContext(self, user, task, ttl, labels, own_runtime=False)

    async def end_run(self, run_id: str) -> dict[str, Any]:
        return await self._driver.run(self._ops.end_run(run_id))

    async def get_run(self, run_id: str) -> dict[str, Any]:
        return await self._driver.run(self._ops.get_run(run_id))

    async def introspect(
        self, token: "str | Secret | Capability | AccessToken", *, dpop_key: DPoPKey | None = None
    ) -> dict[str, Any]:
        return await self._driver.run(self._ops.introspect(token_of(token), dpop_key))


class _AsyncRunContext:
    def __init__(
        self,
        runtime: AsyncRuntime | None,
        user: str,
        task: Mapping[str, Any],
        ttl: str | None,
        labels: list[str] | None,
        own_runtime: bool,
        settings: Mapping[str, Any] | None = None,
    ) -> None:
        self._runtime = runtime
        self._args = (user, task, ttl, labels)
        self._own = own_runtime
        self._settings = dict(settings or {})
        self._run: AsyncRun | None = None

    async def __aenter__(self) -> AsyncRun:
        if self._runtime is None:
            self._runtime = AsyncRuntime(**self._settings)
        try:
            self._run = await self._runtime.start_run(*self._args)
        except BaseException:
            if self._own:
                await self._runtime.aclose()
            raise
        return self._run

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._run is not None and self._runtime is not None
        try:
            await self._run.__aexit__(exc_type, exc, tb)
        finally:
            if self._own:
                # Closed even when the block was cancelled.
                with anyio.CancelScope(shield=True):
                    await self._runtime.aclose()


class _RunContext:
    """What :func:`tessera.run` returns: ``with`` (a :class:`Runtime`) or
    ``async with`` (an :class:`AsyncRuntime`), from the environment."""

    def __init__(
        self,
        user: str,
        task: Mapping[str, Any],
        ttl: str | None,
        labels: list[str] | None,
        settings: Mapping[str, Any],
    ) -> None:
        self._args = (user, task, ttl, labels)
        self._settings = dict(settings)
        self._runtime: Runtime | None = None
        self._run: Run | None = None
        self._async: _AsyncRunContext | None = None

    def __enter__(self) -> Run:
        self._runtime = Runtime(**self._settings)
        try:
            self._run = self._runtime.start_run(*self._args)
        except BaseException:
            self._runtime.close()
            raise
        return self._run

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._run is not None and self._runtime is not None
        try:
            self._run.__exit__(exc_type, exc, tb)
        finally:
            self._runtime.close()

    async def __aenter__(self) -> AsyncRun:
        user, task, ttl, labels = self._args
        self._async = _AsyncRunContext(None, user, task, ttl, labels, own_runtime=True, settings=self._settings)
        return await self._async.__aenter__()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._async is not None
        await self._async.__aexit__(exc_type, exc, tb)


def run(
    user: str,
    task: Mapping[str, Any],
    ttl: str | None = None,
    labels: list[str] | None = None,
    **runtime_settings: Any,
) -> _RunContext:
    """A run for ``user`` and ``task`` with a runtime from the environment
    (``TESSERA_ADDR``, ``TESSERA_RUNTIME_KEY_FILE``/``TESSERA_RUNTIME_KEY``), ended
    when the block exits however it exits::

        with tessera.run(user="alice", task={"id": "t-1", "kind": "summarize"}) as run:
            tool = run.tool()

    ``async with tessera.run(...)`` works the same with an :class:`AsyncRuntime`.
    ``runtime_settings`` are :class:`Runtime`'s keyword arguments (``addr``, ``key``…).
    """
    return _RunContext(user, task, ttl, labels, runtime_settings)
