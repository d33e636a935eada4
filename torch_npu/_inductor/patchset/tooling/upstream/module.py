"""The Python module the upstream patch adds: ``torch_npu/_inductor/codegen/npu_launch_resources.py``.

One source of truth: its planning and C++-writing code is not a second copy
kept by hand. It is cut, at patch time, out of this package's own
``launch_plan.py`` and ``launch_codegen.py``: every top-level definition that
:func:`~torch_npu._inductor.patchset.launch_plan.plan_from_metadata` and
:func:`~torch_npu._inductor.patchset.launch_codegen.resource_code` need, in
source order, verbatim, with the methods of a class that nothing kept calls
left out. It is given the few entry points torch_npu's own code calls
(:data:`UPSTREAM_API`). The upstream code can import nothing from this project,
so the text is what ships; the verification renders launchers with it and
compares them with the runtime patch set's.
"""
from __future__ import annotations

import ast
from pathlib import Path

from ... import launch_codegen, launch_plan
from ...fixes import _shared

#: Where the module goes in a torch_npu checkout.
MODULE_PATH = "torch_npu/_inductor/codegen/npu_launch_resources.py"
#: Its import name there, and the names torch_npu's edited code calls: the runtime probes
#: recognise the upstream form of the fix by them (one definition, in fixes/_shared.py).
MODULE_NAME = _shared.UPSTREAM_MODULE
SYNC_PARAMS_FN = _shared.UPSTREAM_SYNC_PARAMS_FN
LINES_FN = _shared.UPSTREAM_LINES_FN
INCLUDE_FN = "launch_resources_include"

#: (module, the definitions wanted from it): everything they use is taken along.
_ROOTS = (
    (launch_plan, ("plan_from_metadata",)),
    (launch_codegen, ("resource_code", "LaunchSite", "HELPER_HEADER", "HELPER_PARTS")),
)

_HEADER = '''\
"""Workspace and sync-block lock memory for Triton kernels launched from the C++ wrapper.

:func:`kernel_sync_params`: the fields the autotuner records; :func:`launch_resource_lines`: one
launch's C++ (``torch_npu/csrc/inductor/npu_launch_resources.h``). Generated from
torch-npu-inductor-patches (``launch_plan.py``, ``launch_codegen.py``), which checks what it renders.
"""
from __future__ import annotations

import dataclasses
import hashlib
import operator
import os
from typing import Any, Mapping, Optional

'''

_API = '''

def kernel_sync_params(metadata: Any, kernel: str) -> dict:
    """A kernel's sync fields for its saved params; ``ValueError`` naming kernel, field and value if unusable."""
    plan = plan_from_metadata(metadata, kernel)
    values = {name: _as_int(kernel, name, _field(metadata, name), 0, INT64_MAX)
              for name in ("workspace_size", "lock_num", "sync_block_lock_layout")}
    auto_tile = _as_flag(kernel, "auto_tile_and_bind_subblock", _field(metadata, "auto_tile_and_bind_subblock"))
    return dict(values, lock_init_val=plan.lock_init_value, mix_mode=plan.mix_mode,
                auto_tile_and_bind_subblock=auto_tile)


def launch_resource_lines(kernel: str, params: Mapping[str, Any], num_vector_core: Optional[int] = None,
                          simt_only: bool = False) -> ResourceCode:
    """One launch's C++ from the kernel's saved params (``.before``, ``.in_lambda``, ``.after`` launchKernel);
    ``num_vector_core``: the auto-blockify clamp. A SIMT-only launch gets none (its args have no sync fields)."""
    site = LaunchSite(block_clamp=num_vector_core, simt_only=simt_only)
    return resource_code(plan_from_metadata(params, kernel), site)


def launch_resources_include(indent: str = "") -> str:
    """The wrapper header's lines, the helper's namespace named from the installed headers' digest."""
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    lines = [f"#include <torch_npu/csrc/inductor/{HELPER_HEADER}>"]
    for directory in (os.path.join(package, "include/torch_npu/csrc/inductor"), os.path.join(package, "csrc/inductor")):
        if os.path.isfile(os.path.join(directory, HELPER_HEADER)):  # installed, or a source checkout
            digest = hashlib.sha256()
            for name in [HELPER_HEADER] + sorted(f"{HELPER_PARTS}/{n}" for n in os.listdir(f"{directory}/{HELPER_PARTS}")):
                with open(os.path.join(directory, name), "rb") as f:
                    digest.update(name.encode() + b"\\0" + f.read() + b"\\0")
            lines.insert(0, f"#define TORCH_NPU_LAUNCH_RESOURCES_ABI v_{digest.hexdigest()[:16]}")
            break
    return ("\\n" + indent).join(lines)
'''

#: The module's own entry points (the names torch_npu's edited code imports).
UPSTREAM_API = (SYNC_PARAMS_FN, LINES_FN, INCLUDE_FN)


def _defined_names(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def _used(node: ast.AST) -> tuple[set[str], set[str]]:
    """(names, attribute names) that ``node`` uses."""
    names, attrs = set(), set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, ast.Attribute):
            attrs.add(n.attr)
    return names, attrs


#: Dunder methods the upstream module leaves out: its plans come only from ``plan_from_metadata``, which builds
#: them consistent and bounds their fills; the plan's own field checks stay in this package (from_dict, tests).
_DROPPED = {"__post_init__"}


