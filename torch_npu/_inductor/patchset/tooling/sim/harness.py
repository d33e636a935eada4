"""The host ACL simulation's launch harness and the judge's pure parts.

* :func:`expected`, :func:`expected_lock_content`, :func:`rle`, :func:`content_text`, :func:`kernel_problems`:
  what a launch needs and the rules a kernel's memory is judged by; the real-runtime tier judges torch_npu's own
  runs with them (``releases/real_runtime_judge.py``).
* :func:`harness_source`, :func:`run_program`, :func:`judge`: a launcher built with the probe kernel into one
  program over the simulation's stand-ins of torch_npu (memory on the calling thread, the lambda through the
  simulated task queue), still used by the release matrix's simulation columns (``releases/rendered.py``,
  ``releases/aot_sim.py``) and ``upstream/verify.py``. The launcher command, the goldens and the selftest run
  launchers on torch_npu's own runtime instead (``releases/real_sources.py``; issue 30 item 4).

A TEST DOUBLE and dry-run tool, not an NPU runtime.
"""
from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Sequence

from ...launch_plan import SyncPlan
from . import expected_memory
from . import launcher_writer as lc

LAUNCHES = 2
PROBE_TIME_US = 3000  # each simulated kernel runs this long: launch 2 is issued while launch 1 runs
#: The simulated device's memory in the harness (host memory backs it: the probe writes the whole workspace).
DEVICE_MEMORY = 1 << 30
#: With --simulate the probe kernel runs every launched block on the host.
MAX_SIMULATED_BLOCKS = 1 << 20
# ---- simulation harness ---------------------------------------------------------
def block_count(grid: Sequence[int], block_clamp: int | None) -> int:
    n = grid[0] * grid[1] * grid[2]
    return min(n, block_clamp) if block_clamp is not None else n


def expected(plan: SyncPlan, site: lc.LaunchSite, grid: Sequence[int]) -> dict:
    simt = site.simt(plan)
    blocks = block_count(grid, site.block_clamp)
    return {
        "block_num": blocks,
        "lock_bytes": 0 if simt else expected_memory.lock_bytes(plan, blocks),
        "workspace_bytes": 0 if simt else expected_memory.workspace_bytes(plan, grid),
        "lock_values_at_start": [] if simt else sorted(set(expected_lock_content(plan, blocks))),
    }


def expected_lock_content(plan: SyncPlan, blocks: int) -> list[int]:
    """Every int64 lock slot at kernel start, by the reference rule (upstream's generated code,
    2.7.1.post11 .. 2.14.0), computed here independently of the helper: legacy slots and
    ordered-only layouts hold ``lock_init_val``; as soon as an unordered lock exists the whole
    region is zero and slot 0 of each unordered lock holds P."""
    if not plan.needs_locks:
        return []
    if plan.lock_layout == "legacy":
        return [plan.lock_init_value] * plan.legacy_slots
    if not plan.unordered_locks:
        return [plan.lock_init_value] * (plan.ordered_locks * 8)
    p = plan.participants(blocks)
    out = [0] * (plan.ordered_locks * 8)
    for _ in range(plan.unordered_locks):
        out += [p] + [0] * ((1 + 2 * p) * 8 - 1)
    return out


def rle(values: Sequence[int]) -> list[list[int]]:
    """[[value, count], ...] runs."""
    out: list[list[int]] = []
    for v in values:
        if out and out[-1][0] == v:
            out[-1][1] += 1
        else:
            out.append([v, 1])
    return out


def content_text(runs: Sequence[Sequence[int]]) -> str:
    """Lock content in words, from [[value, count], ...]: ``4 slots: 0 x 4`` or ``none``."""
    if not runs:
        return "none"
    slots = sum(n for _, n in runs)
    shown = ", ".join(f"{v} x {n}" if n > 1 else str(v) for v, n in runs[:8])
    return f"{slots} int64 slot{'s' if slots != 1 else ''}: {shown}" + (", ..." if len(runs) > 8 else "")


