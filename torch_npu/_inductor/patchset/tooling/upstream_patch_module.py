"""The Python module the upstream patch adds: ``torch_npu/_inductor/codegen/npu_launch_resources.py``.

One source of truth: its planning and C++-writing code is not a second copy
kept by hand. It is cut, at patch time, out of this package's own
``launch_plan.py`` and ``launch_codegen.py`` (every top-level definition that
:func:`~torch_npu._inductor.patchset.launch_plan.plan_from_params` and
:func:`~torch_npu._inductor.patchset.launch_codegen.resource_lines` need, in
source order, verbatim), and given the few entry points torch_npu's own code
calls (:data:`UPSTREAM_API`). The upstream code can import nothing from this
project, so the text is what ships; the verification renders launchers with
it and compares them with the runtime patch set's.
"""
from __future__ import annotations

import ast
from pathlib import Path

from .. import launch_codegen, launch_plan
from ..fixes import _shared

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
    (launch_plan, ("plan_from_params", "plan_from_metadata", "RAW_SYNC_FIELDS", "_INIT_NAMES")),
    (launch_codegen, ("resource_lines", "LaunchSite", "HELPER_HEADER", "HELPER_PARTS")),
)

_HEADER = '''\
"""Workspace and sync-block lock memory for Triton kernels launched from the C++ wrapper.

A triton-ascend kernel may need, per launch, a workspace (``workspace_size``
bytes per launched block) and sync-block locks (``lock_num`` int64 slots, or
the packed ``sync_block_lock_layout`` of triton-ascend 3.6), initialised
before it starts. The launcher used to pass NULL for both.

* :func:`kernel_sync_params` validates a compiled kernel's metadata and
  returns the fields the autotuner records in the kernel's saved params;
* :func:`launch_resource_lines` writes the C++ that declares the kernel's
  ``sync_block_lock`` and ``workspace_addr`` inside the launch lambda: ONE call
  of ``torch_npu::inductor::acquire_launch_resources`` (header
  ``torch_npu/csrc/inductor/npu_launch_resources.h``), which makes one
  workspace-allocator request carved into disjoint aligned regions and
  initialises the locks on the launch's stream;
* :func:`launch_resources_include` is what the wrapper's header needs.

Generated from torch-npu-inductor-patches (``launch_plan.py`` and
``launch_codegen.py``), whose tests check that the launchers rendered with it
are those its runtime patch renders. Fixes Ascend/pytorch#4431.
"""
from __future__ import annotations

import dataclasses
import hashlib
import operator
import os
from typing import Any, Mapping, Optional

'''

