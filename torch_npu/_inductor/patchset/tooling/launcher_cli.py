"""``launcher``: inspect and dry-run one kernel's sync plan; ``launcher --samples`` for a table.

    python -m torch_npu._inductor.patchset launcher --metadata JSON --grid X,Y,Z
        [--signature '*fp32,i32'] [--vector-cores N] [--ffts] [--emit-cpp] [--simulate] [--json]
    python -m torch_npu._inductor.patchset launcher --samples [--json]
    python -m torch_npu._inductor.patchset launcher --scenario NAME|list [--simulate] [--json] [--helper DIR]

``--metadata`` takes a JSON object (or ``@file``) shaped like triton-ascend's
kernel metadata. ``--simulate`` compiles the launcher this patch set
generates, with the simulation's probe kernel, against the host ACL
simulation (no NPU), runs it twice back to back on one stream and reports
per launch what the kernel saw. Bad metadata exits 2 with the error on stderr.

``--scenario`` runs one of the graph-capture / thread scenarios
(``acl_sim/scenarios/scenarios.h``; ``--scenario list`` names them) in the
simulation and reports each step's and each replay's ACL code, the
simulation's error reports and ``ok``. ``--helper DIR`` builds it against
another copy of the helper (e.g. an older version, to see a scenario fail).

The simulation harness (:func:`harness_source`, :func:`simulate`) is also what
the golden tests run.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Sequence

from .. import launch_codegen as lc
from ..launch_plan import SyncPlan, plan_from_metadata

LAUNCHES = 2
PROBE_TIME_US = 3000  # each simulated kernel runs this long: launch 2 is issued while launch 1 runs


# ---- simulation harness ---------------------------------------------------------
def block_count(grid: Sequence[int], block_clamp: int | None) -> int:
    n = grid[0] * grid[1] * grid[2]
    return min(n, block_clamp) if block_clamp is not None else n


def expected(plan: SyncPlan, site: lc.LaunchSite, grid: Sequence[int]) -> dict:
    simt = site.simt(plan)
    blocks = block_count(grid, site.block_clamp)
    return {
        "block_num": blocks,
        "lock_bytes": 0 if simt else plan.lock_bytes(blocks),
        "workspace_bytes": 0 if simt else plan.workspace_bytes(tuple(grid)),
        "lock_values_at_start": [] if simt else plan.lock_values(blocks),
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


def _demo_value(a: lc.KernelArg, buffers: dict) -> str:
    if a.ctype == "void*":
        return buffers[a.value]
    return f"static_cast<{a.ctype}>({len(buffers) + 3})"


FAULT_APIS = {  # --inject-fault: which simulated calls fail (the first one made by the launch)
    "alloc": ["allocate_workspace"],
    "fill": ["aclrtMemsetAsync", "aclrtMemcpyAsync"],
    "launch": ["aclrtLaunchKernelWithHostArgs"],
}
FAULT_CODE = 507899  # an ACL runtime code the fill / launch fault returns


_HARNESS = r"""
// ---- torch_npu's wrapper prologue (behaviour, written for this harness) -------------
static void launchKernel(std::function<int()> launch_call, const char* kernel_name) {
  at_npu::native::OpCommand::RunOpApiV2(kernel_name, launch_call);
}
static std::string json_str(const std::string& s) {
  std::string o = "\"";
  for (char c : s) { if (c == '"' || c == '\\') o += '\\'; if (c == '\n') { o += "\\n"; continue; } if (static_cast<unsigned char>(c) < 0x20) continue; o += c; }
  return o + "\"";
}
static std::atomic<uint64_t> g_launch_id{0};
struct Launch {
  std::string phase; int device = 0; bool found = false; uint64_t id = 0;
  int rc = 0; bool ran = false; bool exception_escaped = false; bool call_threw = false; bool dropped = false;
  std::string call_error; uint64_t live_tensors_after = 0; acl_sim::Counters d; acl_sim::ProbeRecord r;
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

static Launch one(const char* phase, int device, aclrtStream stream, void** bufs, const std::vector<std::string>& fault_apis) {
  (void)bufs;
  Launch L; L.phase = phase; L.device = device;
  for (const auto& api : fault_apis) acl_sim::inject_fault(api.c_str(), 1, @FAULT_CODE@);
  const size_t n0 = acl_sim::op_tasks().size();
  acl_sim::Counters c0 = acl_sim::counters();
  g_launch_id = 0;
  const uint32_t grid_0 = @G0@, grid_1 = @G1@, grid_2 = @G2@;
  aclrtFuncHandle kernel_handle = g_kernel;
  try {
    launchKernel([=]() -> int { int rc_ = @CALL@; if (rc_ == ACL_SUCCESS) g_launch_id = acl_sim::last_launch_id(); return rc_; }, @NAME@);
  } catch (const std::exception& e) { L.call_threw = true; L.call_error = e.what(); }
  acl_sim::drain_task_queues();
  acl_sim::clear_faults();
  acl_sim::Counters c1 = acl_sim::counters();
  std::vector<acl_sim::OpTask> tasks = acl_sim::op_tasks();
  if (tasks.size() > n0) { const auto& t = tasks.back(); L.rc = t.rc; L.ran = t.ran; L.exception_escaped = t.exception_escaped; L.dropped = t.dropped; }
  L.id = g_launch_id;
  L.live_tensors_after = c1.live_workspace_tensors;
#define D(f) L.d.f = c1.f - c0.f;
  D(allocator_requests) D(allocator_growths) D(sync_copies) D(async_copies) D(memsets) D(launches) D(host_blocking)
#undef D
  return L;
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
) -> str:
    """One C++ TU: the launcher, the probe kernel, the launches, a JSON report.

    Each launch goes the way torch_npu runs it: the launch lambda is handed to
    ``launchKernel`` -> ``OpCommand::RunOpApiV2`` (simulated task queue,
    ``queue``), on each of ``devices`` devices. ``launcher_cpp`` defaults to
    :func:`launch_codegen.launcher_source`; ``call`` is the C++ expression
    (an aclError) performing one launch (in scope: ``kernel_handle``,
    ``stream``, ``bufs[i]``, ``grid_0..2``). With ``capture``: one warm-up
    launch, one captured launch, then ``replays`` replays with pinned-cache
    churn between (the helper's ``trim_pinned_cache()`` and page-locked
    buffers allocated and freed).
    """
    exp = expected(plan, site, grid)
    ptrs = [a.value for a in kernel_args if a.ctype == "void*"]
    buffers = {p: f"bufs[{i}]" for i, p in enumerate(ptrs)}
    if launcher_cpp is None:
        launcher_cpp = lc.launcher_source(plan, site, kernel_args)
    if call is None:
        actuals = ["kernel_handle"] + [_demo_value(a, buffers) for a in kernel_args]
        actuals += ["grid_0", "grid_1", "grid_2", "stream"]
        call = f"{lc.launcher_function_name(plan)}({', '.join(actuals)})"
    faults = FAULT_APIS[inject_fault] if inject_fault else []
    fault_list = "{" + ", ".join(lc.c_string(a) for a in faults) + "}"
    harness = (_HARNESS.replace("@FAULT_CODE@", str(FAULT_CODE)).replace("@G0@", str(grid[0]))
               .replace("@G1@", str(grid[1])).replace("@G2@", str(grid[2])).replace("@CALL@", call)
               .replace("@NAME@", lc.c_string(plan.kernel)))
    nbuf = max(1, len(ptrs))
    return f"""// generated by torch_npu._inductor.patchset.tooling.launcher_cli (HOST ACL SIMULATION harness: a test double)
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>
{lc.includes()}#include "acl_sim/control.h"
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
  cfg.lock_bytes = UINT64_C({exp["lock_bytes"]});
  cfg.workspace_bytes = UINT64_C({exp["workspace_bytes"]});
  cfg.sim_time_us = {PROBE_TIME_US};
  cfg.own_args_bytes = {lc.own_args_bytes(kernel_args)};
  g_kernel = acl_sim::register_probe_kernel(cfg);
  const std::vector<std::string> fault_apis = {fault_list};
  for (int dev = 0; dev < {devices}; ++dev) {{
    check(aclrtSetDevice(dev), "aclrtSetDevice");
    aclrtStream stream = nullptr;
    check(aclrtCreateStream(&stream), "aclrtCreateStream");
    void* bufs[{nbuf}] = {{}};
    for (int i = 0; i < {len(ptrs)}; ++i) check(aclrtMalloc(&bufs[i], 256, ACL_MEM_MALLOC_HUGE_FIRST), "aclrtMalloc");
    if (!{str(capture).lower()}) {{
      for (int i = 0; i < {launches}; ++i) g_launches.push_back(one("launch", dev, stream, bufs, i == 0 ? fault_apis : std::vector<std::string>{{}}));
      check(aclrtSynchronizeStream(stream), "aclrtSynchronizeStream");
      continue;
    }}
    g_launches.push_back(one("warmup", dev, stream, bufs, fault_apis));
    check(aclrtSynchronizeStream(stream), "aclrtSynchronizeStream");
    check(aclmdlRICaptureBegin(stream, ACL_MODEL_RI_CAPTURE_MODE_GLOBAL), "aclmdlRICaptureBegin");
    Launch cap = one("capture", dev, stream, bufs, {{}});
    aclmdlRI model = nullptr;
    aclError end_rc = aclmdlRICaptureEnd(stream, &model);
    g_launches.push_back(cap);
    if (end_rc != ACL_SUCCESS) {{ g_notes += "device " + std::to_string(dev) + ": aclmdlRICaptureEnd returned " + std::to_string(end_rc) + "; "; continue; }}
    for (int r = 0; r < {replays}; ++r) {{
      torch_npu::inductor::trim_pinned_cache();  // churn: the helper's page-locked lock images
      void* h = nullptr;
      check(aclrtMallocHost(&h, 4096), "aclrtMallocHost");
      check(aclrtFreeHost(h), "aclrtFreeHost");
      check(aclmdlRIExecuteAsync(model, stream), "aclmdlRIExecuteAsync");
      check(aclrtSynchronizeStream(stream), "aclrtSynchronizeStream");
    }}
    for (const auto& rec : acl_sim::probe_records())
      if (rec.captured_launch_id == cap.id && cap.id != 0) {{ Launch L = cap; L.phase = "replay"; L.found = true; L.r = rec; L.d = acl_sim::Counters(); g_launches.push_back(L); }}
    check(aclmdlRIDestroy(model), "aclmdlRIDestroy");
  }}
  for (auto& L : g_launches)
    if (L.phase != "replay" && L.phase != "capture" && L.id) L.found = acl_sim::probe_record(L.id, &L.r);
  std::string o = "{{\\"launches\\": [";
  for (size_t i = 0; i < g_launches.size(); ++i) {{
    const Launch& L = g_launches[i];
    const acl_sim::ProbeRecord& r = L.r;
    char b[1400];
    std::snprintf(b, sizeof b, "%s{{\\"phase\\": \\"%s\\", \\"device\\": %d, \\"acl_code\\": %d, \\"ran\\": %s, \\"exception_escaped\\": %s, "
                  "\\"call_threw\\": %s, \\"dropped\\": %s, \\"live_allocations_after\\": %" PRIu64 ", \\"found\\": %s, \\"decoded\\": %s, "
                  "\\"kernel_device\\": %d, \\"block_dim\\": %u, \\"grid\\": [%d, %d, %d], \\"lock_ptr_null\\": %s, \\"workspace_ptr_null\\": %s, "
                  "\\"regions_overlap\\": %s, \\"overlaps_with_running\\": %d, \\"locks_unchanged\\": %s, \\"workspace_written\\": %s, "
                  "\\"access_errors\\": %d, \\"ffts_ok\\": %s, \\"allocator_calls\\": %" PRIu64 ", \\"allocator_growths\\": %" PRIu64
                  ", \\"sync_copies\\": %" PRIu64 ", \\"async_copies\\": %" PRIu64 ", \\"memsets\\": %" PRIu64 ", \\"kernel_launches\\": %" PRIu64
                  ", \\"host_blocking_calls\\": %" PRIu64 ", ",
                  i ? ", " : "", L.phase.c_str(), L.device, L.rc, L.ran ? "true" : "false", L.exception_escaped ? "true" : "false",
                  L.call_threw ? "true" : "false", L.dropped ? "true" : "false", L.live_tensors_after, L.found ? "true" : "false",
                  r.decoded ? "true" : "false", r.device, r.block_dim, r.grid[0], r.grid[1], r.grid[2],
                  r.lock_ptr ? "false" : "true", r.workspace_ptr ? "false" : "true", r.regions_overlap ? "true" : "false",
                  r.overlaps_with_running, r.locks_unchanged ? "true" : "false", r.workspace_written ? "true" : "false",
                  r.access_errors, r.ffts_ok ? "true" : "false", L.d.allocator_requests, L.d.allocator_growths, L.d.sync_copies,
                  L.d.async_copies, L.d.memsets, L.d.launches, L.d.host_blocking);
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
  o += "], \\"notes\\": " + json_str(g_notes) + ", \\"live_allocations_end\\": " + std::to_string(acl_sim::counters().live_workspace_tensors) + "}}";
  std::printf("%s\\n", o.c_str());
  return 0;
}}
"""


def judge(plan: SyncPlan, site: lc.LaunchSite, grid: Sequence[int], raw: dict, inject_fault: str | None = None) -> dict:
    """Per-launch report with ``ok`` plus the evidence: what the kernel actually got (measured by
    the simulation's allocation bookkeeping), never the plan's expectations copied over."""
    exp = expected(plan, site, grid)
    want_locks = rle(expected_lock_content(plan, exp["block_num"])) if not site.simt(plan) else []
    launches = []
    for r in raw["launches"]:
        problems = []
        faulted = inject_fault is not None and r["phase"] in ("launch", "warmup") and r is raw["launches"][0]
        if faulted:
            # the first launch of the run had a fault injected: it must fail cleanly
            if r["acl_code"] == 0 and not r["call_threw"]:
                problems.append("the injected fault did not make the launch fail")
            if r["exception_escaped"]:
                problems.append("an exception escaped the launch lambda")
            if r["live_allocations_after"] != 0:
                problems.append(f"{r['live_allocations_after']} workspace allocations still live after the failed launch")
            launches.append(_launch_report(r, exp, problems))
            continue
        if inject_fault is not None:
            launches.append(_launch_report(r, exp, problems))  # after a failure torch_npu runs nothing more
            continue
        if r["acl_code"] != 0 or r["exception_escaped"] or r["call_threw"] or r["dropped"]:
            problems.append(f"the launch failed: code {r['acl_code']}, exception {r['exception_escaped']}, "
                            f"call error {r['call_error']!r}")
        if r["phase"] == "capture":
            pass  # recorded, not run: its kernels run as the replays
        elif not (r["found"] and r["decoded"]):
            problems.append("the probe kernel did not run or could not decode its arguments")
        else:
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
        if r["phase"] != "replay":
            if r["sync_copies"] or r["allocator_calls"] > 1 or r["kernel_launches"] != 1:
                problems.append("more than one allocator request, a synchronous copy, or not exactly one launch")
            if r["host_blocking_calls"] > r["allocator_growths"]:
                problems.append("host-blocking calls other than the allocator's growth")
        launches.append(_launch_report(r, exp, problems))
    errors = list(raw.get("errors", []))
    notes = raw.get("notes", "")
    ok = bool(launches) and all(x["ok"] for x in launches) and not errors and not notes
    return {"launches": launches, "errors": errors, "app_logs": raw.get("app_logs", []), "notes": notes,
            "live_allocations_end": raw.get("live_allocations_end"), "ok": ok}


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
        "allocator_calls": r["allocator_calls"],
        "allocator_growths": r["allocator_growths"],
        "sync_copies": r["sync_copies"],
        "async_copies": r["async_copies"],
        "memsets": r["memsets"],
        "host_blocking_calls": r["host_blocking_calls"],
        "ok": not problems,
        "problems": problems,
    }


