"""A release's rendered launchers in the host ACL simulation (a test double): the glue they need there,
and the judge's verdict on one sample or on every sample.

The rendered ``call_<kernel>`` functions come from ``wheel_harness`` (JIT or aot_mode, patched or as
shipped). ``loadKernel`` hands out the simulation's probe kernel; ``launchKernel`` is torch_npu's
(``launch_codegen.includes()``: the lambda to ``OpCommand::RunOpApiV2``, the simulated task queue), so
memory is taken on the calling thread and the lambda runs where torch_npu would run it.
"""
from __future__ import annotations

import json
import math
from typing import Callable

from ...launch_plan import plan_from_metadata
from ..sim import build as sim_build
from ..sim import harness as sim_harness
from ..sim import launcher_writer as lc
from ..sim.samples import SAMPLES

SIM_PREAMBLE = r"""
#include <cstdint>
#include <optional>
#include <string>
#pragma GCC diagnostic ignored "-Wunused-variable"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// A rendered launcher inside the simulation's launch harness. loadKernel hands out the probe kernel
// whatever a release passes it; launchKernel is torch_npu's (launch_codegen.includes(): the lambda goes
// to OpCommand::RunOpApiV2, the simulated task queue), so the launcher runs on the calling thread and
// its lambda where torch_npu would run it.
static aclrtFuncHandle g_matrix_probe = nullptr;
template <typename... Args> [[maybe_unused]] static void* loadKernel(Args&&...) { return g_matrix_probe; }
struct MatrixTensor { void* p; void* data_ptr() const { return p; } };
"""

#: The older layout launches through CANN's legacy rt* API, which the simulation does not offer:
#: these forward to the ACL calls it does offer (the matrix's own glue, not part of the simulation).
SIM_LEGACY_RT = r"""
typedef int32_t rtError_t;
#define RT_ERROR_NONE 0
static rtError_t rtKernelLaunch(const void* fn, uint32_t blocks, void* args, uint32_t size, void*, aclrtStream s) {
  return aclrtLaunchKernelWithHostArgs(const_cast<void*>(fn), blocks, s, nullptr, args, size, nullptr, 0);
}
[[maybe_unused]] static rtError_t rtGetC2cCtrlAddr(uint64_t* addr, uint32_t* len) {
  void* p = nullptr;
  aclError rc = aclrtGetHardwareSyncAddr(&p);
  *addr = reinterpret_cast<uint64_t>(p);
  *len = 0;
  return rc;
}
"""


def sample_setup(harness: dict, sample, tag: str = "patched") -> tuple:
    """(plan, site, kernel_args, grid) of one rendered sample launcher, as the simulation runs it."""
    entry = harness[tag][sample.key]
    plan = plan_from_metadata(sample.metadata, kernel=f"{sample.kernel}_{tag}")
    if harness.get("launch_api") == "rtKernelLaunch":  # that layout never clamps; FFTS as its launcher says
        site = lc.LaunchSite(block_clamp=None, has_ffts="void* ffts_addr __attribute__" in entry["cpp"], simt_only=False)
    else:
        site = lc.LaunchSite(block_clamp=sample.block_clamp, has_ffts=sample.has_ffts, simt_only=False)
    args = lc.args_from_signature("*fp32,*fp32,i32")  # the harness kernel's own arguments
    grid = (math.prod(sample.grid), 1, 1)  # XBLOCK=64: numel = 64 * grid_0
    return plan, site, args, grid


def rendered_call(entry_cpp: str, function: str, grid0: int) -> str:
    """The harness's call expression for a rendered launcher ``function`` (``in_ptr0, out_ptr0, xnumel``,
    XBLOCK 64; newer wrappers also take the device index): 0 once its launch is queued."""
    device_idx = "0, " if "int32_t device_idx_," in entry_cpp else ""
    return (f"(g_matrix_probe = kernel_handle, {function}(MatrixTensor{{bufs[0]}}, MatrixTensor{{bufs[1]}}, "
            f"static_cast<int64_t>({64 * grid0}), {device_idx}stream), 0)")


def rendered_source(entry_cpp: str, legacy: bool) -> str:
    """A rendered launcher with the glue it needs in the simulation harness."""
    return SIM_PREAMBLE + (SIM_LEGACY_RT if legacy else "") + entry_cpp


def simulate_sample(release: str, harness: dict, sample, inject_fault: str | None = None, tag: str = "patched") -> dict:
    """Run one rendered launcher of ``harness`` (``tag``: patched or upstream) in the host simulation; the
    judge's verdict."""
    entry = harness[tag][sample.key]
    plan, site, args, grid = sample_setup(harness, sample, tag)
    call = rendered_call(entry["cpp"], f"call_{sample.kernel}_{tag}", grid[0])
    cpp = rendered_source(entry["cpp"], harness.get("launch_api") == "rtKernelLaunch")
    src = sim_harness.harness_source(plan, site, args, grid, launcher_cpp=cpp, call=call, inject_fault=inject_fault)
    name = f"matrix-{release}-{tag}-{sample.key}" + (f"-{inject_fault}" if inject_fault else "")
    return sim_harness.judge(plan, site, grid, sim_harness.run_program(sim_build.compile_program(src, name)),
                              inject_fault=inject_fault)


def each_sample(run_one: Callable[[object], dict], explain: Callable[[Exception], str] | None = None) -> tuple[str, list]:
    """``run_one(sample)`` (a judge's verdict) for every sample: ("k/N launchers ok", the problems); ``explain``
    turns an exception into its one line (default: its first line)."""
    ok, problems = 0, []
    for s in SAMPLES:
        try:
            verdict = run_one(s)
        except Exception as exc:
            why = explain(exc) if explain else str(exc).strip().splitlines()[0]
            problems.append(f"{s.key}: {type(exc).__name__}: {why[:300]}")
            continue
        if verdict.get("ok"):
            ok += 1
        else:
            problems.append(f"{s.key}: {json.dumps([x['problems'] for x in verdict['launches']])[:300]}")
    return f"{ok}/{len(SAMPLES)} launchers ok", problems


def simulate(release: str, harness: dict) -> tuple[str, list]:
    """Every patched launcher of ``harness`` in the host simulation."""
    def one(s):
        if "cpp" not in harness.get("patched", {}).get(s.key, {}):
            raise LookupError("not rendered")
        return simulate_sample(release, harness, s)

    return each_sample(one)
