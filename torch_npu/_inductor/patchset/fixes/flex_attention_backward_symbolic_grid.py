"""Install a ``SymbolicGridFn`` on torch 2.7.1's Flex Attention backward template,
and on torch_npu's own copy of it.

torch 2.7.1 (``torch/_inductor/kernel/flex_attention.py``) builds
``flex_attention_backward_template = TritonTemplate(name="flex_attention_backward",
grid=flex_attention_backward_grid, ...)``; ``TritonTemplate.__init__`` keeps it
as ``self.grid``, and ``TritonTemplateKernel.call_kernel`` asserts
``cpp_wrapper requires SymbolicGridFn`` for a plain function with symbolic
call sizes. torch >= 2.8 ships a ``SymbolicGridFn`` there (module
``torch._inductor.kernel.flex.flex_attention`` in 2.13).

torch_npu 2.7.1.post4 to post10 register their OWN Flex Attention lowering,
whose backward template (``torch_npu._inductor.kernel.flex_attention.
flex_attention_backward_template``, an ``NPUTritonTemplate`` with the same
program-id layout as torch 2.7.1's) was built with torch's plain
``flex_attention_backward_grid``: that is the template the NPU compiles, and
fixing torch's template object does not reach it. The declaration
``npu-flex-attention-backward-grid`` applies this same module there.
Other releases: 2.9.0.post9 ships its own SymbolicGridFn; 2.7.1.post11 uses
torch's template and replaces its grid with a SymbolicGridFn; 2.10.0.post7 and
later (``kernel/flexattention_template.py``) copy torch >= 2.8's template,
grid included; releases without ``torch_npu/_inductor/kernel/`` use torch's.

The grid itself lives in :mod:`..flex_grid`; this module only decides.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import os
import sys

from .. import flex_grid
from .._patching import NEEDED, Probe

TEMPLATE_MODULES = flex_grid.TEMPLATE_MODULES
_ATTR = "grid"  # TritonTemplate.__init__(name, grid, source, ...) -> self.grid
_CALL_PARAMS = 7  # batch, q_heads, q_len, qk_head_dim, kv_heads, kv_len, meta


def _select_algorithm():
    return sys.modules.get("torch._inductor.select_algorithm") or importlib.import_module(
        "torch._inductor.select_algorithm"
    )


# torch_npu's own modules holding the backward template the NPU compiles, and the name it has there.
NPU_TEMPLATE_LOCATIONS = (
    ("torch_npu._inductor.kernel.flex_attention", flex_grid.TEMPLATE),  # 2.7.1.post4 .. post10, 2.9.0.post9
    ("torch_npu._inductor.kernel.flexattention_template", flex_grid.TEMPLATE),  # 2.10.0.post7 .. 2.14.0
    ("torch_npu._inductor.kernel.flex_attention", "upstream_" + flex_grid.TEMPLATE),  # 2.7.1.post11: torch's
)


def locate(modules) -> tuple[object, str]:
    """(template, "module.name" of the template) from the applier's ``modules`` mapping."""
    places = [(name, flex_grid.TEMPLATE) for name in TEMPLATE_MODULES] + list(NPU_TEMPLATE_LOCATIONS)
    places += [(name, flex_grid.TEMPLATE) for name in modules if name not in dict(places)]
    for name, attr in places:
        module = modules.get(name)
        if module is not None and hasattr(module, attr):
            return getattr(module, attr), f"{name}.{attr}"
    raise LookupError(f"no {flex_grid.TEMPLATE} in {sorted(modules)}")


def is_ours(grid) -> bool:
    fn = getattr(grid, "fn", None)
    return getattr(fn, "__module__", None) == flex_grid.__name__


def _owner_of(grid) -> str:
    fn = getattr(grid, "fn", grid)
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', type(fn).__name__)}"


#: torch_npu's own backward templates split into dq / dkdv kernels (master, v2.7.1 heads:
#: kernel/flexattention_template.py), with no flex_attention_backward_template at all.
SPLIT_TEMPLATES_MODULE = "torch_npu._inductor.kernel.flexattention_template"
_SPLIT_BACKWARD = ("flex_attention_bwd_", "flex_attention_backward_")