def _demo_value(a: lc.KernelArg, buffers: dict) -> str:
    if a.ctype == "void*":
        return buffers[a.value]
    return f"static_cast<{a.ctype}>({len(buffers) + 3})"


FAULT_APIS = {  # --inject-fault: which simulated calls fail (the first one made by the launch)
    "alloc": ["raw_alloc_with_stream"],
    "fill": ["aclrtMemsetAsync", "aclrtMemcpyAsync"],
    "launch": ["aclrtLaunchKernelWithHostArgs"],
}
FAULT_CODE = 507899  # an ACL runtime code the fill / launch fault returns
_U64_MAX = (1 << 64) - 1

_HARNESS = r"""
// ---- the harness (HOST ACL SIMULATION): launches as the wrapper makes them, a JSON report -------
static std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) { if (c == '"' || c == '\\') o += '\\'; if (c == '\n') { o += "\\n"; continue; } if (static_cast<unsigned char>(c) < 0x20) continue; o += c; }
  return o + "\"";
}
struct Launch {
  std::string phase; int device = 0; bool found = false; uint64_t id = 0;
  int rc = 0; bool ran = false; bool exception_escaped = false; bool call_threw = false; bool dropped = false;
  std::string call_error; uint64_t live_blocks_after = 0; acl_sim::Counters d; acl_sim::ProbeRecord r;
};
static std::vector<Launch> g_launches;
static std::string g_notes;

static void ext_json(std::string& o, const char* key, const acl_sim::Extent& e, uintptr_t ptr, uint64_t avail, uint64_t overrun) {
  char b[512];
  std::snprintf(b, sizeof b, "\"%s\": {\"kind\": \"%s\", \"device\": %d, \"allocation_bytes\": %" PRIu64
                ", \"offset_in_allocation\": %" PRIu64 ", \"block_bytes\": %" PRIu64 ", \"freed\": %s, \"available\": %" PRIu64
                ", \"overrun\": %" PRIu64 ", \"align\": %" PRIu64 "}",
                key, acl_sim::extent_kind_name(e.kind), e.device, e.size, static_cast<uint64_t>(ptr ? ptr - e.base : 0),
                e.block_size, e.freed ? "true" : "false", avail, overrun, static_cast<uint64_t>(ptr ? (ptr & -ptr) : 0));
  o += b;
}

// One launch, made on this (the calling) thread as the wrapper makes it. The queue threads are paused
// during the call, so its lambda runs only after the call has returned (a queue that lags, as on a busy
// device): whatever the launcher frees or keeps, it does so in the same order on every run. With
// `window`, another thread's torch.npu.empty_cache() then runs in the window torch_npu's allocator leaves
// open (its drain of the task queue returned before this launch was queued; it frees the cached blocks
// while the lambda still waits), as NPUCachingAllocator.cpp v2.7.1:1669-1671 orders it; its own counts
// are left out of the launch's. Then drained, and (unless capturing) its kernel finished, as a graph's
// next launch would mostly find it.
static Launch one(const char* phase, int device, aclrtStream stream, void** bufs, const std::vector<std::string>& fault_apis,
                  bool window = false) {
  (void)bufs;
  Launch L; L.phase = phase; L.device = device;
  for (const auto& api : fault_apis) acl_sim::inject_fault(api.c_str(), 1, @FAULT_CODE@);
  const size_t n0 = acl_sim::op_tasks().size();
  const uint64_t id0 = acl_sim::latest_launch_id();
  acl_sim::Counters c0 = acl_sim::counters();
  const uint32_t grid_0 = @G0@, grid_1 = @G1@, grid_2 = @G2@;
  aclrtFuncHandle kernel_handle = g_kernel;
  int call_rc = 0;
  acl_sim::set_task_queues_paused(true);
  try {
    call_rc = @CALL@;
  } catch (const std::exception& e) { L.call_threw = true; L.call_error = e.what(); }
  const acl_sim::Counters e0 = acl_sim::counters();
  if (window) acl_sim::empty_cache();
  const acl_sim::Counters e1 = acl_sim::counters();
  acl_sim::set_task_queues_paused(false);
  acl_sim::drain_task_queues();
  acl_sim::clear_faults();
  acl_sim::Counters c1 = acl_sim::counters();
  std::vector<acl_sim::OpTask> tasks = acl_sim::op_tasks();
  if (tasks.size() > n0) {
    const auto& t = tasks.back(); L.rc = t.rc; L.ran = t.ran; L.exception_escaped = t.exception_escaped; L.dropped = t.dropped;
    if (t.threw_at_call && !L.call_threw) { L.call_threw = true; L.call_error = "RunOpApiV2 threw"; }
  } else {
    L.rc = L.call_threw ? 0 : call_rc; L.ran = !L.call_threw;
  }
  const uint64_t id1 = acl_sim::latest_launch_id();
  L.id = id1 > id0 ? id1 : 0;
  L.live_blocks_after = c1.live_caching_allocations + c1.live_workspace_tensors;
#define D(f) L.d.f = (c1.f - c0.f) - (e1.f - e0.f);
  D(allocator_requests) D(allocator_growths) D(caching_requests) D(caching_frees) D(caching_frees_on_queue_threads)
  D(caching_allocs_on_queue_threads) D(device_synchronizations) D(sync_copies) D(async_copies) D(memsets) D(launches)
  D(host_blocking) D(pinned_allocs)
#undef D
  if (std::string(phase) != "capture" && aclrtSynchronizeStream(stream) != ACL_SUCCESS) g_notes += "aclrtSynchronizeStream failed; ";
  return L;
}

// More launches on the idle stream, one per helper version: each reuses the block its helper keeps for the
// thread and stream (docs/design.md), so at the end only those blocks are held.
static void settle(int device, aclrtStream stream, void** bufs) {
  for (int i = 0; i < @SETTLE@; ++i) {
    (void)one("settle", device, stream, bufs, {});
    if (aclrtSynchronizeStream(stream) != ACL_SUCCESS) g_notes += "settle: aclrtSynchronizeStream failed; ";
  }
}
"""


