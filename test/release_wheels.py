"""A released torch_npu wheel fetched for a test of the real artifacts (shared by the host-library, real-runtime
and benchmark tests)."""
from __future__ import annotations

import importlib.metadata

import pytest

#: The CI leg: this interpreter's torch, X.Y.Z.
LEG = ".".join(importlib.metadata.version("torch").split("+")[0].split(".")[:3])
#: The releases whose own runtime runs here, per leg, each on its own torch line (host_runtime.python_for): on the
#: 2.14.1 leg, 2.13.0 on torch 2.13.0+cpu, the newest line that runs here; 2.14.0 cannot (no CPU build of torch
#: 2.14.0 here, and torch_npu's import aborts over the CUDA build).
RUNTIME_RELEASES = {"2.7.1": ("2.7.1.post6", "2.7.1.post10", "2.7.1.post11"), "2.14.1": ("2.13.0",)}
#: Every release of :data:`RUNTIME_RELEASES`, whichever leg.
RUNS_HERE = tuple(r for rs in RUNTIME_RELEASES.values() for r in rs)


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
