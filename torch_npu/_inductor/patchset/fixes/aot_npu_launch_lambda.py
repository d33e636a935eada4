"""aot-npu-launch-lambda: AOTInductor launches stay torch_npu's own launch lambda.

torch_npu 2.13.0 / 2.14.0 (and master) run torch's ``DeferredTritonCallWrapper.generate``
under ``config.patch("triton.autotune_at_compile_time", not V.graph.aot_mode)`` ("todo:
support lazy compile for cpp_wrapper_npu"). torch 2.13 takes its lazy-compile path only
outside aot_mode, so that setting changes nothing there. torch 2.14 takes it whenever the
setting is False, aot_mode included: an AOTInductor model then gets torch's lazy launch
(``launchKernel(kernels_.<kernel>, grid, num_warps, shared_mem, kernel_args_, stream_)``),
for which torch_npu has no runtime, whose argument array has no workspace or lock slot, and
into which torch_npu's ``generate_args_decl`` writes statements (docs/facts.md).

This patch gives ``DeferredNpuTritonCallWrapper`` its own ``generate_lazy``: in aot_mode it
runs torch's eager ``generate`` instead (the path JIT mode takes: torch_npu's grid, load and
launch code, i.e. its launch lambda, which cpp-wrapper-sync-resources gives its memory);
outside aot_mode it is torch's ``generate_lazy`` unchanged. The probe applies it only where
torch_npu turns the setting off in aot_mode AND torch's ``generate`` goes lazy without an
aot_mode guard; elsewhere aot_mode launches already are torch_npu's lambda
(``upstream-has-fix``, saying why).
"""
from __future__ import annotations

import functools
import re

from .._patching import Probe, source_of
from ._shared import needs_applying, probe_of_shape

MODULE = "torch_npu._inductor.codegen.cpp_wrapper_npu"
#: The older layout's module (codegen/cpp_wrapper.py), on torch lines without a lazy path.
OLDER_MODULE = "torch_npu._inductor.codegen.cpp_wrapper"
CLASS = "DeferredNpuTritonCallWrapper"
_MARK = "__torch_npu_patchset_aot_launch_lambda__"

#: torch's generate: ``if <condition>autotune_at_compile_time is False: return self.generate_lazy(...)``.
_LAZY = re.compile(r"if\s+(?P<cond>[^\n]*?)autotune_at_compile_time\s+is\s+False\s*:\s*\n\s*return\s+self\.generate_lazy\(")
#: torch_npu's generate: the setting turned off exactly in aot_mode; or kept on (the upstream form of this fix).
_OFF_IN_AOT = re.compile(r"config\.patch\(\s*[\"']triton\.autotune_at_compile_time[\"']\s*,\s*not\s+V\.graph\.aot_mode\s*\)")
_ON = re.compile(r"config\.patch\(\s*[\"']triton\.autotune_at_compile_time[\"']\s*,\s*True\s*\)")


def _classes(modules):
    mod = modules[MODULE] if MODULE in modules else modules[OLDER_MODULE]
    cls = getattr(mod, CLASS, None)
    base = next((c for c in getattr(cls, "__mro__", ())[1:] if "generate" in vars(c)), None)
    return mod, cls, base


def classify(torch_generate_src: str, npu_generate_src: str | None) -> tuple[str, str]:
    """(shape, why) from the source of torch's ``DeferredTritonCallWrapper.generate`` and of
    torch_npu's own ``generate`` (None: it has none). Pure: the tests feed it released sources."""
    lazy = _LAZY.search(torch_generate_src)
    if lazy is None:
        if "generate_lazy" in torch_generate_src:
            return "unknown", "torch's generate reaches generate_lazy in a way this patch does not know"
        return "no-lazy-in-aot", "torch's generate has no lazy-compile path: aot_mode launches are torch_npu's launch lambda"
    if "aot_mode" in lazy.group("cond"):
        return "no-lazy-in-aot", ("torch's generate takes its lazy-compile path only outside aot_mode (torch 2.13's "
                                  "guard): aot_mode launches are torch_npu's launch lambda")
    if npu_generate_src is None or "autotune_at_compile_time" not in npu_generate_src:
        return "no-lazy-in-aot", (f"{CLASS}.generate leaves triton.autotune_at_compile_time alone: aot_mode launches are "
                                  f"torch_npu's launch lambda unless the user turns that setting off")
    if _ON.search(npu_generate_src) and not _OFF_IN_AOT.search(npu_generate_src):
        return "no-lazy-in-aot", (f"{CLASS}.generate keeps triton.autotune_at_compile_time on around torch's generate "
                                  f"(the upstream form of this fix): aot_mode launches are torch_npu's launch lambda")
    if not _OFF_IN_AOT.search(npu_generate_src):
        return "unknown", f"{CLASS}.generate sets triton.autotune_at_compile_time in a way this patch does not know"
    return "lazy-in-aot", (f"in aot_mode {CLASS}.generate sets triton.autotune_at_compile_time = False and torch's "
                           f"generate then writes torch's lazy-compile launch, for which torch_npu has no runtime and "
                           f"which has no workspace or lock argument")


def shape(modules) -> tuple[str, str]:
    """(shape, detail): 'lazy-in-aot' (needed), 'ours', 'no-lazy-in-aot' (upstream-has-fix) or 'unknown'."""
    _, cls, base = _classes(modules)
    if cls is None:
        return "unknown", f"{CLASS} not found"
    if getattr(vars(cls).get("generate_lazy"), _MARK, False):
        return "ours", "already patched"
    if base is None:  # the older layout (codegen/cpp_wrapper.py): a class of its own, not torch's subclass
        own_src = source_of(vars(cls).get("generate")) if "generate" in vars(cls) else ""
        if not own_src or "generate_lazy" in own_src or "super()" in own_src:
            return "unknown", f"{CLASS} has no generate of torch's, and its own is not one this patch knows"
        return "no-lazy-in-aot", (f"{CLASS} writes its launches with a generate of its own, not torch's: no "
                                  f"lazy-compile path, aot_mode launches are torch_npu's launch lambda")
    torch_src = source_of(vars(base)["generate"])
    if not torch_src:
        return "unknown", f"the source of {base.__qualname__}.generate is not readable"
    own = vars(cls).get("generate")
    own_src = source_of(own) if own is not None else None
    if own is not None and not own_src:
        return "unknown", f"the source of {CLASS}.generate is not readable"
    return classify(torch_src, own_src)


def probe(modules) -> Probe:
    return probe_of_shape(*shape(modules), upstream_fix="no-lazy-in-aot")


def apply(modules, patcher) -> str:
    if not needs_applying(shape(modules), "lazy-in-aot"):
        return "already applied"
    from torch._inductor import config
    from torch._inductor.virtualized import V

    _, cls, base = _classes(modules)
    eager_generate = vars(base)["generate"]
    torch_lazy = cls.generate_lazy

    @functools.wraps(torch_lazy)
    def generate_lazy(self, wrapper):
        if not V.graph.aot_mode:
            return torch_lazy(self, wrapper)
        with config.patch("triton.autotune_at_compile_time", True):  # torch's eager path: torch_npu's lambda
            return eager_generate(self, wrapper)

    setattr(generate_lazy, _MARK, True)
    patcher.setattr(cls, "generate_lazy", generate_lazy)
    return (f"{CLASS}.generate_lazy: aot_mode launches take torch's eager path, i.e. torch_npu's launch lambda "
            "(with its workspace and locks), instead of torch's lazy-compile launch")
