"""The kernel executor computes exactly or refuses (issue 48; tooling/e2e/exact.py).

triton-ascend 3.2.0's interpreter, as the executor runs it (exact.install, then exact.guard on its builder), on CPU
tensors in a child with triton-ascend and ml_dtypes on the path (the tier's own folders, stand_ins.child_env's
order): 16-bit kernels come out as torch computes them (16-bit storage, float32 arithmetic rounded to the 16-bit
type at each operation the kernel types as 16-bit, dots accumulated in float32), and a kernel with an operation,
a type or an argument it cannot compute exactly is refused, naming it. As shipped, the same bf16 kernel runs
"fine" and is wrong: the defect the whitelist and the typing fix exist for.
"""
from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from torch_npu._inductor.patchset.tooling.e2e import stand_ins

EXACT = Path(stand_ins.__file__).with_name("exact.py")
pytestmark = pytest.mark.skipif(not torch.__version__.startswith("2.7.1"),
                                reason="the end-to-end tier's triton-ascend runs on the 2.7.1 leg")

SCRIPT = textwrap.dedent('''
    import importlib.util, json, sys
    import numpy as np
    import torch
    import triton
    import triton.language as tl
    from triton.runtime import interpreter

    spec = importlib.util.spec_from_file_location("exact", sys.argv[1])
    exact = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(exact)
    if sys.argv[2] == "exact":
        exact.install(interpreter)
        exact.guard(interpreter.interpreter_builder)
    patch = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor):  # NumPy 2 and one-element arrays, as executor.py does
        patch(tensor)
        tensor.__index__ = lambda t: int(t.handle.data.reshape(-1)[0])
    interpreter._patch_lang_tensor = patch_lang_tensor

    @triton.jit
    def attention_like(X, Y, W, O, M, N: tl.constexpr):
        r = tl.arange(0, N)
        tile = r[:, None] * N + r[None, :]
        x, y, w = tl.load(X + tile), tl.load(Y + tile), tl.load(W + tile)
        s = x * 0.125 + y  # 16-bit operations: each rounded to the 16-bit type
        acc = tl.dot(s, w)  # float32 accumulation
        m = tl.max(acc, 1)
        p = tl.exp2(acc - m[:, None])
        tl.store(O + tile, (p / tl.sum(p, 1)[:, None]).to(O.dtype.element_ty))
        tl.store(M + r, m)

    @triton.jit
    def add(X, Y, O, N: tl.constexpr):
        r = tl.arange(0, N)
        tl.store(O + r, tl.load(X + r) + tl.load(Y + r))

    @triton.jit
    def float_remainder(X, O, N: tl.constexpr):
        r = tl.arange(0, N)
        tl.store(O + r, tl.load(X + r) % 3.0)

    @triton.jit
    def atomic(X, O, N: tl.constexpr):
        r = tl.arange(0, N)
        tl.atomic_add(O + r, tl.load(X + r))

    @triton.jit
    def to_fp8(X, O, N: tl.constexpr):
        r = tl.arange(0, N)
        tl.store(O + r, tl.load(X + r).to(tl.float8e5).to(tl.float32))

    @triton.jit
    def half_sum(X, O, N: tl.constexpr):
        r = tl.arange(0, N)
        tl.store(O, tl.sum(tl.load(X + r), 0))

    def outcome(fn, *args):
        try:
            fn[(1,)](*args)
            return "ran"
        except Exception as exc:
            while exc.__cause__ is not None:  # the interpreter wraps each jit call's error: its root
                exc = exc.__cause__
            return f"{type(exc).__name__}: {exc}"

    @triton.jit
    def int1_ops(X, K, I, U, B, O, F, R, n, N: tl.constexpr):
        r = tl.arange(0, N)
        inside = r < n  # a compare: int1
        keep = tl.load(K + r).to(tl.int1)  # a bool tensor: loaded as int8, then != 0
        x = tl.load(X + r, mask=inside, other=-2.5)  # a masked load with other
        tl.store(O + r, tl.where(inside & keep, x, float("-inf")))  # a select on int1
        rows = (inside & keep, inside | keep, inside ^ keep, ~keep, inside + keep, inside - keep, -keep,
                inside * keep, tl.where(inside, keep, False), inside == keep, inside != keep, inside < keep,
                inside >= keep, tl.load(X + r).to(tl.int1), tl.load(I + r).to(tl.int1), tl.cumsum(keep, 0))
        for j in tl.static_range(len(rows)):
            tl.store(B + j * N + r, rows[j])
        tl.store(F + r, keep.to(tl.float32))  # int1 casts
        tl.store(F + N + r, keep.to(tl.bfloat16).to(tl.float32))
        tl.store(F + 2 * N + r, tl.load(I + r).to(tl.int8).to(tl.float32))  # integer casts: truncation, extension
        tl.store(F + 3 * N + r, tl.load(I + r).to(tl.uint8).to(tl.int32).to(tl.float32))
        tl.store(F + 4 * N + r, (~tl.load(U + r)).to(tl.float32))  # all ones of uint8
        tl.store(R, tl.sum(keep, 0).to(tl.int32))  # reductions: int1's sum is its parity, int32's wraps
        tl.store(R + 1, tl.sum(tl.load(I + r), 0))
        tl.store(R + 2 + r, tl.cumsum(tl.load(I + r), 0))

    @triton.jit
    def int1_division(K, O, N: tl.constexpr):
        r = tl.arange(0, N)
        keep = tl.load(K + r).to(tl.int1)
        tl.store(O + r, keep // keep)

    def int1_case():
        # NumPy arrays kept out of the module's globals: the interpreter compares each global with triton.language
        n, size = 11, 16
        g = np.random.default_rng(0)
        x = g.standard_normal(size).astype(np.float32)
        x[3], x[5], x[6] = np.nan, 0.0, -0.0  # float to int1 is != 0: NaN is true, -0.0 false
        k = np.array([1, 0, 1, 1, 0, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1], dtype=bool)  # ten: an even count
        i = np.array([2, 0, -1, 256, 2**31 - 1, 2**31 - 1, 7, -256, 1, 3, 0, 5, 9, -129, 2**30, 2**30], np.int32)
        u = (np.arange(size) * 17).astype(np.uint8)
        bits = torch.zeros(16, size, dtype=torch.bool)
        out, floats, ints = torch.zeros(size), torch.zeros(5, size), torch.zeros(2 + size, dtype=torch.int32)
        ran = outcome(int1_ops, *(torch.from_numpy(a) for a in (x, k, i, u)), bits, out, floats, ints, n, size)
        inside = np.arange(size) < n
        want_bits = [inside & k, inside | k, inside ^ k, ~k, inside ^ k, inside ^ k, k, inside & k,
                     np.where(inside, k, False), inside == k, inside != k, ~inside & k, inside | ~k, x != 0, i != 0,
                     np.bitwise_xor.accumulate(k)]
        want_out = np.where(inside & k, np.where(inside, x, np.float32(-2.5)), np.float32(-np.inf))
        want_floats = [k.astype(np.float32), k.astype(np.float32), i.astype(np.int8).astype(np.float32),
                       i.astype(np.uint8).astype(np.float32), (~u).astype(np.float32)]
        want_ints = [int(np.bitwise_xor.reduce(k)), int(np.sum(i, dtype=np.int32)), *np.cumsum(i, dtype=np.int32)]
        return {"outcome": ran,
                "bits": [j for j, w in enumerate(want_bits) if (bits[j].numpy() != w).any()],
                "out": bool((out.numpy().view(np.uint32) == want_out.view(np.uint32)).all()),
                "floats": [j for j, w in enumerate(want_floats) if (floats[j].numpy() != w).any()],
                "ints": ints.tolist() == [int(v) for v in want_ints],
                "division": outcome(int1_division, torch.from_numpy(k), torch.zeros(size, dtype=torch.bool), size)}

    def signedness():
        # the IR's signed and unsigned operations, whatever the NumPy type of the values (the front end makes them to
        # match, and never a signed one for int1, its int1 being unsigned): an int1 true reads -1 signed
        B, TH = interpreter.interpreter_builder, interpreter.TensorHandle
        t, f = TH(np.array([True]), tl.int1), TH(np.array([False]), tl.int1)
        u8, i32 = TH(np.array([255, 0], np.uint8), tl.uint8), TH(np.array([-1, 1], np.int32), tl.int32)
        return {"slt": B.create_icmpSLT(t, f).data.tolist(), "minsi": B.create_minsi(t, f).data.tolist(),
                "maxsi": B.create_maxsi(t, f).data.tolist(), "maxui": B.create_maxui(t, f).data.tolist(),
                "si_to_fp": B.create_si_to_fp(t, tl.float32).data.tolist(),
                "sext": B.create_int_cast(t, tl.int32, True).data.tolist(),
                "zext": B.create_int_cast(t, tl.int32, False).data.tolist(),
                "trunc": B.create_int_cast(TH(np.array([2, 3], np.int32), tl.int32), tl.int1, False).data.tolist(),
                "slt_u8": B.create_icmpSLT(u8, TH(np.array([0, 0], np.uint8), tl.uint8)).data.tolist(),
                "ult_i32": B.create_icmpULT(i32, TH(np.array([0, 0], np.int32), tl.int32)).data.tolist(),
                "maxui_i32": B.create_maxui(i32, TH(np.array([1, -1], np.int32), tl.int32)).data.tolist(),
                "sext_u8": B.create_int_cast(u8, tl.int32, True).data.tolist(),
                "ui_to_fp_i32": B.create_ui_to_fp(i32, tl.float64).data.tolist()}

    torch.manual_seed(0)
    out = {}
    for name in ("bfloat16", "float16", "float32"):
        dt, n = getattr(torch, name), 32
        x, y, w = (torch.randn(n, n).to(dt) for _ in range(3))
        o, m = torch.empty(n, n, dtype=dt), torch.empty(n)
        got = outcome(attention_like, x, y, w, o, m, n)
        s = x * 0.125 + y  # torch: each 16-bit operation in float32, rounded to the type
        acc = s.float() @ w.float()
        ref_m = acc.max(1).values
        p = torch.exp2(acc - ref_m[:, None])
        ref = (p / p.sum(1, keepdim=True)).to(dt)
        out[name] = {"outcome": got, "out": (o.float() - ref.float()).abs().max().item() if got == "ran" else None,
                     "max": (m - ref_m).abs().max().item() if got == "ran" else None}
    a, b = torch.tensor([1.5, -2.25, 3.0]).bfloat16(), torch.tensor([0.25, 4.0, -1.0]).bfloat16()
    o = torch.empty(3, dtype=torch.bfloat16)
    out["bf16_add"] = {"outcome": outcome(add, a, b, o, 3), "got": o.float().tolist(), "want": (a + b).float().tolist()}
    x16 = torch.randn(16)
    out["refused"] = {"frem": outcome(float_remainder, x16, torch.empty(16), 16),
                      "atomic": outcome(atomic, x16, torch.zeros(16), 16),
                      "fp8": outcome(to_fp8, x16, torch.empty(16), 16),
                      "fp16_sum": outcome(half_sum, x16.half(), torch.empty(1, dtype=torch.half), 16)}
    if sys.argv[2] == "exact":
        out["int1"], out["signedness"] = int1_case(), signedness()
    print(json.dumps(out))
''')