def harness_source(
    plan: SyncPlan,
    site: lc.LaunchSite,
    kernel_args: Sequence[lc.KernelArg],
    grid: Sequence[int],
    launcher_cpp: str | None = None,
    call: str | None = None,
    launches: int = LAUNCHES,
    devices: int = 1,
    capture: bool = False,
    queue: bool = True,
    inject_fault: str | None = None,
    replays: int = 3,
    settle: int = 1,
) -> str:
    """One C++ TU: the launcher, the probe kernel, the launches, a JSON report.

    Each launch is made the way torch_npu's wrapper makes it: ``call`` (a C++
    expression yielding an int, 0 for fine) runs on the calling thread; the
    launcher takes its memory there and hands its lambda to ``launchKernel``
    -> ``OpCommand::RunOpApiV2`` (simulated task queue, ``queue``), on each of
    ``devices`` devices, each on a stream of torch_npu's pool that the calling thread made its current one (as a
    wrapper's caller does: torch_npu's wrappers launch on the current stream). ``launcher_cpp`` defaults to
    :func:`launch_codegen.launcher_source`; ``call`` to ``(call_<k>(...), 0)``
    (in scope: ``kernel_handle``, ``stream``, ``bufs[i]``, ``grid_0..2``). With
    ``capture``: one warm-up launch, one captured launch, then ``replays``
    replays with an eager launch and ``torch.npu.empty_cache()`` between them.
    The first launch on each device (the warm-up with ``capture``) has another
    thread's ``torch.npu.empty_cache()`` in the window between its queue call
    and its lambda, where torch_npu frees cached blocks (``one``'s ``window``):
    a block given back before its lambda ran is freed there, and the lambda's
    fills and kernel touch freed memory. Each device ends with ``settle`` more launches (one per helper
    version the launches go through), not reported. The simulated devices have :data:`DEVICE_MEMORY` bytes
    each.
    """
    exp = expected(plan, site, grid)
    ptrs = [a.value for a in kernel_args if a.ctype == "void*"]
    buffers = {p: f"bufs[{i}]" for i, p in enumerate(ptrs)}
    if launcher_cpp is None:
        launcher_cpp = lc.launcher_source(plan, site, kernel_args)
    if call is None:
        actuals = ["kernel_handle"] + [_demo_value(a, buffers) for a in kernel_args]
        actuals += ["grid_0", "grid_1", "grid_2", "stream"]
        call = f"({lc.launcher_function_name(plan)}({', '.join(actuals)}), 0)"
    faults = FAULT_APIS[inject_fault] if inject_fault else []
    fault_list = "{" + ", ".join(lc.c_string(a) for a in faults) + "}"
    harness = (_HARNESS.replace("@FAULT_CODE@", str(FAULT_CODE)).replace("@G0@", str(grid[0]))
               .replace("@G1@", str(grid[1])).replace("@G2@", str(grid[2])).replace("@CALL@", call)
               .replace("@NAME@", lc.c_string(plan.kernel)).replace("@SETTLE@", str(int(settle))))
    nbuf = max(1, len(ptrs))
    lock_bytes, ws_bytes = min(exp["lock_bytes"], _U64_MAX), min(exp["workspace_bytes"], _U64_MAX)
    return f"""// generated by torch_npu._inductor.patchset.tooling.sim.harness (HOST ACL SIMULATION harness: a test double)
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>
{lc.includes()}#include "acl_sim/control.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"  // the thread's current stream, which the launches go to
#include "torch_npu/csrc/core/npu/NPUWorkspaceAllocator.h"  // what torch_npu's own (upstream) launchers call
#include "torch_npu/csrc/framework/OpCommand.h"

static void check(aclError rc, const char* what) {{ if (rc != ACL_SUCCESS) {{ std::fprintf(stderr, "%s: ACL error %d\\n", what, rc); std::exit(3); }} }}
static aclrtFuncHandle g_kernel = nullptr;

{launcher_cpp}
{harness}
int main() {{
  acl_sim::set_task_queue_enabled({str(queue).lower()});
  acl_sim::ProbeConfig cfg;
  cfg.name = {lc.c_string(plan.kernel)};
  cfg.has_ffts = {str(site.has_ffts).lower()};
  cfg.simt_only = {str(site.simt(plan)).lower()};
  cfg.lock_bytes = UINT64_C({lock_bytes});
  cfg.workspace_bytes = UINT64_C({ws_bytes});
  cfg.sim_time_us = {PROBE_TIME_US};
  cfg.own_args_bytes = {lc.own_args_bytes(kernel_args)};
  g_kernel = acl_sim::register_probe_kernel(cfg);
  const std::vector<std::string> fault_apis = {fault_list};
  for (int dev = 0; dev < {devices}; ++dev) {{
    acl_sim::set_device_memory_capacity(dev, UINT64_C({DEVICE_MEMORY}));
    check(aclrtSetDevice(dev), "aclrtSetDevice");
    // A stream of torch_npu's pool, made the thread's current one, as a wrapper's caller does: the wrapper launches
    // on its current stream (and the helper takes memory for that stream only).
    const c10_npu::NPUStream npu_stream = c10_npu::getNPUStreamFromPool(static_cast<c10::DeviceIndex>(dev));
    c10_npu::setCurrentNPUStream(npu_stream);
    aclrtStream stream = npu_stream.stream(false);
    void* bufs[{nbuf}] = {{}};
    for (int i = 0; i < {len(ptrs)}; ++i) check(aclrtMalloc(&bufs[i], 256, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc");
    if (!{str(capture).lower()}) {{
      for (int i = 0; i < {launches}; ++i) g_launches.push_back(one("launch", dev, stream, bufs, i == 0 ? fault_apis : std::vector<std::string>{{}}, i == 0));
      check(aclrtSynchronizeStream(stream), "aclrtSynchronizeStream");
      settle(dev, stream, bufs);
      continue;
    }}
    g_launches.push_back(one("warmup", dev, stream, bufs, fault_apis, true));
    check(aclrtSynchronizeStream(stream), "aclrtSynchronizeStream");
    check(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), "aclmdlRICaptureBegin");
    Launch cap = one("capture", dev, stream, bufs, {{}});
    aclmdlRI model = nullptr;
    aclError end_rc = aclmdlRICaptureEnd(stream, &model);
    g_launches.push_back(cap);
    if (end_rc != ACL_SUCCESS) {{ g_notes += "device " + std::to_string(dev) + ": aclmdlRICaptureEnd returned " + std::to_string(end_rc) + "; "; continue; }}
    for (int r = 0; r < {replays}; ++r) {{
      // Between replays: eager work on the capture stream, and torch.npu.empty_cache().
      g_launches.push_back(one("eager", dev, stream, bufs, {{}}));
      check(aclrtSynchronizeStream(stream), "aclrtSynchronizeStream");
      acl_sim::empty_cache();
      check(aclmdlRIExecuteAsync(model, stream), "aclmdlRIExecuteAsync");
      check(aclrtSynchronizeStream(stream), "aclrtSynchronizeStream");
    }}
    for (const auto& rec : acl_sim::probe_records())
      if (rec.captured_launch_id == cap.id && cap.id != 0) {{ Launch L = cap; L.phase = "replay"; L.found = true; L.r = rec; L.d = acl_sim::Counters(); g_launches.push_back(L); }}
    settle(dev, stream, bufs);
    check(aclmdlRIDestroy(model), "aclmdlRIDestroy");
  }}
  for (auto& L : g_launches)
    if (L.phase != "replay" && L.phase != "capture" && L.id) L.found = acl_sim::probe_record(L.id, &L.r);
  std::string o = "{{\\"launches\\": [";
  for (size_t i = 0; i < g_launches.size(); ++i) {{
    const Launch& L = g_launches[i];
    const acl_sim::ProbeRecord& r = L.r;
    const acl_sim::Counters& d = L.d;
    char b[2000];
    std::snprintf(b, sizeof b, "%s{{\\"phase\\": \\"%s\\", \\"device\\": %d, \\"acl_code\\": %d, \\"ran\\": %s, \\"exception_escaped\\": %s, "
                  "\\"call_threw\\": %s, \\"dropped\\": %s, \\"live_allocations_after\\": %" PRIu64 ", \\"found\\": %s, \\"decoded\\": %s, "
                  "\\"kernel_device\\": %d, \\"block_dim\\": %u, \\"grid\\": [%d, %d, %d], \\"lock_ptr_null\\": %s, \\"workspace_ptr_null\\": %s, "
                  "\\"regions_overlap\\": %s, \\"overlaps_with_running\\": %d, \\"locks_unchanged\\": %s, \\"workspace_written\\": %s, "
                  "\\"access_errors\\": %d, \\"ffts_ok\\": %s, \\"caching_allocator_calls\\": %" PRIu64 ", \\"workspace_allocator_calls\\": %" PRIu64
                  ", \\"allocator_growths\\": %" PRIu64 ", \\"block_frees\\": %" PRIu64 ", \\"block_frees_on_queue_thread\\": %" PRIu64
                  ", \\"allocations_on_queue_thread\\": %" PRIu64 ", \\"device_synchronizations\\": %" PRIu64 ", \\"sync_copies\\": %" PRIu64
                  ", \\"async_copies\\": %" PRIu64 ", \\"memsets\\": %" PRIu64 ", \\"kernel_launches\\": %" PRIu64
                  ", \\"host_blocking_calls\\": %" PRIu64 ", \\"page_locked_allocations\\": %" PRIu64 ", ",
                  i ? ", " : "", L.phase.c_str(), L.device, L.rc, L.ran ? "true" : "false", L.exception_escaped ? "true" : "false",
                  L.call_threw ? "true" : "false", L.dropped ? "true" : "false", L.live_blocks_after, L.found ? "true" : "false",
                  r.decoded ? "true" : "false", r.device, r.block_dim, r.grid[0], r.grid[1], r.grid[2],
                  r.lock_ptr ? "false" : "true", r.workspace_ptr ? "false" : "true", r.regions_overlap ? "true" : "false",
                  r.overlaps_with_running, r.locks_unchanged ? "true" : "false", r.workspace_written ? "true" : "false",
                  r.access_errors, r.ffts_ok ? "true" : "false", d.caching_requests, d.allocator_requests, d.allocator_growths,
                  d.caching_frees, d.caching_frees_on_queue_threads, d.caching_allocs_on_queue_threads, d.device_synchronizations,
                  d.sync_copies, d.async_copies, d.memsets, d.launches, d.host_blocking, d.pinned_allocs);
    o += b;
    o += "\\"call_error\\": " + json_str(L.call_error) + ", ";
    ext_json(o, "lock_region", r.lock_extent, r.lock_ptr, r.lock_available, r.lock_overrun);
    o += ", ";
    ext_json(o, "workspace_region", r.workspace_extent, r.workspace_ptr, r.workspace_available, r.workspace_overrun);
    o += ", \\"lock_content\\": [";
    for (size_t j = 0; j < r.lock_slots_at_start.size();) {{
      size_t k = j;
      while (k < r.lock_slots_at_start.size() && r.lock_slots_at_start[k] == r.lock_slots_at_start[j]) ++k;
      o += (j ? ", [" : "[") + std::to_string(r.lock_slots_at_start[j]) + ", " + std::to_string(k - j) + "]";
      j = k;
    }}
    o += "]}}";
  }}
  o += "], \\"errors\\": [";
  std::vector<acl_sim::ErrorReport> errs = acl_sim::errors();
  for (size_t i = 0; i < errs.size(); ++i)
    o += (i ? ", " : "") + json_str(std::string(acl_sim::error_kind_name(errs[i].kind)) + ": " + errs[i].message);
  o += "], \\"app_logs\\": [";
  std::vector<acl_sim::AppLog> logs = acl_sim::app_logs();
  for (size_t i = 0; i < logs.size(); ++i) o += (i ? ", " : "") + json_str(logs[i].message);
  const acl_sim::Counters end = acl_sim::counters();
  o += "], \\"notes\\": " + json_str(g_notes) + ", \\"live_allocations_end\\": " + std::to_string(end.live_caching_allocations + end.live_workspace_tensors) + "}}";
  std::printf("%s\\n", o.c_str());
  return 0;
}}
"""


