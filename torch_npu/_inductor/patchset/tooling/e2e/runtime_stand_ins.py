"""The in-process stand-ins of the end-to-end job (the child imports this file by path, after torch_npu).

Each one replaces a piece of CANN, or of the triton-ascend torch_npu 2.7.1.post10 was built for, that this
machine lacks; stand_ins.STAND_INS says what each replaces and why no value the patch set computes or
checks depends on it. Nothing here is kinder than the real thing where the patch set is concerned: the
kernels' metadata comes from the compiler stand-in through triton-ascend's own code, and every launch
of the compiled wrapper reaches the host ACL library.
"""
from __future__ import annotations

import json
import os
import types

#: Set around each ``triton.compile`` call for the compiler stand-in (compiler_stand_in.SOURCE_ENV).
SOURCE_ENV = "TORCH_NPU_PATCHSET_E2E_SOURCE"


class Missing(types.ModuleType):
    """A module the installed triton-ascend lacks: any use of it fails, naming it."""

    def __getattr__(self, attr):
        raise RuntimeError(f"version shim: {self.__name__}.{attr} was used, and the installed triton-ascend "
                           "lacks it (the end-to-end tier's stand-ins, tooling/e2e/stand_ins.py)")


class AscendIr(Missing):
    def load_dialects(self, context):
        """triton-ascend 3.2.0's ``ir.load_dialects`` already loaded every dialect it has."""


class NpuUtils:
    """triton-ascend's ``npu_utils`` extension (built at run time against CANN's headers)."""

    def get_arch(self):
        return "Ascend910B1"  # what the host ACL library's aclrtGetSocName reports

    def get_aicore_num(self):
        return 24  # Ascend910B1's cube cores

    def load_kernel_binary(self, name, kernel, shared, device, mix_mode):
        return (0, 0, 0, 0)  # no handle: the Python side never launches (CompileTimeLauncher)


class CompileTimeLauncher:
    """triton-ascend's Python launcher, for the kernels the compile-time autotune block runs: it does not
    run them (their timings only pick a config). The compiled C++ wrapper launches every kernel itself."""

    def __init__(self, src, metadata):
        self.mix_mode, self.shared = metadata.mix_mode, metadata.shared

    def __call__(self, *args, **kwargs):
        return None


def _untimed_candidates() -> bool:
    """torch_npu's autotuner times each candidate config of a kernel with NPU events around its launch, and keeps the
    fastest. No NPU runs them here (CompileTimeLauncher), so the events would time only the host's noise, and the
    candidate kept would change from run to run. Every candidate is timed 0 instead (its launch still made): torch_npu
    keeps the first, in every run. Not every candidate computes the same: docs/facts.md, "The compiled loss's kernels
    and their autotune candidates"."""
    import torch_npu._inductor.runtime.triton_heuristics as heuristics

    if not hasattr(heuristics, "_measure_prerun_ms") or not hasattr(heuristics.NPUCachingAutotuner, "bench"):
        return False

    def prerun_ms(kernel_call):
        kernel_call()
        return 0.0

    heuristics._measure_prerun_ms = prerun_ms
    heuristics.NPUCachingAutotuner.bench = lambda self, launcher, *args, **kwargs: 0.0
    return True


def _rand_strided_on_cpu(original):
    def rand_strided(size, stride, dtype=None, device="cpu", extra_size=0):
        import torch
        return original(size, stride, dtype or torch.float32, "cpu", extra_size).to(device)
    return rand_strided


def _recording_compile(original):
    """``triton.compile`` as it is, telling the compiler stand-in (through the environment its process inherits)
    which Triton function, constants and signature it compiles: the executor runs that source. Observation only."""
    def compile(src, *args, **kwargs):
        fn = getattr(getattr(src, "fn", None), "fn", None)
        if fn is None:
            return original(src, *args, **kwargs)
        os.environ[SOURCE_ENV] = json.dumps({
            "file": fn.__code__.co_filename, "function": fn.__name__, "signature": dict(src.signature),
            "constants": {k: v for k, v in src.constants.items()}}, default=repr)
        try:
            return original(src, *args, **kwargs)
        finally:
            os.environ.pop(SOURCE_ENV, None)
    return compile


def install_version_shims() -> list[str]:
    """The two names post10 imports that triton-ascend 3.2.0 lacks (also in the executor's process)."""
    import importlib.util

    import triton._C.libtriton as libtriton

    done = []
    npu_triton_helpers = None
    if importlib.util.find_spec("torch_npu._inductor.runtime.triton_helpers") is not None:
        import torch_npu._inductor.runtime.triton_helpers as npu_triton_helpers
    if npu_triton_helpers is not None and not hasattr(npu_triton_helpers, "extension"):
        npu_triton_helpers.extension = Missing("tl.extra.cann.extension")
        done.append("tl.extra.cann.extension")
    if not hasattr(libtriton.ascend, "ir"):
        libtriton.ascend.ir = AscendIr("triton._C.libtriton.ascend.ir")
        done.append("triton._C.libtriton.ascend.ir")
    return done


def install(execute: bool = False) -> list[str]:
    """Install every in-process stand-in; the names of those installed."""
    import torch._dynamo.testing as dynamo_testing
    import torch._inductor.select_algorithm as select_algorithm
    import triton
    import triton.backends
    import triton.backends.ascend.driver as driver_module

    done = []
    # triton's backend discovery loads driver.py a second time under another module name: patch both.
    for scope in (driver_module.__dict__, triton.backends.backends["ascend"].driver.__init__.__globals__):
        scope["NPUUtils"].__init__ = lambda self: setattr(self, "npu_utils_mod", NpuUtils())
        scope["NPULauncher"] = CompileTimeLauncher
    done += ["npu_utils", "compile-time launcher"]
    if _untimed_candidates():
        done.append("untimed autotune candidates")
    done += install_version_shims()
    on_cpu = _rand_strided_on_cpu(dynamo_testing.rand_strided)
    dynamo_testing.rand_strided = select_algorithm.rand_strided = on_cpu
    done.append("rand_strided on the CPU")
    if execute:
        triton.compile = _recording_compile(triton.compile)
        done.append("kernel executor")
    return done
