"""cpp-wrapper-sync-resources on the older layout: ``codegen/cpp_wrapper.py``, launch through ``rtKernelLaunch``.

Releases checked with this layout: torch_npu 2.7.1, 2.7.1.post2, post4, post6,
2.8.0.post5, 2.9.1, 2.11.0.post3, 2.12.0.post3. Their
``torch_npu._inductor.codegen.cpp_wrapper`` defines ``CppWrapperNpu`` and
``DeferredNpuTritonCallWrapper`` (no ``cpp_wrapper_npu.py``), and
``CppWrapperNpu.generate_args_decl(code, call_args, arg_types, arg_signatures,
kernel_name, kernel_id, is_triton_kernel=True)`` RETURNS the whole launch
lambda as text, ``(call_name, text)``: ``auto launch_call_<id> = [=]() {
rtError_t ret; ... void* workspace_addr = NULL; void* sync_block_lock = NULL;
<packed struct> uint32_t block_num = grid_0 * grid_1 * grid_2; ret =
rtKernelLaunch(...); return ret; };``. No release of this layout clamps the
block count (no auto-blockify) or honours a SIMT-only flag (the struct always
has both sync fields).

This module wraps three members of that module:

* ``DeferredNpuTritonCallWrapper.generate_launch_kernel`` makes the kernel's
  saved params (and name) known to the call below, through a context variable,
  and afterwards puts the launch's release right after its ``launchKernel(...)``;
* ``CppWrapperNpu.generate_args_decl`` checks that the text upstream returned
  is the known shape (one NULL ``workspace_addr``, one NULL ``sync_block_lock``,
  an unclamped ``block_num``, one ``rtKernelLaunch``), writes the calling-thread
  part of :func:`~torch_npu._inductor.patchset.launch_codegen.resource_code`
  into the launcher's buffer (upstream writes the lambda after it) and swaps the
  two NULL declarations for its lambda part; ``rtKernelLaunch`` and everything
  else stay as upstream wrote them;
* ``CppWrapperNpu.write_header`` appends the runtime helper's include after the
  header upstream wrote (nothing for a constant graph, which has no header).

As in the newer layout, an unknown shape is refused at probe time, and one
that only shows when rendering raises rather than emit NULL sync pointers.
"""
from __future__ import annotations

import functools
import inspect
import re

from .. import launch_codegen
from .._patching import Probe, source_of
from ..launch_codegen import LaunchSite, resource_code
from ..launch_plan import plan_from_params
from . import _shared
from ._shared import LAUNCH_PARAMS, NULL_LOCK, NULL_WORKSPACE

MODULE = "torch_npu._inductor.codegen.cpp_wrapper"
LAYOUT = "codegen/cpp_wrapper.py (rtKernelLaunch)"
_MARK = "__torch_npu_patchset_sync_resources_rt__"

_ARGS_DECL_PARAMS = ["self", "code", "call_args", "arg_types", "arg_signatures", "kernel_name", "kernel_id",
                     "is_triton_kernel"]

_BLOCK_NUM = re.compile(r"\bblock_num\s*=\s*grid_0\s*\*\s*grid_1\s*\*\s*grid_2\s*;")
_ANY_CLAMP = re.compile(r"std::min\(\s*block_num\b")
_RT_LAUNCH = re.compile(r"\brtKernelLaunch\(")


def shape(modules) -> tuple[str, str]:
    """(shape, detail): 'null-pointers', 'ours', 'upstream-fix' or 'unknown'."""
    unknown, members = _shared.launch_members(modules, MODULE, "CppWrapperNpu.write_header")
    if unknown:
        return unknown
    args_decl, launch, write_header = members.values()
    if getattr(args_decl, _MARK, False):
        return "ours", "already patched"
    fixed = _shared.upstream_form(args_decl, launch)
    if fixed:
        return "upstream-fix", f"{LAYOUT}: {fixed}"
    if _shared.param_names(args_decl) != _ARGS_DECL_PARAMS:
        return "unknown", (f"CppWrapperNpu.generate_args_decl{inspect.signature(args_decl)} is not (code, call_args, "
                           "arg_types, arg_signatures, kernel_name, kernel_id, is_triton_kernel)")
    if _shared.param_names(launch) != LAUNCH_PARAMS:
        return "unknown", "DeferredNpuTritonCallWrapper.generate_launch_kernel is not (prefix, wrapper, kernel_var_name, params)"
    if _shared.param_names(write_header) != ["self"]:
        return "unknown", "CppWrapperNpu.write_header is not (self)"
    src = source_of(args_decl)
    if not src:
        return "unknown", "the source of CppWrapperNpu.generate_args_decl is not readable"
    lacking = [what for what, found in (
        ("void* workspace_addr = NULL", NULL_WORKSPACE.search(src + "\n")),
        ("void* sync_block_lock = NULL", NULL_LOCK.search(src + "\n")),
        ("rtKernelLaunch(", _RT_LAUNCH.search(src)),
        ("block_num = grid_0 * grid_1 * grid_2", _BLOCK_NUM.search(src)),
    ) if not found]
    if lacking:
        return "unknown", f"CppWrapperNpu.generate_args_decl does not contain {', '.join(lacking)}"
    if "allocate_workspace" in src or _ANY_CLAMP.search(src):
        return "unknown", "CppWrapperNpu.generate_args_decl allocates or clamps the block count in a way this patch does not know"
    return "null-pointers", f"upstream ({LAYOUT}) passes NULL sync_block_lock and workspace_addr to rtKernelLaunch"