@functools.lru_cache(maxsize=None)  # one child per mode: each test reads its part
def _run(mode: str) -> dict:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(
        [str(stand_ins.triton_ascend_dir()), str(stand_ins.executor_deps_dir()), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(EXACT), mode], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.splitlines()[-1])


def test_16_bit_kernels_compute_as_torch_does_and_float32_as_ieee():
    out = _run("exact")
    for name in ("bfloat16", "float16"):  # the same roundings as torch's: bit for bit, but for the dot's order
        assert out[name]["outcome"] == "ran", out[name]
        assert out[name]["out"] <= 2 ** -8 and out[name]["max"] < 1e-5, out[name]
    assert out["float32"]["outcome"] == "ran" and out["float32"]["out"] < 1e-6 and out["float32"]["max"] < 1e-5
    assert out["bf16_add"] == {"outcome": "ran", "got": [1.75, 1.75, 2.0], "want": [1.75, 1.75, 2.0]}


def test_what_it_cannot_compute_exactly_is_refused_by_name():
    refused = _run("exact")["refused"]
    assert refused["frem"].startswith("NotExact: operation create_mod"), refused  # an operation it lacks
    assert refused["atomic"].startswith("NotExact: operation create_atomic_rmw"), refused
    assert refused["fp8"].startswith("NotExact: operation get_fp8e5_ty"), refused  # a type it does not compute
    assert refused["fp16_sum"].startswith("NotExact: a reduction of fp16 by _sum_combine"), refused