def judge(plan: SyncPlan, site: lc.LaunchSite, grid: Sequence[int], raw: dict, inject_fault: str | None = None,
          helpers: int = 1) -> dict:
    """Per-launch report with ``ok`` plus the evidence: what the kernel actually got (measured by
    the simulation's allocation bookkeeping), never the plan's expectations copied over, and what
    the launch cost (allocator calls, synchronisations, host-blocking calls, page-locked memory).
    ``helpers``: how many helper versions (each its own list of held blocks) made the launches."""
    exp = expected(plan, site, grid)
    want_locks = rle(expected_lock_content(plan, exp["block_num"])) if not site.simt(plan) else []
    launches = []
    stopped = False  # a failed lambda stopped torch_npu's task queue: later launches are not judged
    for r in raw["launches"]:
        problems = []
        faulted = inject_fault is not None and r["phase"] in ("launch", "warmup") and r is raw["launches"][0]
        if faulted:
            stopped = r["acl_code"] != 0 and not r["call_threw"]
            # the first launch of the run had a fault injected: it must fail cleanly
            if r["acl_code"] == 0 and not r["call_threw"]:
                problems.append("the injected fault did not make the launch fail")
            if r["exception_escaped"]:
                problems.append("an exception escaped the launch lambda")
            # its block, if it took one, stays the one the helper keeps for the thread and stream
            if r["live_allocations_after"] > 1:
                problems.append(f"{r['live_allocations_after']} launch blocks still held after the failed launch")
            launches.append(_launch_report(r, exp, problems))
            continue
        if stopped:
            launches.append(_launch_report(r, exp, problems))  # after a failed lambda torch_npu runs nothing more
            continue
        if r["call_threw"]:
            problems.append(f"the launch threw on the calling thread: {r['call_error']}")
        elif r["dropped"]:
            problems.append("torch_npu's task queue dropped the launch (an earlier task failed)")
        elif r["exception_escaped"]:
            problems.append(f"an exception escaped the launch lambda (ACL code {r['acl_code']} on the queue thread)")
        elif r["acl_code"] != 0:
            problems.append(f"the launch lambda returned ACL error {r['acl_code']}")
        failed = bool(problems)
        if r["phase"] == "capture" or failed:
            pass  # recorded, not run (its kernels run as the replays), or never launched
        elif not (r["found"] and r["decoded"]):
            problems.append("the probe kernel did not run or could not decode its arguments")
        else:
            problems += kernel_problems(r, exp, want_locks, grid)
        if r["phase"] != "replay" and not failed:
            calls = r["caching_allocator_calls"] + r["workspace_allocator_calls"]
            if r["sync_copies"] or calls > 1 or r["kernel_launches"] != 1:
                problems.append(f"{calls} allocator requests, {r['sync_copies']} synchronous copies and "
                                f"{r['kernel_launches']} launches (at most one allocator request, no synchronous copy, "
                                f"exactly one launch)")
            if r["host_blocking_calls"]:
                problems.append(f"{r['host_blocking_calls']} host-blocking calls (a synchronous copy, a stream or "
                                f"device synchronise, or the workspace allocator growing its block)")
            if r["page_locked_allocations"]:
                problems.append(f"{r['page_locked_allocations']} page-locked allocations")
            if r["block_frees_on_queue_thread"] or r["allocations_on_queue_thread"]:
                problems.append("launch memory taken or freed on torch_npu's task-queue thread (the lambda owned it)")
        launches.append(_launch_report(r, exp, problems))
    errors = list(raw.get("errors", []))
    notes = raw.get("notes", "")
    held = raw.get("live_allocations_end") or 0
    # each helper version keeps one block for the thread and stream, reused by its next launch there (and given
    # back when replaced, when the thread ends, or when the allocator needs memory): at the end only those are held
    if inject_fault is None and held > helpers:
        notes += (f"{held} launch blocks held at the end (at most the one each of {helpers} helper version(s) keeps "
                  f"for the thread and stream: the others were never released); ")
    ok = bool(launches) and all(x["ok"] for x in launches) and not errors and not notes
    return {"launches": launches, "errors": errors, "app_logs": raw.get("app_logs", []), "notes": notes,
            "live_allocations_end": raw.get("live_allocations_end"), "ok": ok}


