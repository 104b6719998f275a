"""pytest plugin (``-p tessera_strict``, loaded by scripts/python.sh run): a
skipped test or an xfail fails the session. Tessera's tests need the broker,
PostgreSQL and moto, and a missing one must fail them, never skip them."""

from __future__ import annotations

from typing import Any

import pytest

_skipped: list[str] = []


def pytest_runtest_logreport(report: Any) -> None:
    if report.skipped:
        _skipped.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _skipped and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _skipped:
        terminalreporter.write_line(
            f"tessera_strict: {len(_skipped)} test(s) skipped; skipping is a failure here: "
            + ", ".join(_skipped),
            red=True,
        )
