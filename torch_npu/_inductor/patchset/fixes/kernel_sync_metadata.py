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

From 2.7.1.post11 on, torch_npu records the raw sync fields itself and the
launch patch plans from those; this patch then reports ``upstream-has-fix``
rather than store a second copy nobody reads.
"""
from __future__ import annotations

import functools
import inspect

from .._patching import Probe, source_of
from ..launch_plan import PARAMS_KEY, RAW_SYNC_FIELDS, plan_from_metadata
from ._shared import UPSTREAM_MODULE, UPSTREAM_SYNC_PARAMS_FN

MODULE = "torch_npu._inductor.runtime.triton_heuristics"
#: The older layout's module (releases whose C++ wrapper is codegen/cpp_wrapper.py).
OLDER_MODULE = "torch_npu._inductor.npu_triton_heuristics"
CLASS = "NPUCachingAutotuner"
METHOD = "save_gpu_kernel"
_MARK = "__torch_npu_patchset_sync_plan__"


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
    if f"{UPSTREAM_SYNC_PARAMS_FN}(" in (source_of(saver) if saver is not None else ""):
        return Probe.upstream_has_fix(f"{CLASS}.save_npu_kernel records the kernel's sync fields through "
                                      f"{UPSTREAM_MODULE}.{UPSTREAM_SYNC_PARAMS_FN} (the upstream form of this fix)")
    recorded = _recorded_raw_fields(cls)
    if "workspace_size" in recorded and ("lock_num" in recorded or "sync_block_lock_layout" in recorded):
        # One source of truth: the launch patch reads these fields (launch_plan.plan_from_params).
        return Probe.upstream_has_fix(f"{CLASS}.save_npu_kernel records the raw sync fields {', '.join(recorded)}; "
                                      f"cpp-wrapper-sync-resources plans the launch from them")
    return Probe.needed(f"{_module(modules).__name__}.{CLASS}.{METHOD}{inspect.signature(fn)} saves params "
                        f"without the kernel's sync fields")


def _recorded_raw_fields(cls) -> list[str]:
    """The raw sync fields upstream's own save path writes into the params (2.7.1.post11 on)."""
    saver = getattr(cls, "save_npu_kernel", None)
    src = source_of(saver) if saver is not None else ""
    return [f for f in RAW_SYNC_FIELDS if f'"{f}"' in src or f"'{f}'" in src]


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
    return "stores the validated sync plan in the kernel's saved params"
