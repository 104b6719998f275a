"""pytest plugin (``-p tessera_strict``, loaded by scripts/python.sh run): a
skipped test, an xfail or a skipped module fails the session. Tessera's tests need
the broker, PostgreSQL and moto, and a missing one must fail them, never skip them.

A skip can come at two moments: running a test (``pytest.skip()``, a skip mark, an
xfail), reported by ``pytest_runtest_logreport``; and collecting a module
(``pytest.importorskip`` or ``pytest.skip(allow_module_level=True)`` at module
level), reported by ``pytest_collectreport`` only — pytest then counts no test and
exits 0. Both are counted, and the terminal reporter's own tally of skips is checked
too, in case a skip reaches it some other way.
"""

from __future__ import annotations

from typing import Any

import pytest

_skipped: list[str] = []


def _record(report: Any) -> None:
    if report.skipped:
        where = report.nodeid or getattr(report, "fspath", "") or "?"
        _skipped.append(str(where))


def pytest_runtest_logreport(report: Any) -> None:
    _record(report)


def pytest_collectreport(report: Any) -> None:
    _record(report)


def _reporter_skips(reporter: Any) -> int:
    stats = getattr(reporter, "stats", None) or {}
    return sum(len(stats.get(kind, [])) for kind in ("skipped", "xfailed", "xpassed"))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if (_skipped or _reporter_skips(reporter)) and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter: Any) -> None:
    count = max(len(_skipped), _reporter_skips(terminalreporter))
    if count:
        terminalreporter.write_line(
            f"tessera_strict: {count} test(s) or module(s) skipped or xfailed; skipping is a failure here: "
            + ", ".join(_skipped),
            red=True,
        )