def run_program(exe: Path, timeout: float = 120) -> dict:
    proc = subprocess.run([str(exe)], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{exe.name} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def program_name(plan: SyncPlan, tag: str = "launcher") -> str:
    return f"{tag}-" + "".join(c if c.isalnum() or c in "_.-" else "_" for c in plan.kernel)[:60]


def simulate(plan: SyncPlan, site: lc.LaunchSite, kernel_args, grid, launcher_cpp=None, call=None, tag="launcher",
             devices: int = 1, capture: bool = False, queue: bool = True, inject_fault: str | None = None) -> dict:
    from . import sim_build

    src = harness_source(plan, site, kernel_args, grid, launcher_cpp=launcher_cpp, call=call, devices=devices,
                         capture=capture, queue=queue, inject_fault=inject_fault)
    exe = sim_build.compile_program(src, program_name(plan, tag))
    return judge(plan, site, grid, run_program(exe), inject_fault=inject_fault)


# ---- command line -------------------------------------------------------------
def _parse_grid(text: str) -> tuple[int, int, int]:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > 3 or not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"--grid wants up to three non-negative integers X,Y,Z, got {text!r}")
    vals = [int(p) for p in parts] + [1] * (3 - len(parts))
    if any(v == 0 or v >= 1 << 31 for v in vals):
        raise argparse.ArgumentTypeError(f"--grid values must be in 1..2**31-1, got {text!r}")
    return vals[0], vals[1], vals[2]