def _split_backward_templates(modules) -> Probe | None:
    """The verdict on torch_npu's split backward templates, when that is the layout here."""
    module = modules.get(SPLIT_TEMPLATES_MODULE)
    if module is None or hasattr(module, flex_grid.TEMPLATE):
        return None
    sa = _select_algorithm()
    found = {name: value for name, value in vars(module).items()
             if name.startswith(_SPLIT_BACKWARD) and isinstance(value, sa.TritonTemplate)}
    if not found:
        return None
    plain = sorted(name for name, t in found.items() if not isinstance(getattr(t, _ATTR, None), sa.SymbolicGridFn))
    if plain:
        return Probe.unrecognised(f"{SPLIT_TEMPLATES_MODULE}: backward templates {', '.join(plain)} have a plain "
                                  "grid this patch does not know")
    return Probe.upstream_has_fix(f"torch_npu's own backward templates in {SPLIT_TEMPLATES_MODULE} "
                                  f"({', '.join(sorted(found))}) all have SymbolicGridFn grids")


#: Where torch_npu replaces the grid of torch 2.7.1's template with a SymbolicGridFn of its own when
#: its Flex Attention lowering is imported (2.7.1.post11; the upstream patch on v2.7.1), and the
#: name torch's template has there.
NPU_REPLACES_TORCH_GRID = ("_inductor/kernel/flex_attention.py", "upstream_" + flex_grid.TEMPLATE)


def _npu_replaces_torch_grid() -> str | None:
    """The SymbolicGridFn torch_npu's source installs on torch's template, read from the source:
    torch's module (whose import decides this patch) finishes importing while torch_npu's module,
    which imports it, has not yet run its own replacement. None when torch_npu has none."""
    package = sys.modules.get("torch_npu")
    paths = getattr(package, "__path__", None)
    if paths is None:
        try:
            spec = importlib.util.find_spec("torch_npu")  # a top-level package: found, not imported
        except (ImportError, ValueError):
            spec = None
        paths = (spec and spec.submodule_search_locations) or []
    rel, template = NPU_REPLACES_TORCH_GRID
    for base in paths:
        path = os.path.join(base, rel)
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
        except (OSError, SyntaxError, ValueError):
            return None
        grids = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)
                 and any(isinstance(d, ast.Name) and d.id == "SymbolicGridFn" for d in n.decorator_list)}
        for node in ast.walk(tree):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in grids
                    and any(isinstance(t, ast.Attribute) and t.attr == _ATTR and isinstance(t.value, ast.Name)
                            and t.value.id == template for t in node.targets)):
                return f"torch_npu.{rel[:-3].replace('/', '.')}.{node.value.id}"
        return None
    return None


def _own_symbolic_grid(modules, where: str) -> str | None:
    """A torch_npu module that installs its own SymbolicGridFn backward grid on the template at
    ``where`` (the upstream form of this fix), found even when ours got there first."""
    module = modules.get(where.rsplit(".", 1)[0]) if where.startswith("torch_npu.") else None
    sa = _select_algorithm()
    for name, value in vars(module).items() if module is not None else ():
        if name.endswith("backward_grid") and isinstance(value, sa.SymbolicGridFn) and not is_ours(value):
            return f"{module.__name__}.{name}"
    return None


