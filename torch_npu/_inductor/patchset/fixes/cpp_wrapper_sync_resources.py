"""cpp-wrapper-sync-resources: generated launchers get real, disjoint sync resources.

torch_npu's C++ wrapper writes, per Triton kernel, a launch lambda whose first
part comes from ``CppWrapperNpu.generate_args_decl``. Known shapes of it:

* 2.7.1.post8 / post10: declares ``void* workspace_addr = NULL;`` and
  ``void* sync_block_lock = NULL;`` and passes them to the kernel;
* 2.7.1.post11: given ``kernel_params`` with the kernel's sync fields, it
  additionally asks ``at_npu::native::allocate_workspace`` for the workspace
  and again for the locks, and fills the locks with a blocking ``aclrtMemcpy``;
* 2.13.0 (the newest line checked): post11's code, with the SIMT flag renamed
  ``is_pure_simt``, the helper include added by the instance method
  ``add_device_include`` (torch's newer ``CppWrapperGpu`` API), and grouped
  launches whose variants each pass their own ``kernel_params``.

This patch wraps three members:

* ``DeferredNpuTritonCallWrapper.generate_launch_kernel`` makes the kernel's
  params and its auto-blockify decision known to the call below (a context
  variable); afterwards it puts each launch's release right after its
  ``launchKernel(...)`` and checks that the launch code torch_npu wrote clamps
  the block count the way our code assumed;
* ``CppWrapperNpu.generate_args_decl`` (handed the launcher's buffer, into
  which upstream then writes the lambda) calls upstream with the sync fields
  hidden (so post11 emits no allocation of its own), checks that what came back
  is the NULL-pointer shape, writes the calling-thread part of
  :func:`~torch_npu._inductor.patchset.launch_codegen.resource_code` into the
  buffer and replaces the two NULL declarations with its lambda part;
* ``CppWrapperNpu.get_device_include_path`` (static, 2.7.1) or
  ``CppWrapperNpu.add_device_include`` (newer) adds the runtime helper's header.

Anything else than the known shapes is refused at probe time (``failed:
<what differs>``) or, if it only shows when rendering, raises rather than
emit a launcher with NULL or aliasing sync pointers.
"""
from __future__ import annotations

import functools
import inspect
import re

from .. import launch_codegen
from .._patching import Probe, source_of
from ..launch_codegen import LaunchSite, resource_code
from ..launch_plan import RAW_SYNC_FIELDS, SIMT_FLAGS, plan_from_params
from . import _shared, cpp_wrapper_rt_launch
from ._shared import HEADER_PATH, LAUNCH_PARAMS, NULL_LOCK, NULL_WORKSPACE  # noqa: F401  (HEADER_PATH: kept importable)

MODULE = "torch_npu._inductor.codegen.cpp_wrapper_npu"
_MARK = "__torch_npu_patchset_sync_resources__"

_ARGS_DECL_PARAMS = ["self", "code", "call_args", "arg_types", "arg_signatures", "is_triton_kernel"]

_UPSTREAM_ALLOC = ("allocate_workspace", "aclrtMemcpy(")
_UPSTREAM_CLAMP = re.compile(r"\bblock_num\s*=\s*std::min\(\s*block_num\s*,\s*\(uint32_t\)\s*(\d+)\s*\)")
_OUR_CLAMP = re.compile(r"npu_sync_block_num = std::min\(npu_sync_block_num, static_cast<uint32_t>\((\d+)\)\)")


