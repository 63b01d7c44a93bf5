"""Tests that need a real component must not pass by skipping.

A test that needs something real (Debian's chromium for the dashboard, the kube-apiserver
fixture, a Prometheus server) carries the ``real_component`` marker; tests marked ``k8s`` and
tests using the ``control_plane`` fixture (tests/k8s) are counted as such too. On a developer's
machine such a test may skip, saying why. With the ``CI`` environment variable set (to anything
but empty, ``0`` or ``false``), a skip of such a test is reported as a failure, with the skip's
reason (a skip in set-up, as ``skipif`` and fixtures skip, shows as an error), so that a run
is green only when what it claims to test was tested.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

MARKER = "real_component"
ALSO_REAL = ("k8s",)  # markers that imply a real component
REAL_FIXTURES = ("control_plane",)  # fixtures that start one


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARKER}(name): needs a real component (browser, API server, Prometheus); "
        "skipping it fails the run when CI is set",
    )


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def needs_real_component(item: pytest.Item) -> bool:
    if any(item.get_closest_marker(name) is not None for name in (MARKER, *ALSO_REAL)):
        return True
    return any(f in getattr(item, "fixturenames", ()) for f in REAL_FIXTURES)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if not report.skipped or not in_ci() or not needs_real_component(item):
        return report
    if hasattr(report, "wasxfail"):  # an expected failure is not a skipped component
        return report
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else longrepr
    report.outcome = "failed"
    report.longrepr = (
        f"{item.nodeid} needs a real component and was skipped under CI "
        f"(CI={os.environ.get('CI')!r}): {reason}"
    )
    return report
