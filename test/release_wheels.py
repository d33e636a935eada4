"""A released torch_npu wheel fetched for a test of the real artifacts (shared by the host-library, real-runtime
and benchmark tests)."""
from __future__ import annotations

import pytest


def fetched(release: str) -> str:
    """``release`` with its wheel fetched and extracted (once; the wheel cache is shared). Only an unreachable
    package index skips (and .ci/test's guard list then fails the run)."""
    from torch_npu._inductor.patchset.tooling.releases import host_runtime, wheels

    try:
        host_runtime.extracted_wheel(release)
    except wheels.WheelUnavailable as exc:
        if exc.index_unreachable:
            pytest.skip(f"package index unreachable: {exc}")
        raise
    return release