def _shape(modules) -> tuple[str, str]:
    """(shape, detail): shape is 'null-pointers', 'double-allocate', 'ours', 'upstream-fix' or 'unknown'."""
    unknown, members = _shared.launch_members(modules, MODULE)
    if unknown:
        return unknown
    args_decl, launch = members.values()
    mod, wrapper_cls, deferred_cls = _shared.wrapper_classes(modules, MODULE)
    include = _include_hook(wrapper_cls)
    if include is None:
        return "unknown", f"CppWrapperNpu.get_device_include_path or .add_device_include not defined in {MODULE}"
    if getattr(args_decl, _MARK, False):
        return "ours", "already patched"
    fixed = _shared.upstream_form(args_decl, launch, deferred_cls.__dict__.get("_generate_single_kernel_launch"))
    if fixed:
        return "upstream-fix", fixed
    names = _shared.param_names(args_decl)
    n = len(_ARGS_DECL_PARAMS)
    if (names[:n] != _ARGS_DECL_PARAMS or len(names) <= n or names[n] not in SIMT_FLAGS
            or not set(names[n + 1:]) <= {"kernel_params"}):
        return "unknown", f"CppWrapperNpu.generate_args_decl{inspect.signature(args_decl)} is not (code, call_args, arg_types, arg_signatures, is_triton_kernel, force_simt_only | is_pure_simt[, kernel_params])"
    if _shared.param_names(launch) != LAUNCH_PARAMS:
        return "unknown", f"DeferredNpuTritonCallWrapper.generate_launch_kernel{inspect.signature(launch)} is not (prefix, wrapper, kernel_var_name, params)"
    if include == "get_device_include_path" and not isinstance(
            inspect.getattr_static(wrapper_cls, "get_device_include_path"), staticmethod):
        return "unknown", "CppWrapperNpu.get_device_include_path is not a staticmethod"
    if include == "add_device_include" and _shared.param_names(wrapper_cls.__dict__[include]) != ["self", "device"]:
        return "unknown", f"CppWrapperNpu.add_device_include{inspect.signature(wrapper_cls.__dict__[include])} is not (device)"
    src = source_of(args_decl)
    if not src:
        return "unknown", "the source of CppWrapperNpu.generate_args_decl is not readable"
    if not ("workspace_addr = NULL" in src and "sync_block_lock = NULL" in src):
        return "unknown", "CppWrapperNpu.generate_args_decl does not declare NULL workspace_addr / sync_block_lock"
    if not hasattr(mod, "triton_support_auto_blockify") or not hasattr(getattr(mod, "npu_config", None), "num_vector_core"):
        return "unknown", f"{MODULE} lacks triton_support_auto_blockify or npu_config.num_vector_core"
    if "kernel_params" in names and "allocate_workspace" in src:
        return "double-allocate", "upstream allocates workspace and locks with two allocate_workspace calls and a blocking aclrtMemcpy"
    if "kernel_params" not in names and "allocate_workspace" not in src:
        return "null-pointers", "upstream passes NULL sync_block_lock and workspace_addr"
    return "unknown", "CppWrapperNpu.generate_args_decl allocates in a way this patch does not know"


def _include_hook(wrapper_cls) -> str | None:
    """Where the launcher's includes are written: torch_npu 2.7.1's static
    ``get_device_include_path``, else newer torch's ``add_device_include``."""
    for name in ("get_device_include_path", "add_device_include"):
        if name in wrapper_cls.__dict__:
            return name
    return None


def probe(modules) -> Probe:
    if cpp_wrapper_rt_launch.MODULE in modules:  # the older layout (codegen/cpp_wrapper.py)
        return cpp_wrapper_rt_launch.probe(modules)
    return _shared.probe_of_shape(*_shape(modules))


def _block_clamp(mod, params: dict, kernel_params: dict | None) -> int | None:
    if kernel_params is not None and "enable_auto_blockify" in kernel_params:
        enabled = bool(kernel_params["enable_auto_blockify"])
    else:  # the rule torch_npu's generate_launch_kernel applies
        enabled = not params.get("has_auto_blockify_blacklist_op", False) and bool(mod.triton_support_auto_blockify())
    return int(mod.npu_config.num_vector_core) if enabled else None


