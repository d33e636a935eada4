"""flex-attention-backward-symbolic-grid: the grid, the probe, the status row.

Why the reproduction enters at ``TritonTemplateKernel.call_kernel`` and not at
``torch.compile``: on a CPU-only torch 2.7.1 the Flex Attention backward
lowering has no CPU branch (``flex_attention_backward`` always builds the
Triton template), so generating and compiling its kernels needs a GPU Triton
backend; and the forward's CPU lowering (``lower_cpu``) raised
``IndexError: tuple index out of range`` for ``dynamic=True`` +
``cpp_wrapper=True`` when we tried it, before any backward exists. So the tests
build what ``TritonTemplate.generate`` builds for the scheduler (a
``TritonTemplateKernel`` with ``grid_fn=template.grid``, the template meta and
the six call sizes) inside a real ``GraphLowering`` in cpp_wrapper mode whose
wrapper is torch's ``CppWrapperGpu``, and run the real ``call_kernel``: the
assertion (unpatched) and the emitted ``call_<kernel>(grid..., stream0);``
line (patched) are torch's own. The grid arguments in that line are what
``CppWrapperGpu.prepare_triton_wrapper_args`` printed with
``cexpr(V.graph.sizevars.simplify(...))``; we compile them with g++ against
torch's ``c10/util/generic_math.h``.
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import flex_helpers as fh
import pytest
import sympy
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from torch_npu._inductor.patchset import _applier, _declarations, flex_grid
from torch_npu._inductor.patchset._patching import NEEDED, UNRECOGNISED, UPSTREAM_HAS_FIX, Patcher
from torch_npu._inductor.patchset.fixes import flex_attention_backward_symbolic_grid as fix

PATCH_ID = "flex-attention-backward-symbolic-grid"
MOD_271 = "torch._inductor.kernel.flex_attention"
REPO = Path(__file__).resolve().parents[1]

IS_271 = fh.torch_release() == (2, 7, 1)
needs_271 = pytest.mark.skipif(
    not IS_271,
    reason=f"torch {torch.__version__}: these tests need torch 2.7.1's plain-function backward grid "
    f"in {MOD_271} (newer torch ships a SymbolicGridFn; see the newer-torch tests)",
)

BLOCKS = (16, 32, 64, 128)
BLOCK_PAIRS = [(m, n) for m in BLOCKS for n in BLOCKS]
SYMBOLIC_VARIANT = len(BLOCK_PAIRS)  # index of the variant with symbolic block sizes


def _import_271():
    importlib.import_module("torch._inductor.select_algorithm")  # 2.7.1: must come first
    return importlib.import_module(MOD_271)


def _newer_template_module():
    importlib.import_module("torch._inductor.select_algorithm")
    for name in fix.TEMPLATE_MODULES[1:]:
        if importlib.util.find_spec(name.rsplit(".", 1)[0]) is not None and importlib.util.find_spec(name) is not None:
            return name, importlib.import_module(name)
    pytest.fail(f"no Flex Attention template module among {fix.TEMPLATE_MODULES[1:]} in torch {torch.__version__}")


def _triton_available() -> bool:
    try:
        import triton  # noqa: F401  (torch 2.7.1's grid imports it)
    except ImportError:
        return False
    return True


# ----------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def fa():
    if not IS_271:
        pytest.skip("torch 2.7.1 only")
    return _import_271()


@pytest.fixture
def unpatched(fa):
    """The template with torch 2.7.1's own grid (whatever autoload did), restored after."""
    original = fa.flex_attention_backward_grid
    assert callable(original) and not hasattr(original, "sympy_call"), "torch 2.7.1's grid should be a plain function"
    p = Patcher()
    p.setattr(fa.flex_attention_backward_template, "grid", original)
    yield fa.flex_attention_backward_template
    p.rollback()


@pytest.fixture
def patched(fa, unpatched):
    p = Patcher()
    note = fix.apply({MOD_271: fa}, p)
    assert p.changes == 1, note
    yield unpatched.grid
    p.rollback()


@pytest.fixture(scope="module")
def harness(fa):
    return fh.TemplateCallHarness()


