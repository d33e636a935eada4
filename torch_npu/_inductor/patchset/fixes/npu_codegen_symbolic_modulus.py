"""npu-codegen-symbolic-modulus: torch_npu's index linearization with symbolic sizes (``codegen/ir.py``).

torch_npu 2.7.1.post6 .. post11 and 2.9.0.post9 rewrite each index of an NPU kernel into per-axis terms in
``LoopBody.transform_dims_in_indexing`` (their ``ir.transform_dims_in_indexing``): ``analyze_expression``
asks ``analyze_floordiv_expression`` / ``analyze_modular_expression`` whether each ``FloorDiv`` /
``ModularIndexing`` splits over its terms, raises ``Can not split expression`` when one does not (Ascend950
falls back to SIMT-only kernels instead), then ``split_expression`` splits them. With dynamic shapes the
analysis stops a compile: ``gcd(coeff, mod)`` on a symbolic modulus (TypeError), a size-only block size such as
``(s0*s1 + 5)//6`` called unsplittable, and ``split_expression`` splitting that one into ``s0*s1//6`` (or, where a
term folds to 0, failing on it).

The patch replaces the three functions in the module (``analyze_expression`` and ``transform_dims_in_indexing``
look them up there at each call) by wrappers that decide with :mod:`..index_split`, exactly, every expression
that involves a size symbol, and hand everything else to upstream unchanged: static shapes compile as before.
An expression :mod:`..index_split` refuses keeps upstream's verdict, "cannot split", so torch_npu raises where
it always did (or falls back to SIMT on Ascend950). The prover is Inductor's own (``sizevars``: no guard).
"""
from __future__ import annotations

import ast
import functools
import textwrap

import sympy
from torch.utils._sympy.functions import FloorDiv, ModularIndexing

from .. import index_split
from .._patching import NEEDED, Probe, source_of

MODULE = "torch_npu._inductor.codegen.ir"
ANALYSES = {"analyze_modular_expression": "ModularIndexing", "analyze_floordiv_expression": "FloorDiv"}
SPLIT = "split_expression"
_MARK = "__torch_npu_patchset_symbolic_sizes__"
_TAG = "torch_npu_patchset npu-codegen-symbolic-modulus"


def _is_ours(fn) -> bool:
    return bool(getattr(fn, _MARK, False))


def _upstream(fn):
    return getattr(fn, "__wrapped__", fn) if _is_ours(fn) else fn