def kernel_problems(r: dict, exp: dict, want_locks: list, grid: Sequence[int]) -> list[str]:
    """What is wrong with what one launched kernel got (the probe's record ``r``, decoded): blocks, grid,
    pointers present, regions live, on its device, sized, aligned, disjoint, lock content, undisturbed.
    ``exp``: :func:`expected`; ``want_locks``: the reference lock content as runs. The real-runtime tier
    judges torch_npu's own runs by the same rules."""
    problems = []
    if r["block_dim"] != exp["block_num"]:
        problems.append(f"launched {r['block_dim']} blocks, expected {exp['block_num']}")
    if list(r["grid"]) != list(grid):
        problems.append(f"grid in the struct {r['grid']} != {list(grid)}")
    if r["lock_ptr_null"] != (exp["lock_bytes"] == 0) or r["workspace_ptr_null"] != (exp["workspace_bytes"] == 0):
        problems.append("a sync pointer is null where memory was needed, or set where none was")
    for what, need in (("lock", exp["lock_bytes"]), ("workspace", exp["workspace_bytes"])):
        reg = r[f"{what}_region"]
        if r[f"{what}_ptr_null"] or need == 0:
            continue
        if reg["kind"] == "none" or reg["freed"]:
            problems.append(f"the {what} pointer is not in a live allocation")
        if reg["device"] != r["kernel_device"]:
            problems.append(f"the {what} region is on device {reg['device']}, the kernel on {r['kernel_device']}")
        if reg["available"] < need or reg["overrun"]:
            problems.append(f"the {what} region has {reg['available']} bytes, the kernel uses {need} "
                            f"({reg['overrun']} past the end of its allocation)")
        if reg["align"] < 64:
            problems.append(f"{what} region aligned to only {reg['align']} bytes")
    if r["regions_overlap"] or r["overlaps_with_running"]:
        problems.append("regions overlap (each other or another running kernel's)")
    if r["lock_content"] != want_locks:
        problems.append(f"lock content at start {r['lock_content']} != {want_locks} (runs of [value, count])")
    if not (r["locks_unchanged"] and r["workspace_written"]) or r["access_errors"] or not r["ffts_ok"]:
        problems.append("the kernel's locks or workspace were disturbed, or an access failed")
    return problems