@pytest.fixture(scope="module")
def emitted(fa, harness):
    """Grid C++ for every variant, emitted by call_kernel with the installed patch."""
    template = fa.flex_attention_backward_template
    p = Patcher()
    p.setattr(template, "grid", fa.flex_attention_backward_grid)
    try:
        fix.apply({MOD_271: fa}, p)
        grid = template.grid
        variants = []
        for m, n in BLOCK_PAIRS:
            variants.append((fh.CALL_SIZE_NAMES, harness.emit(grid, {"BLOCK_M2": m, "BLOCK_N1": n})))
        bm, bn = harness.blocks
        variants.append((fh.CALL_SIZE_NAMES + ("BLOCK_M2", "BLOCK_N1"), harness.emit(grid, {"BLOCK_M2": bm, "BLOCK_N1": bn})))
    finally:
        p.rollback()
    return variants


@pytest.fixture(scope="module")
def evaluator(emitted, harness, tmp_path_factory):
    names = harness.symbol_names()  # s0..s7 in CALL_SIZE_NAMES + blocks order
    variants = [(names[: len(params)], exprs) for params, exprs in emitted]
    try:
        exe = fh.compile_evaluator(tmp_path_factory.mktemp("grid_cpp"), variants)
    except FileNotFoundError as exc:
        pytest.skip(str(exc))
    except subprocess.CalledProcessError as exc:
        pytest.fail(f"g++ rejected the emitted grid C++:\n{exc.stderr}")
    ev = fh.Evaluator(exe)
    yield ev
    ev.close()


# ------------------------------------------------- reproduction, then fix


@needs_271
def test_unpatched_call_kernel_raises_cpp_wrapper_assertion(unpatched, harness):
    assert not isinstance(unpatched.grid, importlib.import_module("torch._inductor.select_algorithm").SymbolicGridFn)
    with pytest.raises(AssertionError, match="cpp_wrapper requires SymbolicGridFn"):
        harness.emit(unpatched.grid, {"BLOCK_M2": 64, "BLOCK_N1": 32})


@needs_271
def test_patched_call_kernel_emits_integer_only_cpp(patched, harness, emitted):
    sa = importlib.import_module("torch._inductor.select_algorithm")
    assert isinstance(patched, sa.SymbolicGridFn) and fix.is_ours(patched)
    exprs = harness.emit(patched, {"BLOCK_M2": 64, "BLOCK_N1": 32})
    assert exprs == emitted[BLOCK_PAIRS.index((64, 32))][1]  # what the evaluator compiled
    s = harness.symbol_names()
    b, qh, ql, _, kvh, kvl = s[:6]
    assert exprs[1] == "1"
    assert exprs[2] in (f"{b}*{kvh}", f"{kvh}*{b}")
    # head ratio and both ceil-divisions are integer divisions, nothing floating
    assert f"c10::div_floor_integer(static_cast<int64_t>({qh}), static_cast<int64_t>({kvh}))" in exprs[0]
    for _params, variant in emitted:
        text = " ".join(variant)
        for bad in ("floor(", "1.0", "double", "float", "ceil("):
            assert bad not in text.replace("div_floor_integer", ""), (bad, variant)


@needs_271
def test_emitted_cpp_matches_python_grid_on_many_shapes(fa, evaluator):
    rng = random.Random(20250107)
    lengths = [0, 1, 2, 15, 16, 17, 31, 63, 64, 65, 127, 128, 129, 1000, 4095, 4096, 4097, 32768, 100003]
    have_triton = _triton_available()
    seen_symbolic = seen_zero_grid = 0
    for _ in range(3000):
        kvh = rng.choice([1, 2, 3, 4, 8, 16])
        qh = kvh * rng.choice([1, 2, 3, 4, 7, 8])
        sizes = (rng.choice([0, 1, 2, 3, 8, 32]), qh, rng.choice(lengths), rng.choice([16, 64, 128]), kvh, rng.choice(lengths))
        variant = rng.randrange(SYMBOLIC_VARIANT + 1)
        if variant == SYMBOLIC_VARIANT:
            m, n = rng.randint(1, 300), rng.randint(1, 300)
            got = evaluator(variant, (*sizes, m, n))
        else:
            m, n = BLOCK_PAIRS[variant]
            got = evaluator(variant, sizes)
        want = fh.reference_grid(*sizes, m, n)
        assert got == want, (sizes, m, n)
        if have_triton:
            assert got == tuple(fa.flex_attention_backward_grid(*sizes, {"BLOCK_M2": m, "BLOCK_N1": n})), (sizes, m, n)
        seen_symbolic += variant == SYMBOLIC_VARIANT
        seen_zero_grid += 0 in want
    # the sample covers what matters: symbolic block sizes and empty grids (zero sizes)
    assert seen_symbolic >= 100 and seen_zero_grid >= 100, (seen_symbolic, seen_zero_grid)


