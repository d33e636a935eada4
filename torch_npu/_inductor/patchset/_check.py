"""A selftest check's outcome: passed, failed (with what differed) or skipped (with why).

Apart from ``selftest.py`` so that the checks the tooling contributes (``tooling/commands/selftest_launchers.py``)
report the same way without importing the command.
"""
from __future__ import annotations

import dataclasses
import time
import traceback
from typing import Callable

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclasses.dataclass
class Check:
    name: str
    status: str
    detail: str
    data: dict = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


class CheckFailed(AssertionError):
    """A check ran and found something wrong (the message says what differed)."""


class CheckSkipped(Exception):
    """A check cannot run here (the message says why)."""


def run_check(name: str, fn: Callable[[], tuple[str, dict]]) -> Check:
    t0 = time.monotonic()
    try:
        detail, data = fn()
        status = PASSED
    except CheckSkipped as exc:
        status, detail, data = SKIPPED, str(exc), {}
    except CheckFailed as exc:
        status, detail, data = FAILED, str(exc), {}
    except Exception as exc:  # a crash is a failure, with where it happened
        tb = traceback.format_exc().strip().splitlines()
        status, detail, data = FAILED, f"{type(exc).__name__}: {exc}", {"traceback": tb[-12:]}
    return Check(name, status, detail, data, round(time.monotonic() - t0, 1))
