"""Launcher sources on a released torch_npu's own runtime: ``launch_codegen.launcher_source`` output (or a mutated
copy) run by the wheel's ``libtorch_npu.so``, its task queue and caching allocator, over the host ACL library (a
TEST DOUBLE of CANN, ``releases/host_runtime.py``: loaded only into the child this module starts).

What ``sim/harness.simulate()`` did over the project's own stand-ins of torch_npu, now on torch_npu's own code
(issue 30 item 4), with the real-runtime tier's machinery, not a copy of it:

1. **Build**: every job's launcher, each in a namespace of its own, in ONE translation unit compiled against the
   wheel's headers with its torch line's flags and linked against its ``libtorch_npu.so`` and, by file name, the
   host ACL library (``real_artifacts.toolchain`` / ``_compile_and_link``; cached by a hash of every input). Each
   job gets the C entry ``real_runtime_child.py`` calls (``runtime_build.ENTRY<i>``) and the tier's glue (the gate
   that holds torch_npu's queue: ``runtime_build.entries_source``). The probe kernel (one per job, sized by its
   plan) is loaded from the host ACL library's text binary on the first call.
2. **Run**: one child per TASK_QUEUE_ENABLE value for the whole batch (``runtime_run.run_child``, mode "samples":
   each launcher twice on the default stream, the queue held during each call); a launcher that left torch_npu's
   queue stopped (a failed lambda) hands the rest to a fresh child, as ``real_runtime.run_tags`` does.
3. **Judge**: ``real_runtime_judge.judge_launch`` (the probe's record by ``sim.harness.kernel_problems``, the
   calls, torch_npu's ``memory_allocated``), plus the lambda's own result: ``launchKernel`` here passes the
   launcher's lambda to ``OpCommand::RunOpApiV2`` unchanged, wrapped only to record what it returned and whether
   an exception left it (``acl_code``, ``exception_escaped``). A job's ``fault`` (``--inject-fault``) is set for
   the child (:data:`FAULT_ENV`), not built in: its first launch's call of that ACL function fails.

API: :class:`Job`, :func:`run` (a batch), :func:`simulate` (one job, ``simulate()``'s fields).
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Sequence

from ...launch_plan import SyncPlan
from ..sim import harness as sim_harness
from ..sim import host_library
from ..sim import launcher_writer as lc
from . import real_artifacts as ra
from . import runtime_build as rb
from . import runtime_run
from .real_runtime_judge import child_failure, expectations, first_line, judge_launch

RECIPE = "launcher sources on the real runtime 1"
CUBIN = "probe.bin"  # the host ACL library's text binary, one kernel per job (the child writes it)
XNUMEL = 64  # elements of the two npu tensors the entry's pointer arguments come from
#: --inject-fault on the real runtime: the ACL function whose next call (the launch's first) fails, in the lambda.
FAULTS = {"fill": "aclrtMemsetAsync", "launch": "aclrtLaunchKernelWithHostArgs"}
FAULT_CODE = sim_harness.FAULT_CODE
FAULT_ENV = "NPU_PATCHSET_REAL_SOURCES_FAULT"  # the child's: <job index>:<ACL function>


@dataclasses.dataclass(frozen=True)
class Job:
    """One launcher to run: ``launcher_cpp`` (default ``lc.launcher_source(plan, site, args)``) defines
    ``lc.launcher_function_name(plan)``; the kernel's needs and the judge's reference come from ``plan``."""
    key: str
    plan: SyncPlan
    site: lc.LaunchSite
    args: tuple
    grid: tuple
    launcher_cpp: str | None = None
    fault: str | None = None  # a key of FAULTS: the first launch's call fails

    def source(self) -> str:
        return self.launcher_cpp if self.launcher_cpp is not None else lc.launcher_source(self.plan, self.site,
                                                                                          list(self.args))


def job(key: str, plan: SyncPlan, site: lc.LaunchSite, args: Sequence[lc.KernelArg], grid: Sequence[int],
        launcher_cpp: str | None = None, fault: str | None = None) -> Job:
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"fault {fault!r} on the real runtime: one of {', '.join(FAULTS)}")
    return Job(key, plan, site, tuple(args), tuple(int(g) for g in grid), launcher_cpp, fault)


# ---- 1. build -------------------------------------------------------------------------------------
# What the launchers call to queue their lambda (launch_codegen.LAUNCH_KERNEL_LINES' shape): the same
# RunOpApiV2 call, with the lambda wrapped only to note its result for the launch the calling thread is making.
_OUTCOME = r"""
#include <host_acl.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
namespace npu_patchset_real_sources {
struct Outcome {
  std::atomic<int> ran{0}, rc{0}, escaped{0};
};
Outcome outcomes[@JOBS@];
thread_local Outcome* current = nullptr;
// The ACL function whose next call fails in job `job`'s first launch: @FAULT_ENV@=<job>:<function> (set by
// real_sources.run for the child: a fault is not part of the build, so a run with one reuses the build without).
inline std::string fault_of(int job) {
  const char* spec = std::getenv("@FAULT_ENV@");
  const std::string s = spec != nullptr ? spec : "";
  const size_t colon = s.find(':');
  return colon != std::string::npos && s.substr(0, colon) == std::to_string(job) ? s.substr(colon + 1) : "";
}
// The entry's launch: its outcome slot cleared; in the job's first launch, the fault if one is set.
inline void begin(int job, bool first) {
  Outcome& o = outcomes[job];
  o.ran.store(0);
  o.rc.store(0);
  o.escaped.store(0);
  current = &o;
  const std::string fault = first ? fault_of(job) : "";
  if (!fault.empty()) acl_host_inject_fault(fault.c_str(), 1, @FAULT_CODE@);
}
// The job's probe kernel from the host ACL library's text binary the child wrote (loaded once per job).
inline aclrtFuncHandle kernel(const char* cubin_dir, const char* name) {
  std::ifstream in(std::string(cubin_dir) + "/@CUBIN@");
  std::stringstream text;
  text << in.rdbuf();
  const std::string bin = text.str();
  aclrtBinHandle b = nullptr;
  aclrtFuncHandle f = nullptr;
  if (bin.empty() || aclrtBinaryLoadFromData(bin.data(), bin.size(), nullptr, &b) != ACL_SUCCESS ||
      aclrtBinaryGetFunction(b, name, &f) != ACL_SUCCESS)
    throw std::runtime_error(std::string("loading the probe kernel ") + name + " failed");
  return f;
}
}  // namespace npu_patchset_real_sources
extern "C" __attribute__((visibility("default"))) void npu_patchset_real_runtime_outcome(int job, int* ran, int* rc,
                                                                                        int* escaped) {
  const npu_patchset_real_sources::Outcome& o = npu_patchset_real_sources::outcomes[job];
  *ran = o.ran.load();
  *rc = o.rc.load();
  *escaped = o.escaped.load();
}
static inline void launchKernel(std::function<int()> launch_call, const char* kernel_name) {
  npu_patchset_real_sources::Outcome* o = npu_patchset_real_sources::current;
  at_npu::native::OpCommand::RunOpApiV2(kernel_name, [launch_call, o]() -> int {
    try {
      const int rc = launch_call();
      if (o != nullptr) { o->rc.store(rc); o->ran.store(1); }
      return rc;
    } catch (...) {
      if (o != nullptr) { o->escaped.store(1); o->ran.store(1); }
      throw;
    }
  });
}
"""


def probe_name(i: int, plan: SyncPlan) -> str:
    """Job ``i``'s probe kernel (unique in the batch: two jobs may launch one kernel name with other needs)."""
    return f"job{i}_" + re.sub(r"\W", "_", plan.kernel)[:48]