def _launch_report(r: dict, exp: dict, problems: list[str]) -> dict:
    return {
        "phase": r["phase"],
        "device": r["device"],
        "acl_code": r["acl_code"],
        "exception_escaped": r["exception_escaped"],
        "call_threw": r["call_threw"],
        "call_error": r["call_error"],
        "live_allocations_after": r["live_allocations_after"],
        # measured: bytes from each pointer to the end of its allocation (or the other region)
        "workspace_bytes": 0 if r["workspace_ptr_null"] else r["workspace_region"]["available"],
        "lock_bytes": 0 if r["lock_ptr_null"] else r["lock_region"]["available"],
        "promised_workspace_bytes": exp["workspace_bytes"],
        "promised_lock_bytes": exp["lock_bytes"],
        "lock_region": r["lock_region"],
        "workspace_region": r["workspace_region"],
        "block_num": r["block_dim"],
        "regions_overlap": bool(r["regions_overlap"] or r["overlaps_with_running"]),
        "lock_content": r["lock_content"],
        "lock_values_at_start": sorted({v for v, _ in r["lock_content"]}),
        # what the launch cost: allocator calls (caching + workspace allocator), ...
        "allocator_calls": r["caching_allocator_calls"] + r["workspace_allocator_calls"],
        "caching_allocator_calls": r["caching_allocator_calls"],
        "workspace_allocator_calls": r["workspace_allocator_calls"],
        "allocator_growths": r["allocator_growths"],
        "device_synchronizations": r["device_synchronizations"],
        "sync_copies": r["sync_copies"],
        "async_copies": r["async_copies"],
        "memsets": r["memsets"],
        "host_blocking_calls": r["host_blocking_calls"],
        "page_locked_allocations": r["page_locked_allocations"],
        "block_freed_on": ("queue thread" if r["block_frees_on_queue_thread"] else
                           "calling thread" if r["block_frees"] else "-"),
        "ok": not problems,
        "problems": problems,
    }


def run_program(exe: Path, timeout: float = 120) -> dict:
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{exe.name} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def helper_has_launch_memory(helper_dir: Path) -> bool:
    """Whether the helper in ``helper_dir`` takes launch memory on the calling thread (``LaunchMemory``)."""
    return any(re.search(r"\bclass\s+LaunchMemory\b", p.read_text()) for p in lc.helper_sources(helper_dir)
               if p.is_file())
