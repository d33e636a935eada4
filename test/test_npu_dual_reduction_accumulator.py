"""npu-dual-reduction-accumulator (issue 52): a reduction over two looped axes adds up every block of both.

The pure part (dual_reduction.hoist) on kernels of post10's own shape; the probe on every release's own
``codegen_body``; and post10's own Inductor, in the end-to-end tier's child environment, compiling
``x.sum(dim=(0, 2))``: every config its autotuner is given, run in Triton's interpreter on the launch's own
arguments, as shipped (the configs whose outer block is smaller than the axis store the last block's sum) and
patched (every config right).
"""
from __future__ import annotations

import ast
import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
import torch

from torch_npu._inductor.patchset import dual_reduction
from torch_npu._inductor.patchset.fixes import npu_dual_reduction_accumulator as fix

# post10's shape of the kernel (x.float().sum(dim=(0, 2)) of a bf16 [8, 3, 1000] tensor, static), abridged.
POST10 = textwrap.dedent('''
    @triton.jit
    def kernel(in_ptr0, out_ptr0, x0_numel, r2_numel, r1_numel, X0BLOCK, R2BLOCK_SUB : tl.constexpr, R1BLOCK_SUB : tl.constexpr):
        x0_offset = tl.program_id(0) * X0BLOCK
        base_r2= tl.arange(0, R2BLOCK_SUB)
        loops_r2 = (r2_numel + R2BLOCK_SUB - 1) // R2BLOCK_SUB
        base_r1= tl.arange(0, R1BLOCK_SUB)
        loops_r1 = (r1_numel + R1BLOCK_SUB - 1) // R1BLOCK_SUB
        for x0 in range(x0_offset, min(x0_offset + X0BLOCK, x0_numel)):
            for loop_r2 in range(loops_r2):
                r2 = (loop_r2 * R2BLOCK_SUB) + base_r2[:,None]
                r2_mask = r2 < r2_numel
                _tmp3 = tl.full([R2BLOCK_SUB* R1BLOCK_SUB], 0, tl.float32)
                for loop_r1 in range(loops_r1):
                    r1 = (loop_r1 * R1BLOCK_SUB) + base_r1[None,:]
                    r1_mask = r1 < r1_numel
                    tmp0 = tl.load(in_ptr0 + (r1 + 1000*x0 + 3000*r2), r1_mask & r2_mask, other=0.0).to(tl.float32)
                    tmp2 = tl.reshape(tmp0, [R2BLOCK_SUB* R1BLOCK_SUB])
                    tmp4 = _tmp3 + tmp2
                    _tmp3 = tl.where((r1_mask & r2_mask).reshape([R2BLOCK_SUB* R1BLOCK_SUB]), tmp4, _tmp3)
                tmp3 = triton_helpers.promote_to_tensor(tl.sum(_tmp3, 0))
                tl.store(out_ptr0 + (x0 + tl.arange(0,1) ), tmp3, None)
''')


def _loop(tree, axis):
    return next(n for n in ast.walk(tree) if isinstance(n, ast.For) and getattr(n.target, "id", "") == f"loop_{axis}")


def test_the_accumulator_is_set_before_the_outer_loop_and_stored_after_it():
    hoisted = dual_reduction.hoist(POST10)
    assert hoisted.moved == 3, hoisted.reason
    outer = _loop(ast.parse(hoisted.source), "r2")
    body = [ast.unparse(s) for s in outer.body]
    assert not any("_tmp3 = tl.full" in s or "tl.store" in s or "tl.sum" in s for s in body), body
    lines = hoisted.source.splitlines()
    start = lines.index("        _tmp3 = tl.full([R2BLOCK_SUB* R1BLOCK_SUB], 0, tl.float32)")
    assert lines[start + 1] == "        for loop_r2 in range(loops_r2):"  # the x0 loop's level, just before
    assert lines[-2:] == ["        tmp3 = triton_helpers.promote_to_tensor(tl.sum(_tmp3, 0))",
                          "        tl.store(out_ptr0 + (x0 + tl.arange(0,1) ), tmp3, None)"]
    # the same statements, none added or lost
    assert sorted(x.strip() for x in lines) == sorted(x.strip() for x in POST10.splitlines())
    assert dual_reduction.hoist(hoisted.source).moved == 0  # idempotent: nothing is inside any more


@pytest.mark.parametrize("change, why", [
    # a final statement that reads the outer axis: per-block by design, not an accumulator's result
    ("tl.store(out_ptr0 + (x0 + tl.arange(0,1) ), tmp3, None)", "tl.store(out_ptr0 + r2, tmp3, None)"),
    # an initialisation that depends on the outer axis
    ("_tmp3 = tl.full([R2BLOCK_SUB* R1BLOCK_SUB], 0, tl.float32)", "_tmp3 = tl.full([R2BLOCK_SUB* R1BLOCK_SUB], 0, tl.float32) + r2"),
    # one that reads what the inner loop leaves (carried from block to block)
    ("_tmp3 = tl.full([R2BLOCK_SUB* R1BLOCK_SUB], 0, tl.float32)", "_tmp3 = tl.full([R2BLOCK_SUB* R1BLOCK_SUB], 0, tl.float32) * tmp4"),
])
def test_what_it_cannot_prove_independent_of_the_outer_loop_is_left_as_written(change, why):
    source = POST10.replace(change, why)
    hoisted = dual_reduction.hoist(source)
    assert hoisted.moved == 0 and hoisted.source == source, hoisted.reason