def _load_metadata(text: str) -> dict:
    if text.startswith("@"):
        text = Path(text[1:]).read_text()
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"--metadata must be a JSON object, got {type(data).__name__}")
    return data


def plan_summary(plan: SyncPlan, site: lc.LaunchSite, grid) -> dict:
    exp = expected(plan, site, grid)
    return {**plan.to_dict(), "description": plan.describe(), "grid": list(grid), **exp}


def _one(args) -> int:
    try:
        metadata = _load_metadata(args.metadata)
        name = args.kernel or metadata.get("name")
        plan = plan_from_metadata(metadata, kernel=str(name).split()[0] if isinstance(name, str) and name else None)
        kernel_args = lc.args_from_signature(args.signature)
    except (ValueError, OSError) as exc:  # json.JSONDecodeError is a ValueError
        print(f"launcher: bad metadata: {exc}", file=sys.stderr)
        return 2
    site = lc.LaunchSite(block_clamp=args.vector_cores or None, has_ffts=args.ffts)
    out: dict = {"plan": plan_summary(plan, site, args.grid)}
    if args.emit_cpp:
        out["cpp"] = lc.launcher_source(plan, site, kernel_args)
    ok = True
    if args.simulate:
        sim = simulate(plan, site, kernel_args, args.grid, devices=args.devices, capture=args.capture,
                       queue=args.queue == "on", inject_fault=args.inject_fault)
        out["launches"], out["errors"] = sim["launches"], sim["errors"]
        out["app_logs"], out["notes"] = sim["app_logs"], sim["notes"]
        out["live_allocations_end"] = sim["live_allocations_end"]
        ok = sim["ok"]
    out["ok"] = ok
    if args.json:
        print(json.dumps(out, indent=2))
        return 0 if ok else 1
    p = out["plan"]
    lines = [plan.describe(), ""]
    lines.append(f"  grid              {','.join(map(str, args.grid))}  (block_num {p['block_num']}"
                 + (f", clamped to {site.block_clamp} vector cores)" if site.block_clamp else ")"))
    lines.append(f"  lock layout       {plan.lock_layout}" + (f", init {plan.lock_init_value}" if plan.needs_locks else ""))
    lines.append(f"  lock bytes        {p['lock_bytes']}")
    lines.append(f"  workspace bytes   {p['workspace_bytes']}")
    lines.append(f"  lock values       {p['lock_values_at_start']}")
    lines.append(f"  helper call       {'yes, one per launch' if plan.needs_resources and not site.simt(plan) else 'none'}")
    if args.emit_cpp:
        lines += ["", out["cpp"].rstrip()]
    if args.simulate:
        lines += ["", "simulation (HOST ACL SIMULATION, a test double: probe kernel, launches through torch_npu's "
                      f"task queue {args.queue}, {args.devices} device(s){', capture + replays' if args.capture else ''}"
                      f"{', fault ' + args.inject_fault if args.inject_fault else ''}):"]
        for i, launch in enumerate(out["launches"], 1):
            lines.append(
                f"  launch {i} ({launch['phase']}, device {launch['device']}): acl_code={launch['acl_code']} "
                f"exception_escaped={launch['exception_escaped']} live_allocations_after={launch['live_allocations_after']} "
                f"workspace_bytes={launch['workspace_bytes']} lock_bytes={launch['lock_bytes']} "
                f"regions_overlap={launch['regions_overlap']} lock_values_at_start={launch['lock_values_at_start']} "
                f"allocator_calls={launch['allocator_calls']} sync_copies={launch['sync_copies']} "
                f"host_blocking_calls={launch['host_blocking_calls']} ok={launch['ok']}"
            )
            for prob in launch["problems"]:
                lines.append(f"    problem: {prob}")
        for err in out["errors"]:
            lines.append(f"  simulation error: {err}")
        lines.append(f"  ok: {ok}")
    print("\n".join(lines))
    return 0 if ok else 1


