"""The runtime (what a user's torch.compile executes) imports nothing from the tooling.

Runtime: ``torch_npu/_inductor/patchset/`` (applier, declarations, fixes, plan,
codegen, ``csrc/``). Tooling: ``torch_npu/_inductor/patchset/tooling/`` (the
host ACL simulation, wheel loader, samples, dry-run CLI, real-artifact tier).
Only the status command's developer subcommands (``--against-wheel``,
``launcher``) reach into the tooling, and only when they are run.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PATCHSET = Path(__file__).resolve().parents[1] / "torch_npu" / "_inductor" / "patchset"
TOOLING = "torch_npu._inductor.patchset.tooling"


def _imports(path: Path):
    """(module imported, line, inside a function?) for every import in `path`."""
    tree = ast.parse(path.read_text())
    package = ".".join(path.relative_to(PATCHSET.parents[2]).with_suffix("").parts[:-1])
    out = []

    def visit(node, in_function):
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name, child.lineno, in_function) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(parts + ([base] if base else []))
                out.extend((f"{base}.{a.name}" if base else a.name, child.lineno, in_function) for a in child.names)
                out.append((base, child.lineno, in_function))
            visit(child, nested)

    visit(tree, False)
    return out


def test_runtime_modules_do_not_import_the_tooling():
    runtime = [p for p in PATCHSET.rglob("*.py") if "tooling" not in p.relative_to(PATCHSET).parts]
    assert len(runtime) >= 10
    offenders = []
    for path in runtime:
        for name, line, in_function in _imports(path):
            if name.startswith(TOOLING) and not (path.name == "cli.py" and in_function):
                offenders.append(f"{path.relative_to(PATCHSET)}:{line} imports {name}")
    assert not offenders, offenders


def test_the_check_sees_a_tooling_import(tmp_path):
    """The static check can fail: a relative import of the tooling is resolved and found."""
    fake = PATCHSET / "fixes" / "_boundary_probe_tmp.py"
    fake.write_text("from ..tooling import sim_build\n")
    try:
        assert any(n.startswith(TOOLING) for n, _, _ in _imports(fake))
    finally:
        fake.unlink()


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