def test_int1_masks_selects_casts_and_reductions_compute_as_the_ir_says():
    """What the masked Flex kernels (IS_DIVISIBLE false) reach on int1, and its neighbours, bit for bit against NumPy:
    compares, a bool tensor loaded, a masked load with other, selects on int1 and of int1 values, &, |, ^, ~ (all
    ones), + and - (modulo 2: xor), *, int1 casts to float, bf16 and from float and int (!= 0), integer truncation
    and extension, ~ of uint8, int1's sum (parity) and cumsum, an int32 sum and cumsum (wrapping)."""
    got = _run("exact")["int1"]
    assert got["outcome"] == "ran", got
    assert got["bits"] == [] and got["out"] and got["floats"] == [] and got["ints"], got
    assert got["division"].startswith("NotExact: operation create_udiv on int1"), got


def test_signed_and_unsigned_operations_read_the_bits_as_the_ir_does():
    """An int1 true is -1 to the signed operations (the front end's int1 is unsigned and never asks them), trunc to
    int1 keeps the low bit, and a signed or unsigned operation reads any integer's bits as it says."""
    assert _run("exact")["signedness"] == {
        "slt": [True], "minsi": [True], "maxsi": [False], "maxui": [True], "si_to_fp": [-1.0], "sext": [-1],
        "zext": [1], "trunc": [False, True], "slt_u8": [True, False], "ult_i32": [False, False], "maxui_i32": [-1, -1],
        "sext_u8": [-1, 0], "ui_to_fp_i32": [4294967295.0, 1.0]}


