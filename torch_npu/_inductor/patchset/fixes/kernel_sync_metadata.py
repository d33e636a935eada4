"""kernel-sync-metadata: the saved params of every NPU Triton kernel carry its sync plan.

Wraps ``NPUCachingAutotuner.save_gpu_kernel(stream, launcher)``: in
``runtime/triton_heuristics.py`` (torch_npu 2.7.1.post8 and later) or, in the
older layout whose C++ wrapper is ``codegen/cpp_wrapper.py`` (2.7.1 to
2.7.1.post6, 2.8.0.post5, 2.9.1, 2.11.0.post3, 2.12.0.post3), in
``npu_triton_heuristics.py``, where the parameters are named
``(input_stream, input_launcher)`` in some releases. Every save for the C++
wrapper goes through it in both. The
launcher's ``bin.metadata`` is validated into a
:class:`~torch_npu._inductor.patchset.launch_plan.SyncPlan` *before* upstream
saves anything (bad metadata raises ``ValueError`` naming kernel, field and
value), then the plan is stored, as a plain dict, in the params dict that
``CudaKernelParamCache`` keeps for the kernel, under ``"npu_sync_plan"``.
"""
from __future__ import annotations

import functools
import inspect

from .._patching import Probe, source_of
from ..launch_plan import PARAMS_KEY, plan_from_metadata

MODULE = "torch_npu._inductor.runtime.triton_heuristics"
#: The older layout's module (releases whose C++ wrapper is codegen/cpp_wrapper.py).
OLDER_MODULE = "torch_npu._inductor.npu_triton_heuristics"
CLASS = "NPUCachingAutotuner"
METHOD = "save_gpu_kernel"
_MARK = "__torch_npu_patchset_sync_plan__"
_RAW_FIELDS = ("workspace_size", "lock_init_val", "sync_block_lock_layout")


def _module(modules):
    return modules[MODULE] if MODULE in modules else modules[OLDER_MODULE]


def _cls(modules):
    return getattr(_module(modules), CLASS, None)


def probe(modules) -> Probe:
    cls = _cls(modules)
    if cls is None:
        return Probe.unrecognised(f"{_module(modules).__name__} has no {CLASS}")
    fn = getattr(cls, METHOD, None)
    if not callable(fn):
        return Probe.unrecognised(f"{CLASS}.{METHOD} is not a method")
    if getattr(fn, _MARK, False):
        return Probe.needed(f"{CLASS}.{METHOD} already carries this patch's hook")
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return Probe.unrecognised(f"cannot read the signature of {CLASS}.{METHOD}")
    if len(params) != 3 or params[0] != "self":
        return Probe.unrecognised(f"{CLASS}.{METHOD}{inspect.signature(fn)} is not (self, stream, launcher)")
    saver = getattr(cls, "save_npu_kernel", None)
    upstream_fields = [f for f in _RAW_FIELDS if f in source_of(saver)] if saver else []
    why = f"{_module(modules).__name__}.{CLASS}.{METHOD}{inspect.signature(fn)} saves params without a sync plan"
    if upstream_fields:
        why += f" (upstream records the raw fields {', '.join(upstream_fields)}; the plan is validated and laid out)"
    return Probe.needed(why)


def apply(modules, patcher) -> str:
    cls = _cls(modules)
    original = getattr(cls, METHOD)
    if getattr(original, _MARK, False):
        return "already applied"

    signature = inspect.signature(original)
    launcher_param = list(signature.parameters)[2]  # launcher or input_launcher

    @functools.wraps(original)
    def save_gpu_kernel(self, *args, **kwargs):
        from torch._inductor.codecache import CudaKernelParamCache

        launcher = signature.bind(self, *args, **kwargs).arguments[launcher_param]

        inductor_meta = getattr(self, "inductor_meta", None) or {}
        name = inductor_meta.get("kernel_name")
        metadata = getattr(getattr(launcher, "bin", None), "metadata", None)
        plan = plan_from_metadata({} if metadata is None else metadata, kernel=name)
        result = original(self, *args, **kwargs)
        params = CudaKernelParamCache.get(name) if name is not None else None
        if params is not None:
            params[PARAMS_KEY] = plan.to_dict()
        return result

    setattr(save_gpu_kernel, _MARK, True)
    patcher.setattr(cls, METHOD, save_gpu_kernel)
    saver = getattr(cls, "save_npu_kernel", None)
    if saver is not None and "workspace_size" in source_of(saver):
        return "stores the validated sync plan beside the raw fields upstream already records"
    return "stores the validated sync plan in the kernel's saved params"