def _inspect(modules) -> tuple[Probe, object, str]:
    try:
        template, where = locate(modules)
    except LookupError as exc:
        split = _split_backward_templates(modules)
        return split or Probe.unrecognised(str(exc)), None, ""
    sa = _select_algorithm()
    triton_template = getattr(sa, "TritonTemplate", None)
    symbolic = getattr(sa, "SymbolicGridFn", None)
    if symbolic is None or triton_template is None:
        return Probe.unrecognised("torch._inductor.select_algorithm has no SymbolicGridFn/TritonTemplate"), None, where
    if not isinstance(template, triton_template):
        return Probe.unrecognised(f"{where} is a {type(template).__name__}, not a TritonTemplate"), None, where
    if not hasattr(template, _ATTR):
        return Probe.unrecognised(f"{where} has no attribute {_ATTR!r}"), None, where
    grid = getattr(template, _ATTR)
    if isinstance(grid, symbolic):
        own = _own_symbolic_grid(modules, where) if is_ours(grid) else None
        if own:
            return Probe.upstream_has_fix(f"{own} is torch_npu's own SymbolicGridFn for {where}.grid (the "
                                          "upstream form of this fix; this patch set's, installed first, is "
                                          "the same formula)"), template, where
        if is_ours(grid):
            return Probe.needed("grid is already this patch set's SymbolicGridFn (nothing left to do)"), template, where
        fn = getattr(grid, "fn", None)
        owner = getattr(fn, "__module__", None) or ""
        who = ("torch's own" if owner.startswith("torch.") else
               "torch_npu's own" if owner.startswith("torch_npu.") else "another patch's")
        return Probe.upstream_has_fix(f"{where}.grid is already a SymbolicGridFn ({who}: {_owner_of(grid)})"), template, where
    if not callable(grid) or hasattr(grid, "sympy_call"):
        return Probe.unrecognised(f"{flex_grid.TEMPLATE}.grid is a {type(grid).__name__}, expected a plain grid function"), template, where
    try:
        params = [p for p in inspect.signature(grid).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return Probe.unrecognised(f"{flex_grid.TEMPLATE}.grid has no inspectable signature"), template, where
    if len(params) != _CALL_PARAMS:
        return Probe.unrecognised(
            f"{flex_grid.TEMPLATE}.grid takes {len(params)} positional parameters "
            f"({', '.join(p.name for p in params)}), expected {_CALL_PARAMS} "
            "(batch, q_heads, q_len, qk_head_dim, kv_heads, kv_len, meta)"
        ), template, where
    # Behaviour: the function we replace must compute torch 2.7.1's formula and
    # layout (a torch_npu build may have swapped in a grid of its own).
    try:
        layout = flex_grid.matching_layout(grid)
    except ImportError as exc:  # the 2.7.1 grid imports triton inside
        checked = f"formula not evaluated ({exc}); signature matches"
    except Exception as exc:
        return Probe.unrecognised(f"{_owner_of(grid)} raised {type(exc).__name__}: {exc} on sample sizes"), template, where
    else:
        if layout != flex_grid.LAYOUT_2_7:
            return Probe.unrecognised(
                f"{_owner_of(grid)} does not compute torch 2.7.1's backward grid on sample sizes "
                f"(matches layout {layout!r})"
            ), template, where
        checked = "same results as torch 2.7.1's formula on sample sizes"
    replacement = _npu_replaces_torch_grid() if where.startswith("torch._inductor.") else None
    if replacement:
        return Probe.upstream_has_fix(f"{replacement}, torch_npu's own SymbolicGridFn, replaces {where}.grid "
                                      "when torch_npu's Flex Attention lowering is imported (the upstream form of "
                                      "this fix)"), template, where
    return Probe.needed(f"{where}.grid is a plain function ({_owner_of(grid)}; {checked})"), template, where


def probe(modules) -> Probe:
    return _inspect(modules)[0]


def make_grid(layout: str = flex_grid.LAYOUT_2_7):
    """Our grid wrapped in the installed torch's SymbolicGridFn."""
    return _select_algorithm().SymbolicGridFn(flex_grid.GRIDS[layout])


def apply(modules, patcher):
    verdict, template, where = _inspect(modules)
    if verdict.verdict != NEEDED:
        return f"nothing changed: {verdict.reason}"
    current = getattr(template, _ATTR)
    if is_ours(current):
        return "nothing changed: this patch set's grid is already installed"
    patcher.setattr(template, _ATTR, make_grid(flex_grid.LAYOUT_2_7))
    return f"{where}.grid: {_owner_of(current)} -> SymbolicGridFn({flex_grid.__name__}.backward_grid)"


def superseded(modules) -> str | None:
    """What replaced our grid after we installed it (e.g. torch_npu's own fix)."""
    template, _ = locate(modules)
    grid = getattr(template, _ATTR, None)
    return None if is_ours(grid) else _owner_of(grid)