def test_as_shipped_the_interpreter_adds_bf16_bit_patterns_and_says_nothing():
    """The defect the issue measured (a bf16 job off by 8e8, "ok"): the interpreter keeps bf16 as uint16."""
    add = _run("as-shipped")["bf16_add"]
    assert add["outcome"] == "ran" and add["got"] != add["want"], add


def test_a_refused_launch_makes_the_case_refused_whatever_its_numbers_say():
    """matrix.verdict: a launch the executor did not run (its error carried to the host ACL library's executions)
    makes the case "refused", named, even when every comparison happened to pass; a clean run is "ran"."""
    from torch_npu._inductor.patchset.tooling.e2e import matrix

    close = {"max_abs": 1e-3, "max_ref": 2.0, "max_rel": 1e-3, "finite": True, "close": True}
    run = {"seq_len": 384, "kv_len": 384, "forward": "ok", "backward": "ok", "errors": {"out": close}}
    ok = {"case": "bfloat16", "done": True, "compiles": 1, "runs": [run],
          "host": {"errors": [], "executions": [{"name": "triton_tem_fused_0", "ok": True, "error": ""}]}}
    assert matrix.verdict(ok)["outcome"] == "ran"
    error = "InterpreterError: NotExact('operation create_mod: not on the executor's list')"
    refused = {**ok, "host": {"errors": [], "executions": [{"name": "triton_tem_fused_0", "ok": False, "error": error}]}}
    v = matrix.verdict(refused)
    assert v["outcome"] == "refused" and "triton_tem_fused_0" in v["what"] and "create_mod" in v["what"], v
    assert matrix.line(v).startswith("bfloat16 ") and "384x384: refused: triton_tem_fused_0" in matrix.line(v), v


def test_the_arena_is_found_while_the_job_closes_other_descriptors(monkeypatch):
    """The job's threads open and close files while the executor looks for its arena descriptor: a descriptor
    listed and closed before it is read is skipped, not a refused launch (CI stop 56 refused q-ne-kv for it)."""
    from torch_npu._inductor.patchset.tooling.e2e import executor
    arena = os.memfd_create("acl_sim_device")
    other = os.open(os.devnull, os.O_RDONLY)
    listdir = os.listdir

    def listed_then_closed(path):
        names = listdir(path)
        os.close(other)  # another thread of the job closes it after the listing
        return sorted(names, key=lambda n: n != str(other))  # and it is the first one read

    monkeypatch.setattr(executor.os, "listdir", listed_then_closed)
    try:
        fd = executor._open_arena(os.getpid())
        assert os.readlink(f"/proc/self/fd/{fd}") == executor.ARENA
        os.close(fd)
    finally:
        os.close(arena)
