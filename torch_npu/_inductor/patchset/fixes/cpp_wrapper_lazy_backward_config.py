"""cpp-wrapper-lazy-backward-config: a lazily compiled backward gets the C++ wrapper's Triton settings.

``torch.compile(options={"cpp_wrapper": True})`` reaches ``compile_fx`` with ``config_patches``; torch 2.7.1
applies ``get_cpp_wrapper_config()`` (``triton.store_cubin``, ``triton.autotune_at_compile_time``) only inside
``compile_fx``'s own ``config.patch``, and its ``bw_compiler`` only when ``config.cpp_wrapper`` is set globally.
A backward that AOTAutograd compiles at its first ``.backward()`` (static shapes) runs after that context exited:
its kernels are built with ``store_cubin`` off, save no launch parameters, and the wrapper stops at
``CudaKernelParamCache not populated``. torch 2.14 applies the settings in ``compile_fx_inner`` whenever its
``cpp_wrapper`` argument is true (pytorch/pytorch#178847); the patch does the same one call deeper, around
``_compile_fx_inner``, which ``compile_fx_inner`` looks up by its module-level name at each call.
"""
from __future__ import annotations

import functools
import re

from .._patching import NEEDED, Probe, source_of

MODULE = "torch._inductor.compile_fx"
TARGET = "_compile_fx_inner"
_MARK = "__torch_npu_patchset_lazy_backward__"


def probe(modules) -> Probe:
    fx = modules[MODULE]
    outer, inner = getattr(fx, "compile_fx_inner", None), getattr(fx, TARGET, None)
    if not callable(outer):
        return Probe.unrecognised(f"{MODULE} has no compile_fx_inner")
    text = source_of(outer)
    if "get_cpp_wrapper_config" in text:
        return Probe.upstream_has_fix(f"{MODULE}.compile_fx_inner applies get_cpp_wrapper_config itself (every "
                                      "cpp_wrapper compile, a lazily compiled backward included)")
    if not callable(inner) or not re.search(rf"\b{TARGET}\b", text):
        return Probe.unrecognised(f"{MODULE}.compile_fx_inner does not hand its graph to {TARGET} by name")
    if not callable(getattr(fx, "get_cpp_wrapper_config", None)):
        return Probe.unrecognised(f"{MODULE} has no get_cpp_wrapper_config")
    if getattr(inner, _MARK, False):
        return Probe.needed(f"{MODULE}.{TARGET} already carries this patch's settings (nothing left to do)")
    return Probe.needed(f"{MODULE}.compile_fx_inner leaves the C++ wrapper's Triton settings to compile_fx's own "
                        "context, which a backward compiled at its first call is outside of")


def apply(modules, patcher):
    verdict = probe(modules)
    if verdict.verdict != NEEDED:
        return f"nothing changed: {verdict.reason}"
    fx = modules[MODULE]
    upstream = getattr(fx, TARGET)
    if getattr(upstream, _MARK, False):
        return "nothing changed: already installed"

    @functools.wraps(upstream)
    def compile_inner(gm, example_inputs, **graph_kwargs):
        if not graph_kwargs.get("cpp_wrapper"):
            return upstream(gm, example_inputs, **graph_kwargs)
        with fx.config.patch(fx.get_cpp_wrapper_config()):  # the same values compile_fx applies around the forward
            return upstream(gm, example_inputs, **graph_kwargs)

    setattr(compile_inner, _MARK, True)
    patcher.setattr(fx, TARGET, compile_inner)
    return f"{MODULE}.{TARGET}: every cpp_wrapper compile runs under get_cpp_wrapper_config()"