@needs_271
def test_int_path_via_benchmark_args_matches_original(fa, patched, harness):
    """Inductor's int path (size hints) gives the same numbers as the original grid."""
    meta = {"BLOCK_M2": 64, "BLOCK_N1": 32}
    ours = harness.benchmark_grid(patched, meta)
    hints = (2, 8, 1000, 64, 2, 777)  # the harness's hints
    assert [int(x) for x in ours] == list(fh.reference_grid(*hints, 64, 32))
    if _triton_available():
        assert [int(x) for x in ours] == list(fa.flex_attention_backward_grid(*hints, meta))


# ------------------------------------------------------- property test


@needs_271
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    batch=st.integers(0, 64),
    kv_heads=st.integers(1, 16),
    group=st.integers(1, 8),
    q_len=st.integers(0, 1 << 20),
    kv_len=st.integers(0, 1 << 20),
    head_dim=st.sampled_from([16, 32, 64, 128, 256]),
    pair=st.sampled_from(BLOCK_PAIRS),
    free=st.tuples(st.integers(1, 512), st.integers(1, 512)),
)
def test_property_cpp_sympy_int_agree(fa, evaluator, harness, batch, kv_heads, group, q_len, kv_len, head_dim, pair, free):
    grid = fix.make_grid()
    sizes = (batch, kv_heads * group, q_len, head_dim, kv_heads, kv_len)
    values = dict(zip(harness.sizes, sizes))
    for variant, (m, n) in ((BLOCK_PAIRS.index(pair), pair), (SYMBOLIC_VARIANT, free)):
        meta = {"BLOCK_M2": m, "BLOCK_N1": n}
        want = fh.reference_grid(*sizes, m, n)
        args = sizes if variant != SYMBOLIC_VARIANT else (*sizes, m, n)
        assert evaluator(variant, args) == want  # compiled C++ from call_kernel
        assert tuple(grid(*sizes, meta)) == want  # int path
        sym_meta = meta if variant != SYMBOLIC_VARIANT else dict(zip(("BLOCK_M2", "BLOCK_N1"), harness.blocks))
        subs = {**values, **dict(zip(harness.blocks, (m, n)))}
        exprs = grid.sympy_call(*harness.sizes, sym_meta)
        assert tuple(int(sympy.sympify(e).subs(subs)) for e in exprs) == want  # sympy path
    if _triton_available():
        assert tuple(fa.flex_attention_backward_grid(*sizes, {"BLOCK_M2": pair[0], "BLOCK_N1": pair[1]})) == fh.reference_grid(*sizes, *pair)


# ---------------------------------------------------------- validation


def _grid():
    importlib.import_module("torch._inductor.select_algorithm")
    return fix.make_grid()