def probe(modules) -> Probe:
    return _shared.probe_of_shape(*shape(modules), prefix=f"{LAYOUT}: ")


def checked_code(text: str, plan, kernel: str):
    """The :class:`~..launch_codegen.ResourceCode` for ``text``, upstream's launch lambda, once it is checked to be
    the known shape (one launch, an unclamped block count, no allocation of its own); raises on any other."""
    if len(_RT_LAUNCH.findall(text)) != 1 or len(_BLOCK_NUM.findall(text)) != 1 or _ANY_CLAMP.search(text):
        raise RuntimeError(
            f"torch_npu_patchset: launch code for {kernel} does not launch once with an unclamped "
            f"block_num = grid_0 * grid_1 * grid_2; the unordered locks' participant count would be wrong"
        )
    if "allocate_workspace" in text:
        raise RuntimeError(f"torch_npu_patchset: upstream launch code for {kernel} allocates a workspace itself")
    # The struct always has both sync fields here (no SIMT-only launch in this layout).
    return resource_code(plan, LaunchSite(block_clamp=None, simt_only=False))


def apply(modules, patcher) -> str:
    if not _shared.needs_applying(shape(modules), "null-pointers"):
        return "already applied"
    _, wrapper_cls, deferred_cls = _shared.wrapper_classes(modules, MODULE)
    orig_args_decl, orig_launch, orig_header = _shared.launch_members(modules, MODULE, "CppWrapperNpu.write_header")[1].values()
    args_sig = inspect.signature(orig_args_decl)

    @functools.wraps(orig_launch)
    def generate_launch_kernel(self, prefix, wrapper, kernel_var_name, params):
        launch = _shared.Launch(str(getattr(self, "kernel_name", kernel_var_name)), params)
        with _shared.generating(launch, prefix) as starts:
            result = orig_launch(self, prefix, wrapper, kernel_var_name, params)
        _shared.release_after_launches(prefix, starts, launch.afters, launch.kernel)
        return result

    @functools.wraps(orig_args_decl)
    def generate_args_decl(self, *args, **kwargs):
        bound = args_sig.bind(self, *args, **kwargs)
        bound.apply_defaults()
        result = orig_args_decl(*bound.args, **bound.kwargs)
        if not bound.arguments["is_triton_kernel"]:
            return result
        launch = _shared.current_launch()
        if launch is None:
            raise RuntimeError(
                f"torch_npu_patchset: CppWrapperNpu.generate_args_decl was called for {bound.arguments['kernel_name']} "
                "outside DeferredNpuTritonCallWrapper.generate_launch_kernel; refusing to size sync resources whose "
                "release cannot be placed after the launch"
            )
        plan = plan_from_params(launch.params, launch.kernel)
        call, text = result
        return call, launch.splice(bound.arguments["code"], text, checked_code(text, plan, launch.kernel))

    @functools.wraps(orig_header)
    def write_header(self):
        before = len(self.header.getvalue())
        result = orig_header(self)
        if len(self.header.getvalue()) > before:  # upstream wrote a header (not a constant graph)
            self.header.splice("\n".join(_shared.header_include_lines()))
        return result

    for fn in (generate_args_decl, generate_launch_kernel, write_header):
        setattr(fn, _MARK, True)
    patcher.setattr(deferred_cls, "generate_launch_kernel", generate_launch_kernel)
    patcher.setattr(wrapper_cls, "generate_args_decl", generate_args_decl)
    patcher.setattr(wrapper_cls, "write_header", write_header)
    return (f"{LAYOUT}: replaced the NULL sync_block_lock / workspace_addr arguments of rtKernelLaunch "
            f"with {launch_codegen.LAUNCH_MEMORY}")