def run_samples(simulate_them: bool = True) -> list[dict]:
    from .sample_kernels import SAMPLES

    rows = []
    for s in SAMPLES:
        plan = plan_from_metadata(s.metadata, kernel=s.kernel)
        site = lc.LaunchSite(block_clamp=s.block_clamp, has_ffts=s.has_ffts)
        row = {"sample": s.key, "title": s.title, "plan": plan_summary(plan, site, s.grid)}
        if simulate_them:
            sim = simulate(plan, site, lc.args_from_signature(s.signature), s.grid, tag="sample")
            row.update(launches=sim["launches"], errors=sim["errors"], ok=sim["ok"])
        rows.append(row)
    return rows


def _samples(args) -> int:
    rows = run_samples(simulate_them=not args.no_simulate)
    ok = all(r.get("ok", True) for r in rows)
    if args.json:
        print(json.dumps({"samples": rows, "ok": ok}, indent=2))
        return 0 if ok else 1
    head = f"{'sample':<16}{'grid':<9}{'blocks':>6}{'lock B':>8}{'workspace B':>12}  {'lock values at start':<22}{'alloc':>6}{'sync cp':>8}{'blocking':>9}  ok"
    out = [head, "-" * len(head)]
    for r in rows:
        p = r["plan"]
        grid = "x".join(map(str, p["grid"]))
        if "launches" in r:
            # launch 2 is the steady state: launch 1 also grows the stream's block
            last = r["launches"][-1]
            vals = ",".join(map(str, last["lock_values_at_start"])) or "-"
            tail = f"{vals:<22}{last['allocator_calls']:>6}{last['sync_copies']:>8}{last['host_blocking_calls']:>9}  {'yes' if r['ok'] else 'NO'}"
        else:
            tail = f"{','.join(map(str, p['lock_values_at_start'])) or '-':<22}"
        out.append(f"{r['sample']:<16}{grid:<9}{p['block_num']:>6}{p['lock_bytes']:>8}{p['workspace_bytes']:>12}  {tail}")
    out.append("")
    out += [f"  {r['sample']}: {r['plan']['description']}" for r in rows]
    if any("launches" in r for r in rows):
        out.append("")
        out.append("Each kernel ran twice back to back on one stream in the host ACL simulation (probe kernel);")
        out.append("the columns show launch 2 (launch 1 also grows the stream's workspace block once).")
        for r in rows:
            for i, launch in enumerate(r.get("launches", []), 1):
                for prob in launch["problems"]:
                    out.append(f"  {r['sample']} launch {i}: {prob}")
            for err in r.get("errors", []):
                out.append(f"  {r['sample']}: simulation error: {err}")
    out.append(f"all ok: {ok}")
    print("\n".join(out))
    return 0 if ok else 1


