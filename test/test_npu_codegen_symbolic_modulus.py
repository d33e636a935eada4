"""npu-codegen-symbolic-modulus and cpp-wrapper-numel-sizes (issue 52): the loss of Flex Attention's backward test
compiled in one graph with the attention, dynamic=True, on torch_npu 2.7.1.post10.

post10's index linearization (codegen/ir.py) stops that compile: ``analyze_modular_expression`` calls
``gcd(coeff, mod)`` on a symbolic modulus (TypeError), a split reduction's size-only block size is called
unsplittable ("Can not split expression") and split into a wrong value; past those, its C++ wrapper names a
precomputed size it never declares. Here: the decision (index_split) against brute force, the probe on each
release's own source, post10's real functions before and after the patch in the end-to-end tier's child
environment (the wheel imported over the host ACL library), and the loss compiled there before and after, its
kernels run by the tier's executor and compared with eager.
"""
from __future__ import annotations

import itertools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import sympy
import torch
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from torch_npu._inductor.patchset import index_split
from torch_npu._inductor.patchset.fixes import npu_codegen_symbolic_modulus as fix

S0, S1, S2, S3 = (sympy.Symbol(f"s{i}", integer=True, positive=True) for i in range(4))
X0, R1 = (sympy.Symbol(n, integer=True, nonnegative=True) for n in ("x0", "r1"))


def every_value(expr, form, lengths, sizes) -> list:
    """Where ``form`` differs from ``expr``, for every size in ``sizes`` (dicts) and every value of the
    iteration variables in range: [] when they agree everywhere."""
    wrong = []
    for size in sizes:
        at_size = expr.xreplace(size), form.xreplace(size)
        ranges = [range(int(sympy.sympify(n).xreplace(size))) for n in lengths.values()]
        for point in itertools.product(*ranges):
            at = {v: sympy.Integer(p) for v, p in zip(lengths, point)}
            if at_size[0].xreplace(at) != at_size[1].xreplace(at):
                wrong.append({**size, **at})
    return wrong


SIZES = [{S0: a, S1: b, S2: c, S3: d} for a, b, c, d in itertools.product((1, 2, 3), (1, 3), (1, 2), (1, 5))]
SIZES = [{k: sympy.Integer(v) for k, v in size.items()} for size in SIZES]


def test_the_flex_losss_modulus_splits_exactly():
    """The index post10 stopped at with a TypeError (the loss over Flex Attention's output, split in two)."""
    expr = ModularIndexing(R1 + 128 * S0 * S2 * X0, 64 * S2, 4 * S0)
    lengths = {X0: 2, R1: 128 * S0 * S2}
    found = index_split.split(expr, lengths)
    assert found.ok, found.reason
    assert found.form == 2 * S0 * X0 + FloorDiv(R1, 64 * S2)
    assert every_value(expr, found.form, lengths, SIZES[:12]) == []


def test_a_modulus_the_terms_can_reach_is_refused_and_would_have_been_wrong():
    """A split reduction of N elements in two with a mask: r1 + x0*ceil(N/2) reaches N when N is odd, where the
    modulus wraps to 0 and a split would give N. Refused (torch_npu then keeps its 'Can not split')."""
    n = S0 * S1
    block = FloorDiv(n + 1, 2)
    expr = ModularIndexing(R1 + X0 * block, 1, n)
    lengths = {X0: 2, R1: block}
    found = index_split.split(expr, lengths)
    assert not found.ok and "can reach" in found.reason, found
    naive = R1 + X0 * block  # what a split would give
    assert every_value(expr, naive, lengths, [{S0: 3, S1: 1}])  # the refusal is needed: it differs at N = 3


def test_a_size_only_expression_is_kept_whole():
    block = FloorDiv(S0 * S1 + 5, 6)
    found = index_split.split(block, {X0: 6, R1: block})
    assert found.ok and found.form == block
    # what post10's split_expression makes of it: FloorDiv(s0*s1, 6) + FloorDiv(5, 6), wrong for s0*s1 % 6 > 1
    assert (FloorDiv(S0 * S1, 6) + FloorDiv(5, 6)).subs({S0: 2, S1: 1}) != block.subs({S0: 2, S1: 1})


@pytest.mark.parametrize("expr, lengths, ok", [
    (FloorDiv(R1 + S3 * X0, S3), {X0: 3, R1: S3}, True),  # one term not a multiple: exact, no bound needed
    (FloorDiv(R1 + 5 + S3 * X0, S3), {X0: 2, R1: S3}, False),  # two non-multiples: floors do not add
    (ModularIndexing(R1 + S3 * X0, 1, 2 * S3), {X0: 2, R1: S3}, True),
    (ModularIndexing(R1 + S3 * X0, 1, 2 * S3), {X0: 3, R1: S3}, False),  # wraps at x0 = 2
    (ModularIndexing(R1 + S3 * X0 + S1, 1, S1 + 2 * S3), {X0: 2, R1: S3}, True),  # a size-only term
    (ModularIndexing(R1 * X0 + S1, 1, 4 * S1), {X0: 2, R1: S1}, False),  # two variables in one term
])
def test_every_verdict_is_exact(expr, lengths, ok):
    found = index_split.split(expr, lengths)
    assert found.ok is ok, found
    if ok:
        assert every_value(expr, found.form, lengths, SIZES) == []


