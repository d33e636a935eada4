"""Suite-wide guard: named test files must have run; and what a test asks to show in CI's log.

``.ci/test`` (the 2.7.1 leg, whole suite) lists in ``TORCH_NPU_PATCHSET_MUST_RUN`` the files that
guard the real artifacts (the simulation's surface against the wheels' exports, the launchers
linked against the real ``libtorch_npu.so``, the upstream patch proved on torch_npu's branches, the
released wheels imported over the host ACL library). A guard whose every test skipped (no wheels, no
compiler, not collected) protects nothing, so the run then fails, naming the file and why its tests
skipped, instead of staying green.

A test's ``record_property(LOG_PROPERTY, text)`` is printed in the run's summary ("shown by the tests"): the
controller of pytest-xdist receives each report's properties, where a worker's own output is not shown.
"""
from __future__ import annotations

import os

import pytest

MUST_RUN_ENV = "TORCH_NPU_PATCHSET_MUST_RUN"

LOG_PROPERTY = "ci_log"

_passed: dict[str, int] = {}
_skip_reasons: dict[str, list[str]] = {}
_shown: list[tuple[str, str]] = []


def must_run() -> list[str]:
    return os.environ.get(MUST_RUN_ENV, "").split()


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def pytest_runtest_logreport(report):
    path = _file_of(report.nodeid)
    if report.when == "call":
        _shown.extend((report.nodeid, str(v)) for k, v in report.user_properties if k == LOG_PROPERTY)
    if report.when == "call" and report.passed:
        _passed[path] = _passed.get(path, 0) + 1
    elif report.skipped:
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _skip_reasons.setdefault(path, []).append(str(reason))


def not_run() -> dict[str, str]:
    """``{file: why}`` for every must-run file none of whose tests passed."""
    out = {}
    for path in must_run():
        if not _passed.get(path):
            reasons = sorted(set(_skip_reasons.get(path, [])))
            out[path] = "; ".join(reasons[:3]) if reasons else "no test of it ran (not collected, or it failed)"
    return out


def _xdist_worker(config) -> bool:
    """A pytest-xdist worker sees only its share of the tests; the controller sees every report."""
    return hasattr(config, "workerinput")


def pytest_sessionfinish(session, exitstatus):
    if _xdist_worker(session.config):
        return
    if not_run() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if _xdist_worker(config):
        return
    if _shown:
        terminalreporter.section("shown by the tests")
        for nodeid, text in _shown:
            terminalreporter.line(f"{nodeid}:\n{text}")
    missing = not_run()
    if missing:
        terminalreporter.section(f"guards that did not run ({MUST_RUN_ENV})", red=True)
        for path, why in missing.items():
            terminalreporter.line(f"{path}: no test passed: {why}", red=True)