# ---- capture / thread scenarios ------------------------------------------------------
SCENARIO_DIR = Path(__file__).resolve().parent / "acl_sim" / "scenarios"
#: The scenarios' names, as acl_sim/scenarios/scenarios.h lists them (a test checks both agree).
SCENARIOS = ("capture-then-grow", "capture-then-empty-cache", "two-graphs-one-stream",
             "global-capture-other-stream", "devices-threads-queue-off")


def scenario_program(helper_dir: Path | None = None) -> Path:
    """The scenario runner, built against the simulation and the helper in ``helper_dir``
    (default: this package's ``csrc/``)."""
    from . import sim_build

    lines = ["// generated by torch_npu._inductor.patchset.tooling.launcher_cli (HOST ACL SIMULATION scenarios)"]
    extra = [SCENARIO_DIR]
    tag = "scenarios"
    if helper_dir is not None:
        helper_dir = Path(helper_dir).resolve()
        header = helper_dir / lc.HELPER_HEADER
        if not header.is_file():
            raise FileNotFoundError(f"--helper {helper_dir}: no {lc.HELPER_HEADER} there")
        lines.append(f'#define ACL_SIM_SCENARIO_HELPER "{header.as_posix()}"')
        extra.append(helper_dir)
        tag = "scenarios-other-helper"
    lines += ['#include "scenarios.h"',
              "int main(int argc, char **argv) { return acl_sim_scenarios::main(argc, argv); }", ""]
    return sim_build.compile_program("\n".join(lines), tag, extra_include_dirs=extra)


