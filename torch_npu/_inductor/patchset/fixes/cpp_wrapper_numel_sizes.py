"""cpp-wrapper-numel-sizes: the C++ wrapper declares the precomputed sizes a kernel's axis numel uses.

torch_npu's NPU kernels pass one numel per axis, written into the wrapper by
``generate_node_numel_expr``. Where an axis comes from splitting an iteration variable by a symbolic size (the
index linearization of npu-codegen-symbolic-modulus, or upstream's own on v2.10.0 and master), Inductor's
``codegen_indexing`` has replaced that size in the axis by a precomputed size ``psN`` (a kernel argument), and
the axis's numel names ``psN`` too. torch_npu's Python wrapper declares every precomputed size of the numel
first (``ensure_size_computed``, codegen/wrapper.py); its C++ wrapper (``CppWrapperNpu``) writes the numel
as it is, and the wrapper does not compile (``'ps0' was not declared in this scope``). The patch declares them
first, through the C++ wrapper's own ``ensure_size_computed`` (``int64_t psN = <expr>;``, once per wrapper).
"""
from __future__ import annotations

import functools

import sympy

from .._patching import NEEDED, Probe, source_of

MODULES = ("torch_npu._inductor.codegen.cpp_wrapper_npu", "torch_npu._inductor.codegen.cpp_wrapper")
CLASS = "CppWrapperNpu"
METHOD = "generate_node_numel_expr"
_MARK = "__torch_npu_patchset_numel_sizes__"


def _class(modules):
    for name in MODULES:
        if name in modules:
            return getattr(modules[name], CLASS, None), name
    raise LookupError(f"none of {MODULES} in {sorted(modules)}")


def probe(modules) -> Probe:
    cls, where = _class(modules)
    if cls is None:
        return Probe.unrecognised(f"{where} has no {CLASS}")
    fn = cls.__dict__.get(METHOD)
    if fn is None:
        return Probe.upstream_has_fix(f"{where}.{CLASS} writes no per-axis numel of its own (no {METHOD}): "
                                      "nothing names a precomputed size there")
    if getattr(fn, _MARK, False):
        return Probe.needed(f"{CLASS}.{METHOD} already carries this patch's hook (nothing left to do)")
    if not callable(getattr(cls, "ensure_size_computed", None)):
        return Probe.unrecognised(f"{CLASS} has no ensure_size_computed (torch's C++ wrapper method)")
    text = source_of(fn)
    if "ensure_size_computed" in text:
        return Probe.upstream_has_fix(f"{where}.{CLASS}.{METHOD} declares the precomputed sizes itself")
    if "cexpr(numel_expr)" not in text:
        return Probe.unrecognised(f"{where}.{CLASS}.{METHOD} does not write cexpr(numel_expr)")
    return Probe.needed(f"{where}.{CLASS}.{METHOD} writes cexpr(numel_expr) without declaring its precomputed sizes")


def apply(modules, patcher):
    verdict = probe(modules)
    if verdict.verdict != NEEDED:
        return f"nothing changed: {verdict.reason}"
    cls, where = _class(modules)
    upstream = cls.__dict__[METHOD]
    if getattr(upstream, _MARK, False):
        return "nothing changed: already installed"

    @functools.wraps(upstream)
    def generate_node_numel_expr(self, kernel_name, node, numel_expr, *args, **kwargs):
        for sym in sorted(sympy.sympify(numel_expr).free_symbols, key=str):
            self.ensure_size_computed(sym)  # only precomputed sizes (psN) are written, each once
        return upstream(self, kernel_name, node, numel_expr, *args, **kwargs)

    setattr(generate_node_numel_expr, _MARK, True)
    patcher.setattr(cls, METHOD, generate_node_numel_expr)
    return f"{where}.{CLASS}.{METHOD}: declares the precomputed sizes of each numel before writing it"