@pytest.mark.parametrize(
    "sizes, meta, words",
    [
        ((2, 4, 128, 64, 0, 128), {"BLOCK_M2": 64, "BLOCK_N1": 64}, ["kv_heads must be positive", "kv_heads=0", "q_heads=4"]),
        ((2, 6, 128, 64, 4, 128), {"BLOCK_M2": 64, "BLOCK_N1": 64}, ["multiple of kv_heads", "q_heads=6", "kv_heads=4"]),
        ((2, 4, 128, 64, 2, 128), {"BLOCK_M2": 0, "BLOCK_N1": 64}, ["BLOCK_M2 must be positive", "BLOCK_M2=0"]),
        ((2, 4, 128, 64, 2, 128), {"BLOCK_M2": 64, "BLOCK_N1": -16}, ["BLOCK_N1 must be positive", "BLOCK_N1=-16"]),
        ((2, 4, 128, 64, 2, 128), {"BLOCK_M2": 64}, ["meta has no BLOCK_N1"]),
        ((2, 4, 128, 64, 2, 128), {"BLOCK_M2": 64.0, "BLOCK_N1": 64}, ["BLOCK_M2 must be an integer"]),
    ],
)
@pytest.mark.parametrize("path", ["int", "sympy-concrete"])
def test_concrete_invalid_inputs_raise_clear_value_error(sizes, meta, words, path):
    grid = _grid()
    with pytest.raises(ValueError) as info:
        if path == "int":
            grid(*sizes, meta)
        else:
            grid.sympy_call(*map(sympy.Integer, sizes), meta)
    msg = str(info.value)
    assert flex_grid.TEMPLATE in msg
    for w in words:
        assert w in msg, (w, msg)


def test_symbolic_inputs_checked_where_decidable():
    grid = _grid()
    q, kv, L = sympy.symbols("q kv L", integer=True, positive=True)
    meta = {"BLOCK_M2": 64, "BLOCK_N1": 32}
    # undecidable divisibility: accepted (guarded upstream), exact FloorDiv
    x, one, z = grid.sympy_call(2, q, L, 64, kv, L, meta)
    from torch.utils._sympy.functions import FloorDiv

    assert x.has(FloorDiv(q, kv)) and one == 1 and z == 2 * kv
    with pytest.raises(ValueError, match="kv_heads must be positive"):
        grid.sympy_call(2, q, L, 64, sympy.Integer(0), L, meta)
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        grid.sympy_call(2, 2 * q + 1, L, 64, sympy.Integer(2), L, meta)
    n = sympy.Symbol("n", integer=True, nonpositive=True)
    with pytest.raises(ValueError, match="BLOCK_N1 must be positive"):
        grid.sympy_call(2, q, L, 64, kv, L, {"BLOCK_M2": 64, "BLOCK_N1": n})
    with pytest.raises(ValueError, match="kv_heads must be positive"):
        grid.sympy_call(2, q, L, 64, n, L, meta)


# ------------------------------------------------- probe / apply / applier


@needs_271
def test_probe_needed_then_apply_is_idempotent_and_rolls_back(fa, unpatched):
    modules = {MOD_271: fa}
    original = unpatched.grid
    verdict = fix.probe(modules)
    assert verdict.verdict == NEEDED and "plain function" in verdict.reason
    p1, p2 = Patcher(), Patcher()
    note = fix.apply(modules, p1)
    assert p1.changes == 1 and "flex_attention_backward_grid" in note
    installed = unpatched.grid
    assert fix.is_ours(installed)
    assert fix.probe(modules).verdict == NEEDED  # ours: nothing left to do, no upstream claim
    note2 = fix.apply(modules, p2)
    assert p2.changes == 0 and unpatched.grid is installed and "nothing changed" in note2
    p1.rollback()
    assert unpatched.grid is original


@needs_271
def test_applier_rolls_back_when_apply_fails(fa, unpatched, monkeypatch):
    decl = next(d for d in _declarations.load() if d.id == PATCH_ID)
    original = unpatched.grid
    real_apply = fix.apply

    def apply_then_fail(modules, patcher):
        real_apply(modules, patcher)
        assert fix.is_ours(unpatched.grid)
        raise RuntimeError("boom after install")

    monkeypatch.setattr(fix, "apply", apply_then_fail)
    st_ = _applier.PatchStatus(decl.id, _applier.PENDING, "", decl.hooks)
    _applier._settle(decl, st_, import_targets=True)
    assert st_.state == _applier.FAILED and "rolled back" in st_.reason
    assert unpatched.grid is original


@needs_271
def test_applier_applies_on_271(fa, unpatched):
    decl = next(d for d in _declarations.load() if d.id == PATCH_ID)
    st_ = _applier.PatchStatus(decl.id, _applier.PENDING, "", decl.hooks)
    _applier._settle(decl, st_, import_targets=True)
    assert st_.state == _applier.APPLIED, st_
    assert fix.is_ours(unpatched.grid)  # the fixture restores afterwards


