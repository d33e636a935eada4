"""Whole launchers in the shape torch_npu's C++ wrapper writes, for the tooling and the tests.

The runtime splices only :func:`~torch_npu._inductor.patchset.launch_codegen.resource_code`'s lines into
the launcher torch_npu generates; this module writes the rest of such a launcher around them
(docs/facts.md): ``ffts_addr`` when the target has FFTS, then the two sync pointers, the kernel's own
arguments packed as torch_npu packs them, ``grid_0..2``, the lambda handed to ``launchKernel``. The
``launcher`` command, the golden tests, the selftest's ``codegen`` check and the simulation and
real-runtime harnesses build launchers with it.

It re-exports ``launch_codegen``'s public names, so a tool needs one name (``lc``) for both.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

from ...launch_codegen import *  # noqa: F403  (re-exported: see the docstring)
from ...launch_codegen import LaunchSite, c_string, helper_include_lines, resource_code
from ...launch_plan import SyncPlan


@dataclasses.dataclass(frozen=True)
class KernelArg:
    """One of the kernel's own fields in the packed argument struct."""

    name: str  # struct field and local variable
    ctype: str  # C++ type
    align: int  # field alignment in bytes
    value: str  # C++ expression the local variable is initialised with

    @property
    def size(self) -> int:
        return _SIZES[self.ctype]


_SIZES = {
    "void*": 8, "int8_t": 1, "uint8_t": 1, "int16_t": 2, "uint16_t": 2, "int32_t": 4,
    "uint32_t": 4, "int64_t": 8, "uint64_t": 8, "float": 4, "double": 8,
}
# Triton signature type -> (C++ type in the struct, alignment), as torch_npu's
# wrapper lays them out (half types travel as float).
_SIGNATURE_TYPES = {
    "i1": ("int32_t", 4), "i8": ("int8_t", 1), "i16": ("int16_t", 2), "i32": ("int32_t", 4),
    "i64": ("int64_t", 8), "u1": ("uint32_t", 4), "u8": ("uint8_t", 1), "u16": ("uint16_t", 2),
    "u32": ("uint32_t", 4), "u64": ("uint64_t", 8), "fp16": ("float", 4), "bf16": ("float", 4),
    "fp32": ("float", 4), "f32": ("float", 4), "fp64": ("double", 8),
}


def args_from_signature(signature: str | Sequence[str]) -> list[KernelArg]:
    """Kernel arguments for a Triton signature such as ``'*fp32,*fp32,i32'``.

    Field ``var_N`` of a pointer is initialised from parameter ``in_ptrN``, of
    a scalar from ``argN``. Used by the ``launcher`` command and the tests.
    """
    items = [s.strip() for s in signature.split(",")] if isinstance(signature, str) else list(signature)
    out = []
    for i, ty in enumerate(t for t in items if t):
        if ty.startswith("*"):
            out.append(KernelArg(f"var_{i}", "void*", 8, f"in_ptr{i}"))
        elif ty in _SIGNATURE_TYPES:
            ctype, align = _SIGNATURE_TYPES[ty]
            out.append(KernelArg(f"var_{i}", ctype, align, f"arg{i}"))
        else:
            raise ValueError(f"unknown Triton signature type {ty!r} (known: '*<type>', {', '.join(_SIGNATURE_TYPES)})")
    return out