def test_kernels_without_a_reduction_loop_inside_another_are_untouched():
    one = POST10.replace("        for loop_r2 in range(loops_r2):\n", "        if True:\n")
    assert one != POST10
    assert dual_reduction.hoist(one).moved == 0
    assert dual_reduction.hoist("def broken(:\n").reason.startswith("not Python")


# ---- the probe, on each release's own codegen_body --------------------------------------------------------------
LAYOUTS = {"2.7.1.post6": "inside", "2.7.1.post10": "inside", "2.7.1.post11": "outside", "2.14.0": "outside",
           "2.7.1": "no-outer-loop"}


def _codegen_body(release: str) -> str:
    from release_wheels import fetched

    from torch_npu._inductor.patchset.tooling.releases import wheels

    text = (wheels.extracted_tree(fetched(release)) / "torch_npu/_inductor/codegen/triton.py").read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef) and node.name == fix.CLASS:
            return next(ast.get_source_segment(text, m) for m in node.body
                        if isinstance(m, ast.FunctionDef) and m.name == "codegen_body")
    raise AssertionError(f"{release} has no {fix.CLASS}")


@pytest.mark.parametrize("release", sorted(LAYOUTS))
def test_the_probe_reads_each_releases_layout(release):
    source = _codegen_body(release)
    assert fix.layout(source) == LAYOUTS[release]
    assert fix.layout("def codegen_body(self):\n    pass\n") == "unrecognised"


def test_the_declared_layouts_are_the_probes():
    from torch_npu._inductor.patchset import _declarations

    decl = next(d for d in _declarations.load() if d.id == "npu-dual-reduction-accumulator")
    declared = {r: name for name, rs in decl.layouts for r in rs}
    for release, shape in LAYOUTS.items():
        word = {"inside": "(patched)", "outside": "before the first", "no-outer-loop": "no loop"}[shape]
        assert word in declared[release], (release, declared[release])


# ---- post10's own Inductor, every config in Triton's interpreter -----------------------------------------------
RELEASE = "2.7.1.post10"
CHILD = Path(__file__).with_name("npu_dual_reduction_child.py")


def _child(disable: str, dynamic: bool) -> dict:
    if not torch.__version__.startswith("2.7.1"):
        pytest.skip(f"torch_npu {RELEASE}'s Inductor code needs torch 2.7.1")
    from release_wheels import fetched

    from torch_npu._inductor.patchset.tooling.e2e import stand_ins, tier

    fetched(RELEASE)
    with tempfile.TemporaryDirectory(prefix="dual-reduction-") as tmp:
        work = Path(tmp)
        (work / "cwd").mkdir()
        env = stand_ins.child_env(RELEASE, disable=disable, work=work)
        spec = {"stand_ins": str(tier.RUNTIME_STAND_INS), "exact": str(Path(stand_ins.__file__).with_name("exact.py")),
                "out": str(work / "out.json"), "shape": [8, 3, 1000], "dynamic": dynamic}
        proc = subprocess.run([sys.executable, str(CHILD), json.dumps(spec)], cwd=work / "cwd", env=env,
                              capture_output=True, text=True, timeout=1200)
        out = json.loads(Path(spec["out"]).read_text()) if Path(spec["out"]).exists() else {}
        assert out.get("kernels") and "error" not in out, (out.get("traceback"), proc.stderr[-3000:])
        return out


def _only_kernel(out: dict) -> dict:
    (kernel,) = out["kernels"].values()
    assert "error" not in kernel, kernel["error"]
    assert kernel["numels"]["r2_numel"] == 8 and kernel["numels"]["r1_numel"] == 1000, kernel["numels"]
    return kernel


def test_as_shipped_every_config_with_a_smaller_outer_block_stores_a_wrong_sum():
    kernel = _only_kernel(_child("all", dynamic=False))
    results = kernel["results"]
    assert len(results) > 100, len(results)  # post10's own candidates (124 measured)
    for r in results:
        covers = r["config"]["R2BLOCK_SUB"] >= 8
        assert (r["wrong"] == 0) == covers, r
    assert "_torch_npu_patchset" not in kernel["source"]


def test_patched_every_config_stores_the_whole_sum():
    """Static shapes: the same kernel as above. The dynamic loss's two-axis reduction runs hoisted, with the first
    config, in the matrix's upstream-test and training cases (test_flex_matrix.py), compared with eager there."""
    out = _child("", dynamic=False)
    assert out["status"]["npu-dual-reduction-accumulator"][0] == "applied", out["status"]
    kernel = _only_kernel(out)
    results = kernel["results"]
    assert len(results) > 100 and all(r["wrong"] == 0 for r in results), [r for r in results if r["wrong"]][:3]
    assert any(r["config"]["R2BLOCK_SUB"] < 8 for r in results)  # the configs that were wrong ran here
    outer = _loop(ast.parse(kernel["source"]), "r2")
    assert not any("tl.store" in ast.unparse(s) for s in outer.body)