@needs_271
def test_superseded_reports_a_grid_installed_after_ours(fa, patched, unpatched):
    """torch_npu 2.7.1.post11 replaces this grid with its own when its
    _inductor package is imported, possibly after our patch: status says so."""
    assert fix.superseded({MOD_271: fa}) is None
    import torch._inductor.select_algorithm as sa

    def other_grid(b, hq, m, d, hkv, n, meta, *, cdiv):
        return (1, 1, 1)

    unpatched.grid = sa.SymbolicGridFn(other_grid)
    assert fix.superseded({MOD_271: fa}).endswith("other_grid")


@needs_271
def test_probe_classifies_other_grids(fa, unpatched):
    sa = importlib.import_module("torch._inductor.select_algorithm")
    modules = {MOD_271: fa}
    p = Patcher()
    try:
        # a SymbolicGridFn from elsewhere (e.g. torch_npu post11): upstream-has-fix, left alone
        def other(b, qh, ql, d, kvh, kvl, meta, *, cdiv):
            return (cdiv(ql, meta["BLOCK_M2"]) * (qh // kvh) + cdiv(kvl, meta["BLOCK_N1"]), 1, b * kvh)

        other.__module__ = "torch_npu._inductor.kernel.flex_attention"
        foreign = sa.SymbolicGridFn(other)
        p.setattr(unpatched, "grid", foreign)
        v = fix.probe(modules)
        assert v.verdict == UPSTREAM_HAS_FIX and "torch_npu's own" in v.reason and "torch_npu" in v.reason
        q = Patcher()
        assert "nothing changed" in fix.apply(modules, q) and q.changes == 0 and unpatched.grid is foreign
        # a plain grid with another formula/layout: unrecognised, never replaced
        p.setattr(unpatched, "grid", lambda b, qh, ql, d, kvh, kvl, meta: (1, b, kvh))
        assert fix.probe(modules).verdict == UNRECOGNISED
        p.setattr(unpatched, "grid", lambda b, qh, ql, d, meta: (1, 1, 1))
        v = fix.probe(modules)
        assert v.verdict == UNRECOGNISED and "5 positional" in v.reason
        p.setattr(unpatched, "grid", 42)
        assert fix.probe(modules).verdict == UNRECOGNISED
    finally:
        p.rollback()
    assert fix.probe({"some.module": object()}).verdict == UNRECOGNISED


# ----------------------------------------------------------- newer torch


@pytest.mark.skipif(IS_271, reason="torch 2.7.1 needs the patch; this checks newer torch")
def test_newer_torch_grid_left_alone():
    name, module = _newer_template_module()
    template = module.flex_attention_backward_template
    before = template.grid
    sa = importlib.import_module("torch._inductor.select_algorithm")
    assert isinstance(before, sa.SymbolicGridFn)
    v = fix.probe({name: module})
    assert v.verdict == UPSTREAM_HAS_FIX and "torch's own" in v.reason
    p = Patcher()
    fix.apply({name: module}, p)
    assert p.changes == 0 and template.grid is before
    # our split-layout grid (used by the example's --force-patch) agrees with torch's
    assert flex_grid.matching_layout(before) == flex_grid.LAYOUT_SPLIT


def test_status_command_reports_this_patch():
    env = {k: v for k, v in os.environ.items() if k != "TORCH_NPU_PATCHSET_DISABLE"}
    out = subprocess.run(
        [sys.executable, "-m", "torch_npu._inductor.patchset", "status", "--json"],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    row = next(r for r in json.loads(out.stdout)["patches"] if r["id"] == PATCH_ID)
    if IS_271:
        assert row["state"] == "applied", row
        assert "SymbolicGridFn" in row["note"]
        return
    assert row["state"] == "upstream-has-fix", row
    assert "torch's own" in row["reason"], row
    assert row["targets"] == [f"{fix.TEMPLATE_MODULES[1]}:flex_attention_backward_template.grid"], row


def test_example_explains_itself_without_accelerator():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present; the CPU-only message is not expected")
    out = subprocess.run(
        [sys.executable, str(REPO / "examples" / "flex_attention_cpp_wrapper.py"), "--quick"],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert "no CUDA or NPU device" in out.stdout