def _methods(node: ast.stmt) -> list:
    if not isinstance(node, ast.ClassDef):
        return []
    return [m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _closure(source: str, roots: set[str], attrs: set[str]) -> tuple[list, dict, set[str], set[str]]:
    """(top-level statements defining ``roots`` and what they use, in source order; for each class
    kept, the methods kept; names used but defined elsewhere; attribute names used).

    A method is kept when it is a dunder method or its name is used as an attribute anywhere in
    what is kept (``attrs``: the other module's and the entry points' too), so a class loses only
    methods that nothing kept can call."""
    tree = ast.parse(source)
    defs = {name: node for node in tree.body for name in _defined_names(node)}
    kept, methods, outside, names = {}, {}, set(), set(roots)
    attrs = set(attrs)
    changed = True
    while changed:
        changed = False
        for name in sorted(names):
            node = defs.get(name)
            if node is None:
                outside.add(name)
            elif id(node) not in kept:
                kept[id(node)] = node
                shell = [s for s in getattr(node, "body", []) if s not in _methods(node)] if isinstance(
                    node, ast.ClassDef) else [node]
                for part in shell + list(getattr(node, "decorator_list", [])) + list(getattr(node, "bases", [])):
                    n, a = _used(part)
                    names |= n
                    attrs |= a
                methods[id(node)] = set()
                changed = True
        for node in list(kept.values()):
            for m in _methods(node):
                if id(m) in methods[id(node)]:
                    continue
                if (m.name.startswith("__") and m.name.endswith("__") and m.name not in _DROPPED) or m.name in attrs:
                    methods[id(node)].add(id(m))
                    n, a = _used(m)
                    names |= n
                    attrs |= a
                    changed = True
    return [n for n in tree.body if id(n) in kept], methods, outside, attrs


def _imported_from(source: str, module: str) -> set[str]:
    tree = ast.parse(source)
    return {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == module
            for a in n.names}


def module_text() -> str:
    """The module, from the current ``launch_plan.py`` / ``launch_codegen.py``."""
    plan_src, codegen_src = (Path(mod.__file__).read_text() for mod, _ in _ROOTS)
    api_names, api_attrs = _used(ast.parse(_API))
    plan_defined = {name for node in ast.parse(plan_src).body for name in _defined_names(node)}
    # launch_codegen's names that come from launch_plan are roots there; the attributes each side
    # uses decide which of the other's methods stay.
    from_plan = _imported_from(codegen_src, "launch_plan")
    codegen_nodes, codegen_methods, codegen_outside, codegen_attrs = _closure(
        codegen_src, set(_ROOTS[1][1]) | (api_names - from_plan), api_attrs)
    plan_roots = set(_ROOTS[0][1]) | (codegen_outside & from_plan) | (api_names & plan_defined)
    plan_nodes, plan_methods, _, plan_attrs = _closure(plan_src, plan_roots, api_attrs | codegen_attrs)
    missing = (plan_roots | set(_ROOTS[1][1])) - plan_defined - {
        name for node in codegen_nodes for name in _defined_names(node)}
    if missing:  # a root renamed or removed: the module would not run
        raise RuntimeError(f"launch_plan.py / launch_codegen.py no longer define {sorted(missing)}")
    text, previous = _HEADER.rstrip("\n"), None
    for src, nodes, methods in ((plan_src, plan_nodes, plan_methods), (codegen_src, codegen_nodes, codegen_methods)):
        for node in nodes:
            part = _with_comments(src, node, methods.get(id(node), set()))
            text += _separator(previous, node, part) + part
            previous = node
    text += "\n" + _API
    # Comments there point at this project's design notes; say whose they are.
    return text.replace("docs/design.md", "torch-npu-inductor-patches' docs/design.md")


def _separator(previous, node, text: str) -> str:
    """Two blank lines around a definition (PEP 8), one before a commented constant, else none."""
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    if previous is None or isinstance(previous, defs) or isinstance(node, defs):
        return "\n\n\n"
    return "\n\n" if text.lstrip().startswith("#") else "\n"


def _start(lines: list[str], node: ast.stmt) -> int:
    """Index of the node's first line, decorators and the comment lines right above it included."""
    start = node.lineno - 1
    if getattr(node, "decorator_list", None):
        start = min(d.lineno for d in node.decorator_list) - 1
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return start


def _with_comments(source: str, node: ast.stmt, kept_methods: set) -> str:
    """The statement's text, with the comment lines right above it (``#:`` notes); a class without
    the methods not in ``kept_methods`` (each with its decorators and comments); of each docstring
    the first paragraph (the module's reader gets what a definition does, this project the rest)."""
    lines = source.splitlines()
    start = _start(lines, node)
    dropped = set()
    for m in _methods(node):
        if id(m) not in kept_methods:
            dropped.update(range(_start(lines, m), m.end_lineno))
    for doc in _docstrings(node, kept_methods):  # first paragraph only: the full text is in this project
        blank = next((i for i in range(doc.lineno, doc.end_lineno) if not lines[i].strip()), None)
        if blank is not None and lines[doc.end_lineno - 1].strip() == '"""':
            lines[blank - 1] += '"""'
            dropped.update(range(blank, doc.end_lineno))
    out = []
    for i in range(start, node.end_lineno):
        if i in dropped or (not lines[i].strip() and (not out or not out[-1].strip())):
            continue
        out.append(lines[i])
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out)


def _docstrings(node: ast.stmt, kept_methods: set) -> list:
    """The docstring expressions of a kept definition and of its kept methods."""
    owners = [node] + [m for m in _methods(node) if id(m) in kept_methods]
    return [o.body[0] for o in owners if isinstance(o, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and ast.get_docstring(o) is not None]