def apply(modules, patcher) -> str:
    if cpp_wrapper_rt_launch.MODULE in modules:
        return cpp_wrapper_rt_launch.apply(modules, patcher)
    shape, detail = _shape(modules)
    if shape == "ours":
        return "already applied"
    if shape not in ("null-pointers", "double-allocate"):
        raise RuntimeError(detail)
    mod, wrapper_cls, deferred_cls = _shared.wrapper_classes(modules, MODULE)
    orig_args_decl, orig_launch = _shared.launch_members(modules, MODULE)[1].values()
    include_hook = _include_hook(wrapper_cls)
    args_sig = inspect.signature(orig_args_decl)
    simt_param = _shared.param_names(orig_args_decl)[len(_ARGS_DECL_PARAMS)]

    @functools.wraps(orig_launch)
    def generate_launch_kernel(self, prefix, wrapper, kernel_var_name, params):
        clamp = _block_clamp(mod, params, None)
        launch = _shared.Launch(self.kernel_name, params, clamp)
        before = len(prefix.getvalue())
        with _shared.generating(launch, prefix) as starts:
            result = orig_launch(self, prefix, wrapper, kernel_var_name, params)
        written = prefix.getvalue()[before:]
        # One launch per kernel, or one per variant of a grouped launch (newer torch_npu): every
        # launch whose resources we sized must clamp its block count the way we assumed.
        for launch_code in re.split(r"^\s*launchKernel\(.*$", written, flags=re.M)[:-1] or [written]:
            upstream_clamp, ours = _UPSTREAM_CLAMP.search(launch_code), _OUR_CLAMP.search(launch_code)
            if "npu_sync_block_num" in launch_code and (upstream_clamp and upstream_clamp.group(1)) != (ours and ours.group(1)):
                raise RuntimeError(
                    f"torch_npu_patchset: launch code for {self.kernel_name} clamps the block count differently "
                    f"(torch_npu: {upstream_clamp and upstream_clamp.group(0)!r}, ours: {ours and ours.group(0)!r}); "
                    f"the unordered locks' participant count would be wrong"
                )
        _shared.release_after_launches(prefix, starts, launch.afters, self.kernel_name)
        return result

    @functools.wraps(orig_args_decl)
    def generate_args_decl(self, *args, **kwargs):
        bound = args_sig.bind(self, *args, **kwargs)
        bound.apply_defaults()
        launch = _shared.current_launch()
        kernel_params = bound.arguments.get("kernel_params")
        if not bound.arguments["is_triton_kernel"] or (launch is None and kernel_params is None):
            return orig_args_decl(*bound.args, **bound.kwargs)  # not a launch lambda of torch_npu's
        if launch is None:
            raise RuntimeError(
                "torch_npu_patchset: CppWrapperNpu.generate_args_decl was called for a Triton kernel outside "
                "DeferredNpuTritonCallWrapper.generate_launch_kernel; refusing to size sync resources whose "
                "release cannot be placed after the launch"
            )
        clamp = launch.block_clamp
        if kernel_params is not None and "enable_auto_blockify" in kernel_params:  # the launch's own decision
            clamp = _block_clamp(mod, launch.params, kernel_params)
        # kernel_params, when given, describe this very launch (a grouped variant's own fields).
        plan = plan_from_params(kernel_params if kernel_params is not None else launch.params, launch.kernel)
        if kernel_params is not None:  # post11 and later: keep upstream from allocating on its own
            bound.arguments["kernel_params"] = {k: v for k, v in kernel_params.items() if k not in RAW_SYNC_FIELDS}
        text = orig_args_decl(*bound.args, **bound.kwargs)
        leftovers = [s for s in _UPSTREAM_ALLOC if s in text]
        if leftovers:
            raise RuntimeError(f"torch_npu_patchset: upstream launch code for {launch.kernel} still contains {leftovers}")
        simt = bool(bound.arguments[simt_param])
        if simt:
            if NULL_WORKSPACE.search(text) or NULL_LOCK.search(text) or "sync_block_lock" in text:
                raise RuntimeError(f"torch_npu_patchset: SIMT-only launch code for {launch.kernel} has sync fields")
            launch.afters.append([])
            return text
        code = resource_code(plan, LaunchSite(block_clamp=clamp, simt_only=False))
        return launch.splice(bound.arguments["code"], text, code)

    if include_hook == "get_device_include_path":
        orig_include = inspect.getattr_static(wrapper_cls, include_hook).__func__

        def include_fn(device: str) -> str:
            return orig_include(device) + "".join(f"\n        {ln}" for ln in _shared.header_include_lines()) + "\n"

        new_include = staticmethod(functools.update_wrapper(include_fn, orig_include))
    else:
        orig_add = wrapper_cls.__dict__[include_hook]

        @functools.wraps(orig_add)
        def include_fn(self, device):
            result = orig_add(self, device)
            if not getattr(self, "_npu_sync_resources_included", False):  # once per wrapper, like torch's own
                self.header.splice("\n".join(_shared.header_include_lines()))
                self._npu_sync_resources_included = True
            return result

        new_include = include_fn
    for fn in (generate_args_decl, generate_launch_kernel, include_fn):
        setattr(fn, _MARK, True)
    patcher.setattr(deferred_cls, "generate_launch_kernel", generate_launch_kernel)
    patcher.setattr(wrapper_cls, "generate_args_decl", generate_args_decl)
    patcher.setattr(wrapper_cls, include_hook, new_include)
    if shape == "double-allocate":
        return ("replaced upstream's allocation (two allocate_workspace requests per launch and a blocking "
                f"aclrtMemcpy of the locks) with {launch_codegen.LAUNCH_MEMORY}")
    return f"replaced the NULL sync_block_lock / workspace_addr arguments with {launch_codegen.LAUNCH_MEMORY}"