def gcd_of_modulus(source: str) -> str:
    """How ``analyze_modular_expression``'s source calls ``gcd(..., mod)``: "unguarded", "guarded" (only under an
    ``isinstance(mod, ...)`` test: upstream's fix on v2.10.0 and master), or "absent"."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return "absent"
    found = []

    def guards_mod(test) -> bool:
        return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "isinstance"
                   and n.args and isinstance(n.args[0], ast.Name) and n.args[0].id == "mod" for n in ast.walk(test))

    def visit(node, guarded: bool) -> None:
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name == "gcd" and len(node.args) == 2 and isinstance(node.args[1], ast.Name) and node.args[1].id == "mod":
                found.append(guarded)
        if isinstance(node, ast.If):
            visit(node.test, guarded)
            for child in node.body:
                visit(child, guarded or guards_mod(node.test))
            for child in node.orelse:
                visit(child, guarded)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(tree, False)
    if not found:
        return "absent"
    return "guarded" if all(found) else "unguarded"


def probe(modules) -> Probe:
    ir = modules[MODULE]
    modular = getattr(ir, "analyze_modular_expression", None)
    transform = getattr(ir, "transform_dims_in_indexing", None)
    if modular is None:
        if callable(transform) and "analyze_expression(" not in source_of(transform):
            return Probe.upstream_has_fix(f"{MODULE}.transform_dims_in_indexing does not analyse indices "
                                          "(no linearization in this release): nothing raises on a symbolic size")
        return Probe.unrecognised(f"{MODULE} has no analyze_modular_expression")
    shape = gcd_of_modulus(source_of(_upstream(modular)))
    if shape == "guarded":
        return Probe.upstream_has_fix(f"{MODULE}.analyze_modular_expression calls gcd(coeff, mod) only when "
                                      "isinstance(mod, (int, sympy.Integer)) (upstream's guard, with its own "
                                      "analysis of symbolic sizes)")
    if shape != "unguarded":
        return Probe.unrecognised(f"{MODULE}.analyze_modular_expression does not call gcd(coeff, mod)")
    missing = [n for n in (*ANALYSES, SPLIT, "analyze_expression") if not callable(getattr(ir, n, None))]
    if missing or not callable(transform):
        return Probe.unrecognised(f"{MODULE} lacks {', '.join(missing or ['transform_dims_in_indexing'])}")
    calls = {"analyze_expression": tuple(ANALYSES), "transform_dims_in_indexing": ("analyze_expression", SPLIT)}
    for caller, callees in calls.items():
        text = source_of(getattr(ir, caller))
        absent = [c for c in callees if f"{c}(" not in text]
        if absent:
            return Probe.unrecognised(f"{MODULE}.{caller} does not call {', '.join(absent)} by name")
    if getattr(ir, "ModularIndexing", None) is not ModularIndexing or getattr(ir, "FloorDiv", None) is not FloorDiv:
        return Probe.unrecognised(f"{MODULE}'s ModularIndexing / FloorDiv are not torch's")
    if _is_ours(modular):
        return Probe.needed("the analysis is already this patch set's (nothing left to do)")
    return Probe.needed(f"{MODULE}.analyze_modular_expression calls gcd(coeff, mod) unguarded (TypeError on a "
                        "symbolic modulus) and the analysis takes size-only FloorDivs for unsplittable terms")


def _prover():
    """Inductor's prover while a graph compiles (the size symbols' ranges; adds no guard), then sympy's (the
    symbols' assumptions): both sound, so either proving a relation proves it."""
    from torch._inductor.virtualized import V

    sizevars = getattr(V.graph, "sizevars", None)
    if sizevars is None:
        return index_split.sympy_proves
    return lambda relation: sizevars.is_expr_static_and_true(relation) or index_split.sympy_proves(relation)


def _lengths(range_tree_nodes) -> dict:
    return {symbol: node.length for symbol, node in range_tree_nodes.items()}


def _analysis(upstream, kind: str):
    @functools.wraps(upstream)
    def analyse(expr, range_tree_nodes, *args, **kwargs):
        lengths = _lengths(range_tree_nodes)
        if not index_split.symbolic(expr, lengths):
            return upstream(expr, range_tree_nodes, *args, **kwargs)
        found = index_split.split(expr, lengths, _prover())
        return {"expression": str(expr), "type": kind, "can_split": found.ok, "reason": f"{found.reason} ({_TAG})",
                "details": {}, "split_form": str(found.form) if found.ok else ""}

    setattr(analyse, _MARK, True)
    return analyse


def _splitter(upstream):
    @functools.wraps(upstream)
    def split_expression(expr, *args, **kwargs):
        from torch._inductor.virtualized import V

        if isinstance(expr, (FloorDiv, ModularIndexing)):
            lengths = _lengths(V.kernel.range_tree_nodes)
            if index_split.launch_constant(expr, lengths) or (
                    index_split.symbolic(expr, lengths) and isinstance(expr.args[0], sympy.Add)):
                found = index_split.split(expr, lengths, _prover())
                if not found.ok:  # the analysis refused it first: transform_dims_in_indexing raised before this
                    raise RuntimeError(f"{_TAG}: {expr} does not split exactly ({found.reason})")
                return found.form
        return upstream(expr, *args, **kwargs)  # its own recursion comes back here through the module

    setattr(split_expression, _MARK, True)
    return split_expression


def apply(modules, patcher):
    verdict = probe(modules)
    if verdict.verdict != NEEDED:
        return f"nothing changed: {verdict.reason}"
    ir = modules[MODULE]
    if _is_ours(ir.analyze_modular_expression):
        return "nothing changed: this patch set's analysis is already installed"
    for name, kind in ANALYSES.items():
        patcher.setattr(ir, name, _analysis(getattr(ir, name), kind))
    patcher.setattr(ir, SPLIT, _splitter(getattr(ir, SPLIT)))
    return (f"{MODULE}: {', '.join(ANALYSES)} and {SPLIT} decide expressions with symbolic sizes exactly "
            "(index_split); static ones go to upstream unchanged")