def _actuals(args: Sequence[lc.KernelArg]) -> list[str]:
    """The launcher's own arguments from the entry's: pointers from the two npu tensors, scalars small numbers."""
    out, ptrs = [], 0
    for n, a in enumerate(args):
        if a.ctype == "void*":
            out.append("in_ptr" if ptrs % 2 == 0 else "out_ptr")
            ptrs += 1
        else:
            out.append(f"static_cast<{a.ctype}>({n + 3})")
    return out


def translation_unit(jobs: Sequence[Job]) -> str:
    head = lc.includes()
    launch_kernel = "\n".join(lc.LAUNCH_KERNEL_LINES)
    if launch_kernel not in head:
        raise ra.TierError("launch_codegen.includes() no longer defines launchKernel as LAUNCH_KERNEL_LINES")
    parts = ["// Generated by tooling/releases/real_sources.py: launcher sources on a torch_npu wheel's own runtime.\n",
             "#include <stdexcept>\n", head.replace(launch_kernel, ""),
             _OUTCOME.replace("@JOBS@", str(max(1, len(jobs)))).replace("@FAULT_CODE@", str(FAULT_CODE))
             .replace("@CUBIN@", CUBIN).replace("@FAULT_ENV@", FAULT_ENV),
             rb.entries_source([], [])]
    for i, jb in enumerate(jobs):
        actuals = ", ".join(["h", *_actuals(jb.args), *map(str, jb.grid), "static_cast<aclrtStream>(stream)"])
        parts.append(
            f"\n// ---- job {i}: {jb.key}\nnamespace npu_patchset_job_{i} {{\n{jb.source()}\n}}  // namespace\n"
            f'extern "C" __attribute__((visibility("default"))) int {rb.ENTRY}{i}(void* in_ptr, void* out_ptr, '
            f"int64_t numel, int32_t device, void* stream, const char* cubin_dir, char* error, size_t error_size) {{\n"
            f"  (void)numel; (void)device; (void)in_ptr; (void)out_ptr;\n"
            f"  static std::atomic<int> calls{{0}};\n"
            f"  try {{\n"
            f"    static const aclrtFuncHandle h = npu_patchset_real_sources::kernel(cubin_dir, "
            f"{lc.c_string(probe_name(i, jb.plan))});\n"
            f"    npu_patchset_real_sources::begin({i}, calls.fetch_add(1) == 0);\n"
            f"    npu_patchset_job_{i}::{lc.launcher_function_name(jb.plan)}({actuals});\n"
            f"    npu_patchset_real_sources::current = nullptr;\n    return 0;\n"
            f"  }} catch (const std::exception& e) {{\n    std::snprintf(error, error_size, \"%s\", e.what());\n"
            f"  }} catch (...) {{\n    std::snprintf(error, error_size, \"a non-standard exception\");\n  }}\n"
            f"  npu_patchset_real_sources::current = nullptr;\n  return 1;\n}}\n")
    return "".join(parts)