def own_args_bytes(kernel_args: Iterable[KernelArg]) -> int:
    """Bytes from the end of the sync fields to ``grid_0`` (padding included)."""
    offset = 0
    for a in kernel_args:
        offset = -(-offset // a.align) * a.align + a.size
    return -(-offset // 4) * 4  # grid_0 is 4-byte aligned


def args_decl_lines(plan: SyncPlan, site: LaunchSite, kernel_args: Sequence[KernelArg]) -> list[str]:
    """``aclError ret;``, ``ffts_addr``, the sync pointers and the packed struct."""
    simt = site.simt(plan)
    lines = ["aclError ret = ACL_SUCCESS;"]
    if site.has_ffts:
        lines += [
            "void* ffts_addr = nullptr;",
            "ret = aclrtGetHardwareSyncAddr(&ffts_addr);",
            "if (ret != ACL_SUCCESS) return ret;",
        ]
    lines += resource_code(plan, site).in_lambda
    for a in kernel_args:
        lines.append(f"{a.ctype} {a.name} = {a.value};")
    fields: list[tuple[str, str, int, str]] = []
    if site.has_ffts:
        fields.append(("void*", "ffts_addr", 8, "static_cast<void*>(ffts_addr)"))
    if not simt:
        fields.append(("void*", "sync_block_lock", 8, "sync_block_lock"))
        fields.append(("void*", "workspace_addr", 8, "workspace_addr"))
    fields += [(a.ctype, a.name, a.align, f"static_cast<{a.ctype}>({a.name})") for a in kernel_args]
    fields += [("int32_t", g, 4, f"static_cast<int32_t>({g})") for g in site.grid]
    lines.append("struct __attribute__((packed)) {")
    lines += [f"    {t} {n} __attribute__((aligned({al})));" for t, n, al, _ in fields]
    lines.append("} kernel_args = {")
    lines += [f"    {v}," for *_, v in fields[:-1]] + [f"    {fields[-1][3]}"]
    lines.append("};")
    return lines


def launch_lines(kernel_var: str, site: LaunchSite) -> list[str]:
    g0, g1, g2 = site.grid
    lines = [f"uint32_t block_num = {g0} * {g1} * {g2};"]
    if site.block_clamp is not None:
        lines.append(f"block_num = std::min(block_num, static_cast<uint32_t>({int(site.block_clamp)}));")
    lines += [
        f"ret = aclrtLaunchKernelWithHostArgs({kernel_var}, block_num, {site.stream}, nullptr,",
        "    static_cast<void*>(&kernel_args), sizeof(kernel_args), nullptr, 0);",
        "return ret;",
    ]
    return lines


def launch_lambda_lines(
    plan: SyncPlan, site: LaunchSite, kernel_args: Sequence[KernelArg], kernel_var: str
) -> list[str]:
    body = args_decl_lines(plan, site, kernel_args) + launch_lines(kernel_var, site)
    return ["auto launch_call = [=]() -> aclError {"] + ["    " + ln for ln in body] + ["};"]


def launcher_function_name(plan: SyncPlan) -> str:
    return "call_" + "".join(c if c.isalnum() or c == "_" else "_" for c in plan.kernel)


def launcher_source(
    plan: SyncPlan,
    site: LaunchSite,
    kernel_args: Sequence[KernelArg],
    kernel_var: str = "kernel_handle",
) -> str:
    """A self-contained launcher function (what ``launcher --emit-cpp`` prints).

    ``void call_<kernel>(aclrtFuncHandle kernel_handle, <kernel args>,
    uint32_t grid_0, uint32_t grid_1, uint32_t grid_2, aclrtStream stream_)``:
    the body torch_npu's deferred wrapper writes, the lambda handed to
    ``launchKernel`` (torch_npu's: ``OpCommand::RunOpApiV2``, which queues it
    for the task-queue thread or runs it at once; :func:`includes` defines it
    so). Needs ``#include "npu_launch_resources.h"`` (see :func:`includes`).
    """
    params = [f"aclrtFuncHandle {kernel_var}"]
    params += [f"{a.ctype} {a.value}" for a in kernel_args]
    params += [f"uint32_t {g}" for g in site.grid] + [f"aclrtStream {site.stream}"]
    g0, g1, g2 = site.grid
    code = resource_code(plan, site)
    out = [f"static inline void {launcher_function_name(plan)}("]
    out += [f"    {p}," for p in params[:-1]] + [f"    {params[-1]}) {{"]
    out.append(f"    if ({g0} == 0 || {g1} == 0 || {g2} == 0) return;")
    out += ["    " + ln for ln in code.before]
    out += ["    " + ln for ln in launch_lambda_lines(plan, site, kernel_args, kernel_var)]
    out.append(f"    launchKernel(launch_call, {c_string(plan.kernel)});")
    out += ["    " + ln for ln in code.after]
    out.append("}")
    return "\n".join(out) + "\n"


#: torch_npu's ``launchKernel`` as its NPU device-op overrides write it into every wrapper
#: (docs/facts.md): the lambda goes to ``OpCommand::RunOpApiV2``.
LAUNCH_KERNEL_LINES = [
    "static inline void launchKernel(std::function<int()> launch_call, const char* kernel_name) {",
    "    at_npu::native::OpCommand::RunOpApiV2(kernel_name, launch_call);",
    "}",
]


def includes() -> str:
    """What a translation unit of :func:`launcher_source` launchers starts with."""
    return "\n".join(
        [
            "#include <acl/acl.h>",
            "#include <torch_npu/csrc/framework/OpCommand.h>",
            "#include <algorithm>",
            "#include <cstdint>",
            "#include <functional>",
            "#include <stdexcept>",
            "#include <string>",
            *helper_include_lines(absolute=False),
            *LAUNCH_KERNEL_LINES,
        ]
    ) + "\n"