def run_scenario(name: str, helper_dir: Path | None = None, timeout: float = 300) -> dict:
    """Runs one scenario; its JSON report (``ok``, ``steps``, ``replays``, ``sim_errors``, ``notes``)."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; valid: {', '.join(SCENARIOS)}")
    exe = scenario_program(helper_dir)
    proc = subprocess.run([str(exe), name], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"scenario {name} exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def scenario_list(helper_dir: Path | None = None) -> list[dict]:
    exe = scenario_program(helper_dir)
    proc = subprocess.run([str(exe), "list"], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(proc.stdout)["scenarios"]


def _scenario(args) -> int:
    if args.scenario == "list":
        rows = scenario_list(args.helper)
        if args.json:
            print(json.dumps({"scenarios": rows}, indent=2))
        else:
            print("\n".join(f"{r['name']:<30}{r['what']}" for r in rows))
        return 0
    if args.scenario not in SCENARIOS:
        print(f"launcher: unknown scenario {args.scenario!r}; valid: {', '.join(SCENARIOS)} (or list)",
              file=sys.stderr)
        return 2
    try:
        out = run_scenario(args.scenario, args.helper)
    except (FileNotFoundError, RuntimeError) as exc:
        print(f"launcher: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(out, indent=2))
        return 0 if out["ok"] else 1
    lines = [f"scenario {out['scenario']} (HOST ACL SIMULATION, a test double)"]
    lines += [f"  step   {s['acl_code']:>7}  {s['step']}" for s in out["steps"]]
    lines += [f"  replay {r['acl_code']:>7}  {r['graph']} #{r['replay']}: kernels seen {r['kernels_seen']}, "
              f"lock content {'ok' if r['lock_content_ok'] else 'WRONG'}" for r in out["replays"]]
    lines += [f"  simulation error: {e}" for e in out["sim_errors"]]
    lines += [f"  note: {n}" for n in out["notes"]]
    lines.append(f"  ok: {out['ok']}")
    print("\n".join(lines))
    return 0 if out["ok"] else 1


def run(args) -> int:
    if args.scenario is not None:
        return _scenario(args)
    if args.samples:
        return _samples(args)
    if args.metadata is None:
        print("launcher: --metadata is required (or use --samples)", file=sys.stderr)
        return 2
    return _one(args)


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "launcher",
        help="show the sync plan / generated C++ for a kernel's metadata; dry-run it in the ACL simulation",
        description=__doc__.split("\n\n")[0],
    )
    p.add_argument("--metadata", help="kernel metadata as a JSON object, or @FILE")
    p.add_argument("--kernel", help="kernel name for messages (default: the metadata's name)")
    p.add_argument("--grid", type=_parse_grid, default=(1, 1, 1), help="X,Y,Z (default 1,1,1)")
    p.add_argument("--signature", default="*fp32,i32", help="Triton signature of the kernel's own arguments")
    p.add_argument("--vector-cores", type=int, default=0,
                   help="clamp the block count to N (auto-blockify); default: no clamp")
    p.add_argument("--ffts", action="store_true", help="the target has FFTS (ffts_addr field)")
    p.add_argument("--emit-cpp", action="store_true", help="print the generated launcher C++")
    p.add_argument("--simulate", action="store_true", help="compile and run it twice in the host ACL simulation")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--devices", type=int, default=1, choices=range(1, 9), metavar="N",
                   help="with --simulate: launch on each of N simulated devices (default 1)")
    p.add_argument("--capture", action="store_true",
                   help="with --simulate: warm up, capture one launch, replay it 3 times with pinned-cache churn between")
    p.add_argument("--queue", choices=("on", "off"), default="on",
                   help="with --simulate: torch_npu's task queue on (default) or off")
    p.add_argument("--inject-fault", choices=sorted(FAULT_APIS), default=None,
                   help="with --simulate: make the first launch's allocator request, lock fill or kernel launch fail")
    p.add_argument("--samples", action="store_true", help="run the bundled sample kernels and print a table")
    p.add_argument("--no-simulate", action="store_true", help="with --samples: plans only")
    p.add_argument("--scenario", metavar="NAME",
                   help="run a graph-capture / thread scenario in the simulation ('list' names them)")
    p.add_argument("--helper", type=Path, default=None, metavar="DIR",
                   help="with --scenario: build against the helper in DIR instead of this package's csrc/")
    p.set_defaults(func=run)
    return p