def probe_binary(jobs: Sequence[Job]) -> str:
    lines = ["ACL_HOST_PROBE_BINARY 1"]
    for i, jb in enumerate(jobs):
        exp = sim_harness.expected(jb.plan, jb.site, jb.grid)
        lines.append(f"kernel {probe_name(i, jb.plan)} has_ffts={int(jb.site.has_ffts)} "
                     f"simt_only={int(jb.site.simt(jb.plan))} lock_bytes={min(exp['lock_bytes'], sim_harness._U64_MAX)} "
                     f"workspace_bytes={min(exp['workspace_bytes'], sim_harness._U64_MAX)} "
                     f"own_args_bytes={lc.own_args_bytes(jb.args)} sim_time_us=0")
    return "\n".join(lines) + "\n"


def build(release: str, jobs: Sequence[Job]) -> Path:
    """The jobs' shared object for ``release`` (cached by a hash of every input); raises
    ``real_runtime.RealRuntimeError`` (one line first) when it cannot be built."""
    python, host = rb.line_python(release), rb.host_libraries(release)  # its runtime, then the build against it
    chain = ra.toolchain(release, python)
    libs = {**chain.libraries, **host}
    inc_dirs = [*chain.include_dirs, lc.HELPER_DIR, host_library.HOST_DIR]
    tu = translation_unit(jobs)
    key = ra._digest([ra._compiler_id(), RECIPE, tu, " ".join(chain.cflags), *map(str, inc_dirs),
                      *ra._tree_digest(lc.HELPER_DIR, (".h",)), (host_library.HOST_DIR / "host_acl.h").read_bytes(),
                      *[f"{k}={p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for k, p in libs.items()]])
    final = ra.build_cache() / f"real-sources-{release}-{key}"
    if (final / "result.json").exists():
        return final / "launchers.so"
    info = {"std": chain.std, "torch": chain.torch.source, "build_key": key}
    result = ra.build_in_cache(final.name, release, tu, chain, inc_dirs, libs, info, host)
    if not result.ok:
        raise rb.RealRuntimeError(result.message)
    return final / "launchers.so"


# ---- 2. run, 3. judge ---------------------------------------------------------------------------------
def run(release: str, jobs: Sequence[Job], queues: Sequence[str] = ("1",), *, timeout: float = 300) -> dict:
    """Every job on ``release``'s own runtime, one child per TASK_QUEUE_ENABLE value of ``queues``:
    ``{key: {queue: result}}``, each result in ``simulate()``'s fields (``launches``, ``errors``, ``app_logs``: a
    count here, ``notes``, ``live_allocations_end``: bytes, ``ok``) plus ``torch_npu`` and ``queue``."""
    if len({jb.key for jb in jobs}) != len(jobs):
        raise ValueError("real_sources.run: job keys must differ")
    so = build(release, jobs)
    launchers = [{"key": jb.key, "tag": "source", "sample": jb.key, "kernel": jb.plan.kernel, "entry": f"{rb.ENTRY}{i}",
                  "cubin": CUBIN, "kernel_name": probe_name(i, jb.plan), "xnumel": XNUMEL, "outcome": i}
                 for i, jb in enumerate(jobs)]
    spec = {"so": str(so), "host_library": rb.HOST_LIBRARY, "launches": runtime_run.LAUNCHES, "mode": "samples",
            "binary": probe_binary(jobs)}
    out: dict = {jb.key: {} for jb in jobs}
    for q in queues:
        pending, records, failures, version = list(launchers), {ln["key"]: [] for ln in launchers}, {}, None
        while pending:
            faults = [f"{ln['outcome']}:{FAULTS[jobs[ln['outcome']].fault]}" for ln in pending
                      if jobs[ln["outcome"]].fault and not records[ln["key"]]]
            if len(faults) > 1:  # the host ACL library's fault is one at a time: a child per faulted job
                raise ValueError("real_sources.run: one job with a fault per batch")
            res = run_child(release, dict(spec, launchers=pending), queue=q, timeout=timeout,
                            env_extra={FAULT_ENV: faults[0]} if faults else None)
            version = version or res.get("torch_npu")
            for rec in res.get("launches", []):
                records[rec["key"]].append((rec, res.get("caller_tid")))
            done = {rec["key"] for rec in res.get("launches", [])}
            failure = child_failure(res)
            if failure is not None:  # the launcher it was running fails with it; the rest get a fresh child
                current = next((ln for ln in pending if ln["key"] not in done), None)
                if current is None or not res.get("launches"):
                    failures.update({ln["key"]: failure for ln in pending})
                    break
                failures[current["key"]] = failure
                done.add(current["key"])
            pending = [ln for ln in pending if ln["key"] not in done] if (res.get("stopped_after") or failure) else []
        for jb, ln in zip(jobs, launchers):
            out[jb.key][q] = judge(jb, ln, records[ln["key"]], q, failures.get(ln["key"]), release, version)
    return out


run_child = runtime_run.run_child  # (a test may count the children)


def judge(jb: Job, ln: dict, recs: list, queue: str, failure: str | None, release: str, version) -> dict:
    """One job's launches in one child, in ``simulate()``'s fields. With a fault, the first launch must fail
    cleanly (the lambda returns the code, nothing escapes); torch_npu's queue then runs nothing more."""
    expect = expectations(jb.plan, jb.site, jb.grid)
    launches = []
    for n, (rec, caller) in enumerate(recs):
        x = judge_launch(expect, ln, rec, queue, caller)
        o = rec.get("outcome") or {}
        x["launch"] = rec["launch"]
        x["acl_code"] = o.get("rc") if o.get("ran") else None
        x["exception_escaped"] = bool(o.get("escaped"))
        x["ran"] = bool(o.get("ran"))
        x["app_logs"] = (rec["host"].get("counters") or {}).get("app_logs", 0)
        if jb.fault and n == 0:
            x["problems"] = ([] if x["acl_code"] == FAULT_CODE else
                             [f"the injected {jb.fault} fault did not make the lambda return {FAULT_CODE} "
                              f"(it returned {x['acl_code']})"])
            x["problems"] += ["an exception escaped the launch lambda"] if x["exception_escaped"] else []
        elif jb.fault:  # torch_npu's queue stopped after the failed lambda: it runs nothing more (not judged)
            x["not_judged"] = "torch_npu's task queue stopped after the failed lambda: " + "; ".join(x["problems"])
            x["problems"] = []
        elif x["exception_escaped"]:
            x["problems"].append(f"an exception escaped the launch lambda (on {x['thread']})")
        elif x["acl_code"] not in (0, None):
            x["problems"].append(f"the launch lambda returned ACL error {x['acl_code']}")
        x["ok"] = not x["problems"]
        launches.append(x)
    errors = sorted({e for x in launches for e in x.get("host_errors", [])})
    notes = failure or ""
    if not jb.fault and len(launches) != runtime_run.LAUNCHES:
        notes += f"{len(launches)} of {runtime_run.LAUNCHES} launches made; "
    last = launches[-1]["memory_allocated"] if launches else {}
    ok = bool(launches) and all(x["ok"] for x in launches) and not (notes if not jb.fault else failure)
    # aclAppLog: the host ACL library counts the messages (its report does not carry them)
    return {"launches": launches, "errors": errors, "app_logs": sum(x["app_logs"] for x in launches),
            "notes": notes, "live_allocations_end": (last.get("after", 0) - last.get("before", 0)) if last else None,
            "ok": ok, "queue": queue, "release": release, "torch_npu": version}


def simulate(release: str, plan: SyncPlan, site: lc.LaunchSite, kernel_args, grid, launcher_cpp: str | None = None,
             queue: str = "1", fault: str | None = None, timeout: float = 300) -> dict:
    """One launcher on ``release``'s own runtime with TASK_QUEUE_ENABLE=``queue``: ``simulate()``'s fields."""
    jb = job("launcher", plan, site, kernel_args, grid, launcher_cpp, fault)
    return run(release, [jb], (queue,), timeout=timeout)["launcher"][queue]


def installed_release() -> str | None:
    """The torch_npu release installed beside this interpreter (its distribution's version), or None."""
    import importlib.metadata

    for dist in ("torch-npu", "torch_npu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return None


__all__ = ["Job", "job", "run", "simulate", "build", "installed_release", "FAULTS", "FAULT_CODE", "first_line"]