def test_a_single_term_is_left_alone():
    expr = ModularIndexing(R1, 64 * S2, 4 * S0)
    assert index_split.split(expr, {R1: 128 * S0 * S2}) == index_split.Split(True, "one term: nothing to split",
                                                                               expr)
    assert index_split.symbolic(expr, {R1: 128 * S0 * S2})
    assert not index_split.symbolic(ModularIndexing(R1 + 64 * X0, 1, 128), {R1: 64, X0: 2})  # static: upstream's


# ---- the probe, on each release's own source ------------------------------------------------------------------
#: torch_npu releases and how their analyze_modular_expression calls gcd(coeff, mod) (None: no such function).
GCD = {"2.7.1.post10": "unguarded", "2.7.1.post11": "unguarded", "2.14.0": "guarded", "2.7.1": None}


def _function_source(path: Path, name: str) -> str | None:
    import ast

    text = path.read_text()
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return ast.get_source_segment(text, node)
    return None


@pytest.mark.parametrize("release", sorted(GCD))
def test_the_probe_reads_each_releases_gcd(release):
    from release_wheels import fetched

    from torch_npu._inductor.patchset.tooling.releases import wheels

    tree = wheels.extracted_tree(fetched(release))
    source = _function_source(tree / "torch_npu/_inductor/codegen/ir.py", "analyze_modular_expression")
    if GCD[release] is None:
        assert source is None
        transform = _function_source(tree / "torch_npu/_inductor/codegen/ir.py", "transform_dims_in_indexing")
        assert transform and "analyze_expression(" not in transform  # no linearization: upstream-has-fix
        return
    assert fix.gcd_of_modulus(source) == GCD[release]
    assert fix.gcd_of_modulus(source.replace("gcd(coeff, mod)", "gcd(coeff, 1)")) == "absent"  # it can fail


# ---- post10's own code, in the end-to-end tier's child environment --------------------------------------------
RELEASE = "2.7.1.post10"
CHILD = Path(__file__).with_name("npu_codegen_symbolic_modulus_child.py")


def _child(disable: str, *args: str, timeout: float = 600) -> dict:
    """Run CHILD over post10 (the tier's child environment: the wheel over the host ACL library, triton-ascend,
    the stand-ins, the kernel executor); its JSON."""
    if not torch.__version__.startswith("2.7.1"):
        pytest.skip(f"torch_npu {RELEASE}'s Inductor code needs torch 2.7.1")
    from release_wheels import fetched

    from torch_npu._inductor.patchset.tooling.e2e import compiler_stand_in, stand_ins, tier

    fetched(RELEASE)
    with tempfile.TemporaryDirectory(prefix="symbolic-modulus-") as tmp:
        work = Path(tmp)
        env = stand_ins.child_env(RELEASE, disable=disable, work=work)
        env[compiler_stand_in.KERNELS_ENV] = json.dumps(stand_ins.KERNEL_NEEDS)
        env[compiler_stand_in.LOG_ENV] = str(work / "compiled.jsonl")
        env[compiler_stand_in.MANIFEST_ENV] = str(work / "kernels.jsonl")
        (work / "cwd").mkdir()
        spec = {"stand_ins": str(tier.RUNTIME_STAND_INS), "executor": str(tier.EXECUTOR),
                "manifest": str(work / "kernels.jsonl"), "out": str(work / "out.json")}
        proc = subprocess.run([sys.executable, str(CHILD), json.dumps(spec), *args], cwd=work / "cwd", env=env,
                              capture_output=True, text=True, timeout=timeout)
        out = Path(spec["out"])
        assert out.exists(), f"the child wrote nothing (rc {proc.returncode}): {proc.stderr[-3000:]}"
        return json.loads(out.read_text())


@pytest.fixture(scope="module")
def analysis() -> dict:
    return _child("", "analysis")


def test_post10_reads_needed_and_the_patches_apply(analysis):
    status = analysis["status"]
    assert status["npu-codegen-symbolic-modulus"][0] == "applied", status
    assert "gcd(coeff, mod) unguarded" in status["npu-codegen-symbolic-modulus"][1]
    assert status["cpp-wrapper-numel-sizes"][0] == "applied", status
    assert analysis["soc_is_ascend950"] is False  # the stand-ins are a 910B-class SoC: no SIMT fallback


def test_post10s_own_analysis_fails_where_the_patched_one_decides(analysis):
    flex, block, masked = (analysis["cases"][k] for k in ("flex-loss", "block-size", "masked-mean"))
    assert flex["upstream"] == "TypeError: 'Add' object cannot be interpreted as an integer", flex
    assert flex["patched"]["can_split"] is True and flex["split"] == "2*s0*x0 + ((r1//(64*s2)))", flex
    assert flex["split_wrong_at"] == [], flex
    assert block["upstream"]["can_split"] is False and "with no symbol" in block["upstream"]["reason"], block
    assert block["patched"]["can_split"] is True and block["split"] == block["expr"], block
    # post10's own split_expression of the same expression: FloorDiv(36, 37) folds to 0 and it fails on it
    assert block["upstream_split_1d"].startswith("ValueError: not enough values to unpack"), block
    assert masked["patched"]["can_split"] is False and "can reach" in masked["patched"]["reason"], masked


# The loss compiled end to end, before and after, is the matrix's "upstream-test" case (torch_npu's own test's job:
# the loss .float().square().mean() compiled with Flex Attention, dynamic, cpp_wrapper) and its run with this patch
# off (test_flex_matrix.py): each compiles that loss's reduction in some 300 configurations, over ten minutes here,
# so it is compiled once for both files.