_API = '''

_HEADER_DIRS = (
    # installed: setup.py copies torch_npu/csrc/**.h to torch_npu/include/torch_npu/csrc/
    ("include", "torch_npu", "csrc", "inductor"),
    # a source checkout
    ("csrc", "inductor"),
)


def kernel_sync_params(metadata: Any, kernel: str) -> dict:
    """The sync fields of a compiled kernel's metadata, to record in its saved params: every
    one, 0 / "" / False when absent (a grouped launch's variant overrides its group's), with
    the lock init value under its canonical name, and mix_mode (the participant count of
    unordered locks depends on it).

    Raises ``ValueError`` naming the kernel, the field and the value for
    metadata no launch can be sized from (negative, non-integer, overflowing
    or contradictory values).
    """
    plan_from_metadata(metadata, kernel)
    values = {name: _as_int(kernel, name, _field(metadata, name), 0, INT64_MAX)
              for name in ("workspace_size", "lock_num", "sync_block_lock_layout")}
    values["lock_init_val"] = _agreed(
        kernel, metadata, _INIT_NAMES, lambda n, v: _as_int(kernel, n, v, INT64_MIN, INT64_MAX), 0
    )
    values["auto_tile_and_bind_subblock"] = _as_flag(
        kernel, "auto_tile_and_bind_subblock", _field(metadata, "auto_tile_and_bind_subblock")
    )
    mix_mode = _field(metadata, "mix_mode")
    values["mix_mode"] = "" if _absent(mix_mode) else mix_mode
    return values


def launch_resource_lines(kernel: str, params: Mapping[str, Any], num_vector_core: Optional[int] = None) -> list:
    """C++ lines declaring ``sync_block_lock`` and ``workspace_addr`` in a launch lambda.

    ``params``: the kernel's saved params; ``num_vector_core``: the block-count
    clamp when auto-blockify is on (else None). A failed acquisition returns
    its ACL code from the lambda before anything is launched.
    """
    site = LaunchSite(block_clamp=num_vector_core, simt_only=False)
    return resource_lines(plan_from_params(params, kernel), site)


def _header_dir() -> Optional[str]:
    package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for parts in _HEADER_DIRS:
        path = os.path.join(package, *parts)
        if os.path.isfile(os.path.join(path, HELPER_HEADER)):
            return path
    return None


def launch_resources_include(indent: str = "") -> str:
    """The header lines a wrapper needs: the helper's versioned namespace, then its include
    (lines after the first start with ``indent``).

    The namespace is named from a digest of the installed headers, so that wrappers built
    from different versions of them never share the helper's state (and Inductor's cache,
    keyed on the source, rebuilds them); without the headers the helper's default is used.
    """
    lines = []
    directory = _header_dir()
    if directory is not None:
        parts = os.path.join(directory, HELPER_PARTS)
        names = [HELPER_HEADER] + sorted(
            HELPER_PARTS + "/" + name for name in os.listdir(parts) if name.endswith(".h")
        )
        digest = hashlib.sha256()
        for name in names:
            with open(os.path.join(directory, *name.split("/")), "rb") as f:
                digest.update(name.encode() + b"\\0" + f.read() + b"\\0")
        lines.append(f"#define TORCH_NPU_LAUNCH_RESOURCES_ABI v_{digest.hexdigest()[:16]}")
    lines.append(f"#include <torch_npu/csrc/inductor/{HELPER_HEADER}>")
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


def _used_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _closure(source: str, roots: set[str]) -> tuple[list[ast.stmt], set[str]]:
    """(top-level statements defining ``roots`` and what they use, in source order; names used
    but defined elsewhere)."""
    tree = ast.parse(source)
    defs = {}
    for node in tree.body:
        for name in _defined_names(node):
            defs[name] = node
    wanted, todo, outside = set(), list(roots), set()
    while todo:
        name = todo.pop()
        node = defs.get(name)
        if node is None:
            outside.add(name)
            continue
        if id(node) in wanted:
            continue
        wanted.add(id(node))
        todo.extend(_used_names(node))
    return [n for n in tree.body if id(n) in wanted], outside


def _imported_from(source: str, module: str) -> set[str]:
    tree = ast.parse(source)
    return {a.asname or a.name for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == module
            for a in n.names}


def module_text() -> str:
    """The module, from the current ``launch_plan.py`` / ``launch_codegen.py``."""
    sources = {mod: Path(mod.__file__).read_text() for mod, _ in _ROOTS}
    plan_src, codegen_src = sources[launch_plan], sources[launch_codegen]
    api_names = _used_names(ast.parse(_API))
    # launch_codegen's names that come from launch_plan are roots there.
    from_plan = _imported_from(codegen_src, "launch_plan")
    codegen_nodes, codegen_outside = _closure(codegen_src, set(_ROOTS[1][1]) | (api_names - from_plan))
    plan_roots = set(_ROOTS[0][1]) | (codegen_outside & from_plan) | (api_names & _plan_defined(plan_src))
    plan_nodes, _ = _closure(plan_src, plan_roots)
    chunks = [_HEADER]
    for src, nodes in ((plan_src, plan_nodes), (codegen_src, codegen_nodes)):
        for node in nodes:
            chunks.append(_with_comments(src, node) + "\n\n")
    text = "".join(chunks).rstrip("\n") + "\n" + _API
    # Comments there point at this project's design notes; say whose they are.
    return text.replace("docs/design.md", "torch-npu-inductor-patches' docs/design.md")


def _plan_defined(source: str) -> set[str]:
    return {name for node in ast.parse(source).body for name in _defined_names(node)}


def _with_comments(source: str, node: ast.stmt) -> str:
    """The statement's text, with the comment lines right above it (``#:`` notes)."""
    lines = source.splitlines()
    start = node.lineno - 1
    if getattr(node, "decorator_list", None):
        start = min(d.lineno for d in node.decorator_list) - 1
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return "\n".join(lines[start:node.end_lineno])
