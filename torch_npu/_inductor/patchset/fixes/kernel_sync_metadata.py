"""kernel-sync-metadata: the saved params of every NPU Triton kernel carry its sync plan.

Wraps ``NPUCachingAutotuner.save_gpu_kernel(stream, launcher)`` (torch_npu
2.7.1.post8 and later; every save for the C++ wrapper goes through it). The
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
CLASS = "NPUCachingAutotuner"
METHOD = "save_gpu_kernel"
_MARK = "__torch_npu_patchset_sync_plan__"
_RAW_FIELDS = ("workspace_size", "lock_init_val", "sync_block_lock_layout")


def _cls(modules):
    return getattr(modules[MODULE], CLASS, None)


def probe(modules) -> Probe:
    cls = _cls(modules)
    if cls is None:
        return Probe.unrecognised(f"{MODULE} has no {CLASS}")
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
    why = f"{CLASS}.{METHOD}(self, stream, launcher) saves params without a sync plan"
    if upstream_fields:
        why += f" (upstream records the raw fields {', '.join(upstream_fields)}; the plan is validated and laid out)"
    return Probe.needed(why)


def apply(modules, patcher) -> str:
    cls = _cls(modules)
    original = getattr(cls, METHOD)
    if getattr(original, _MARK, False):
        return "already applied"

    @functools.wraps(original)
    def save_gpu_kernel(self, stream, launcher):
        from torch._inductor.codecache import CudaKernelParamCache

        inductor_meta = getattr(self, "inductor_meta", None) or {}
        name = inductor_meta.get("kernel_name")
        metadata = getattr(getattr(launcher, "bin", None), "metadata", None)
        plan = plan_from_metadata({} if metadata is None else metadata, kernel=name)
        result = original(self, stream, launcher)
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
