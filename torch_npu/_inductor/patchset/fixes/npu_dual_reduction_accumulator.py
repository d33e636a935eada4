"""npu-dual-reduction-accumulator: a reduction over two looped axes adds up every block of both.

torch_npu 2.7.1.post4 .. post10 (``NPUIndexTritonKernel.codegen_body``) write a loop per tiled axis and splice
the accumulators' initialisation and the final reduction and store around the loop of the last tiled axis only.
Where a kernel reduces over two tiled axes (``dual_reduction``: ``x.sum(dim=(0, 2))``, or the loss
``flex_attention(...).float().square().mean()`` compiled with ``dynamic=True``), those statements land inside the
outer reduction axis's loop: each block of that axis resets the accumulator and overwrites the output, and the
kernel stores the last block's partial result. Whether it is wrong depends on the autotuned config (right when
one block covers the outer axis): every config with a smaller outer block computes a wrong result, and on an NPU
the fastest config is kept. 2.7.1.post11 and 2.9.0.post9 place them outside the first reduction loop.

The patch wraps ``codegen_kernel`` and moves them there in the finished source (:mod:`..dual_reduction`, only what
it proves independent of the outer loop); a kernel of another shape is left as torch_npu wrote it.
"""
from __future__ import annotations

import ast
import functools
import textwrap

from .. import dual_reduction
from .._patching import NEEDED, Probe, source_of

MODULE = "torch_npu._inductor.codegen.triton"
CLASS = "NPUIndexTritonKernel"
_MARK = "__torch_npu_patchset_dual_reduction__"


def _calls(node, attribute: str, argument: str | None = None) -> bool:
    """Whether ``node`` holds a call ``<x>.<attribute>(<...>.<argument>)``."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == attribute:
            if argument is None or (n.args and isinstance(n.args[0], ast.Attribute) and n.args[0].attr == argument):
                return True
    return False


def _writes_loop(node) -> bool:
    """Whether ``node`` writes a ``for loop_...`` line (an f-string passed to writeline)."""
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "writeline":
            if any(isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.startswith("for loop_")
                   for a in n.args if isinstance(a, ast.JoinedStr) for c in a.values):
                return True
    return False


def layout(source: str) -> str:
    """How ``codegen_body``'s source places the accumulators of a reduction over two tiled axes:
    "inside" (spliced at the last tiled axis only, while an outer tiled axis writes its own loop: post4 .. post10),
    "outside" (the outer reduction loop splices them itself: post11, 2.9.0.post9, 2.13.0, 2.14.0),
    "no-outer-loop" (an outer tiled axis of a two-axis reduction writes no loop: 2.7.1, 2.8.0, 2.9.1 .. 2.12.0),
    or "unrecognised"."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return "unrecognised"
    for node in ast.walk(tree):
        if not (isinstance(node, ast.If) and "last_tiling" in ast.unparse(node.test)
                and "is_tiling_axis" in ast.unparse(node.test) and len(node.orelse) == 1
                and isinstance(node.orelse[0], ast.If) and "is_tiling_axis" in ast.unparse(node.orelse[0].test)):
            continue
        last, outer = node, node.orelse[0]
        if not (_calls(ast.Module(last.body, []), "splice", "prefix") and _writes_loop(ast.Module(last.body, []))):
            return "unrecognised"
        body = ast.Module(outer.body, [])
        if _calls(body, "splice", "prefix"):
            return "outside"
        loops = [n for n in ast.walk(body) if isinstance(n, ast.If) and _writes_loop(ast.Module(n.body, []))]
        if any("numof_reduction_axis" in ast.unparse(n.test) for n in loops):
            return "no-outer-loop"
        return "inside" if _writes_loop(body) else "unrecognised"
    return "unrecognised"


def probe(modules) -> Probe:
    cls = getattr(modules[MODULE], CLASS, None)
    if cls is None:
        return Probe.unrecognised(f"{MODULE} has no {CLASS}")
    if not callable(cls.__dict__.get("codegen_body")) or not callable(cls.__dict__.get("codegen_kernel")):
        return Probe.unrecognised(f"{MODULE}.{CLASS} defines no codegen_body / codegen_kernel of its own")
    shape = layout(source_of(cls.__dict__["codegen_body"]))
    where = f"{MODULE}.{CLASS}.codegen_body"
    if shape == "outside":
        return Probe.upstream_has_fix(f"{where} sets a two-axis reduction's accumulators before its first "
                                      "reduction loop and stores after it")
    if shape == "no-outer-loop":
        return Probe.upstream_has_fix(f"{where} writes no loop over the outer axis of a two-axis reduction: "
                                      "no accumulator is reset inside one")
    if shape != "inside":
        return Probe.unrecognised(f"{where}: not the layout read in 2.7.1.post4 .. post11")
    if getattr(cls.__dict__["codegen_kernel"], _MARK, False):
        return Probe.needed(f"{CLASS}.codegen_kernel already carries this patch's hook (nothing left to do)")
    return Probe.needed(f"{where} sets a two-axis reduction's accumulators, and stores its result, inside the "
                        "outer reduction loop (the last block of that axis alone is stored)")


def apply(modules, patcher):
    verdict = probe(modules)
    if verdict.verdict != NEEDED:
        return f"nothing changed: {verdict.reason}"
    from torch._inductor.utils import Placeholder

    cls = getattr(modules[MODULE], CLASS)
    upstream = cls.__dict__["codegen_kernel"]
    if getattr(upstream, _MARK, False):
        return "nothing changed: already installed"

    @functools.wraps(upstream)
    def codegen_kernel(self, *args, **kwargs):
        source = upstream(self, *args, **kwargs)
        if self.persistent_reduction or self.numof_reduction_axis() < 2:
            return source  # one reduction loop at most: nothing can be reset inside another
        # Until the scheduler names it, the kernel is `def Placeholder.KERNEL_NAME(`: not Python yet.
        placeholder, stand_in = str(Placeholder.KERNEL_NAME), "_torch_npu_patchset_kernel_name_"
        hoisted = dual_reduction.hoist(source.replace(placeholder, stand_in))
        return hoisted.source.replace(stand_in, placeholder) if hoisted.moved else source

    setattr(codegen_kernel, _MARK, True)
    patcher.setattr(cls, "codegen_kernel", codegen_kernel)
    return (f"{MODULE}.{CLASS}.codegen_kernel: a reduction over two looped axes sets its accumulators before the "
            "outer loop and stores after it")
