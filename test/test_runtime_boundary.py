"""Applying the patch set (what a user's torch.compile executes) loads no tooling module.

Runtime: ``torch_npu/_inductor/patchset/`` outside ``tooling/`` (applier, declarations, fixes, plan,
codegen, ``csrc/``, the CLI and the selftest). Tooling: ``torch_npu/_inductor/patchset/tooling/``. What
the runtime may import from the tooling, read from the source: ``test_tooling_imports.py``.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

TOOLING = "torch_npu._inductor.patchset.tooling"


_APPLY_AND_LIST = r"""
import json, sys
before = set(sys.modules)
if sys.argv[1] != "-":  # a released torch_npu's Inductor code, behind the tooling's stand-ins
    from torch_npu._inductor.patchset.tooling.releases import wheels as upstream_wheels
    upstream_wheels.load(sys.argv[1])
    before = set(sys.modules)
import torch
import torch_npu._inductor.patchset as patchset
rows = patchset.apply()
import torch._inductor.lowering  # torch's Flex template module too
new = sorted(m for m in set(sys.modules) - before if m.startswith("torch_npu._inductor.patchset"))
print(json.dumps({"rows": {r.id: r.state for r in rows}, "loaded": new}))
"""


@pytest.mark.parametrize("wheel", ["-", "2.7.1.post10"])
def test_applying_loads_no_tooling_module(wheel):
    if wheel != "-":
        import torch

        if not torch.__version__.startswith("2.7."):
            pytest.skip(f"torch_npu {wheel}'s code runs on torch 2.7 only; this is torch {torch.__version__}")
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run([sys.executable, "-c", _APPLY_AND_LIST, wheel], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "torch_npu._inductor.patchset._applier" in result["loaded"], result
    if wheel != "-":  # the launch fixes really ran
        assert result["rows"]["cpp-wrapper-sync-resources"] == "applied", result
        assert "torch_npu._inductor.patchset.fixes.cpp_wrapper_sync_resources" in result["loaded"]
    tooling = [m for m in result["loaded"] if m.startswith(TOOLING)]
    assert not tooling, f"applying the patch set imported tooling modules: {tooling}"
