"""What a launch costs on torch_npu's own runtime: the floor, torch_npu's own fix and the patch set, side by side.

``benchmarks/launch_overhead.py --real-runtime`` runs this. Two released wheels run their launchers over the host
ACL library (a TEST DOUBLE of CANN, loaded only into the subprocesses started here; ``host_runtime.py``): their
own ``libtorch_npu.so``, task queue and caching allocator, the launchers their own codegen renders, as shipped and
after ``patchset.apply()`` (whatever the checkout's ``launch_codegen`` writes: nothing of the launcher is written
here). Cells:

* ``floor``: 2.7.1.post10 as shipped (NULL workspace and lock pointers);
* ``own-fix``: 2.7.1.post11 as shipped (two ``allocate_workspace`` requests in the lambda, the locks written by a
  synchronous ``aclrtMemcpy``, which copies at once, waiting for no stream, as CANN's does);
* ``patch-post10`` / ``patch-post11``: both releases patched.

Per cell: the benchmark's layouts (:data:`LAYOUTS`) x simulated kernel time (the probe kernel's run time on the
host ACL library's stream thread). Children (one per release and kernel time) run alternately, in a
rotating order, ``repeats`` times; inside a child the launchers take turns (``real_runtime_bench_child.py`` says
what each measures), and the cells of :data:`HELD_CHECK` get a held check besides, which adds to their verdict and
to no figure. Numbers are medians over every batch of a cell; counters per launch, the worst batch
(``real_runtime_bench_report.py``: the batches in, the rows, goals and table out).
"""
from __future__ import annotations

import dataclasses
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from . import heap_count, host_runtime, runtime_build, runtime_run
from . import real_artifacts as ra
from . import real_runtime as rr
from .real_runtime_bench_cells import (  # noqa: F401  (OWN_FIX_RELEASE, FLOOR_RELEASE: for callers)
    CELLS,
    FLOOR_RELEASE,
    FULL,
    GATED_MAX,
    GRID,
    HELD_CHECK,
    HELD_LAUNCHES,
    KERNEL_US,
    LAYOUTS,
    OWN_FIX_RELEASE,
    QUICK,
    SAMPLE_BY_KEY,
    bench_samples,
    cells_of,
    child_plan,
)

CHILD = Path(__file__).with_name("real_runtime_bench_child.py")


class BenchError(rr.RealRuntimeError):
    """The benchmark could not run (said in one line)."""


# ---- build ----------------------------------------------------------------------------------------------
#: The benchmark's own helper: a timed loop over a launcher's C entry (with the calling thread's heap allocations in
#: it, where ``heap_count``'s shim is preloaded), and a counting pass-through of torch_npu's
#: exported workspace allocator (``at_npu::native::allocate_workspace``: the one symbol torch_npu's own fix calls;
#: the child loads this first, so that its definition comes first in the global scope and calls reach it; it
#: forwards to libtorch_npu.so's own). The caching allocator counts its own requests (``memory_stats``).
HELPER_SOURCE = r"""
#include <dlfcn.h>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
using Entry = int (*)(void*, void*, int64_t, int32_t, void*, const char*, char*, size_t);
// The heap-counting shim's calls (heap_count.py; preloaded into the child), or null where it is not.
using HeapBegin = void (*)();
using HeapEnd = uint64_t (*)();
static HeapBegin heap_begin() { return reinterpret_cast<HeapBegin>(dlsym(RTLD_DEFAULT, "npu_heap_count_begin")); }
static HeapEnd heap_end() { return reinterpret_cast<HeapEnd>(dlsym(RTLD_DEFAULT, "npu_heap_count_end")); }
// n calls of a launcher's entry, each timed; *heap: the host heap allocations the calling thread made in them
// (torch_npu's own included), -1 without the shim.
extern "C" __attribute__((visibility("default"))) int bench_calls(void* fn, int n, void* in, void* out, int64_t numel,
    int32_t device, void* stream, const char* cubin_dir, int64_t* ns, char* error, size_t error_size, int64_t* heap) {
  const Entry entry = reinterpret_cast<Entry>(fn);
  const HeapBegin begin = heap_begin();
  const HeapEnd end = heap_end();
  int failed = 0;
  char scratch[4096];
  if (begin != nullptr && end != nullptr) begin();
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = entry(in, out, numel, device, stream, cubin_dir, failed ? scratch : error, failed ? sizeof scratch : error_size);
    ns[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    failed += rc != 0;
  }
  *heap = begin != nullptr && end != nullptr ? static_cast<int64_t>(end()) : -1;
  return failed;
}
// The last bench_calls' count by shared object of the calling code (heap_count.py); "" without the shim.
extern "C" __attribute__((visibility("default"))) void bench_heap_by_object(char* out, size_t size) {
  using ByObject = void (*)(char*, size_t);
  const auto by = reinterpret_cast<ByObject>(dlsym(RTLD_DEFAULT, "npu_heap_count_by_object"));
  out[0] = 0;
  if (by != nullptr) by(out, size);
}
// The counter on allocations of a known number: n mallocs and one operator new on this thread, while another thread
// makes n of its own (not this thread's: not counted). n + 1 where the counter is right; -1 without the shim.
extern "C" __attribute__((visibility("default"))) int64_t bench_heap_known(int n) {
  const HeapBegin begin = heap_begin();
  const HeapEnd end = heap_end();
  if (begin == nullptr || end == nullptr) return -1;
  std::atomic<int> phase{0};
  std::thread other([&] {
    while (phase.load() != 1) std::this_thread::yield();
    for (int i = 0; i < n; ++i) {
      void* volatile p = std::malloc(48);
      std::free(p);
    }
    phase.store(2);
  });
  begin();
  phase.store(1);
  for (int i = 0; i < n; ++i) {
    void* volatile p = std::malloc(48);  // volatile: the call is made, not folded away
    std::free(p);
  }
  char* volatile q = new char[64];
  delete[] q;
  while (phase.load() != 2) std::this_thread::yield();
  const uint64_t counted = end();
  other.join();
  return static_cast<int64_t>(counted);
}
std::atomic<uint64_t> g_workspace_calls{0};
extern "C" __attribute__((visibility("default"))) uint64_t bench_workspace_calls() { return g_workspace_calls.load(); }
// at::Tensor as returned by value: one pointer, not trivially destructible (so returned through memory the caller
// gives, as at::Tensor is); only passed through here, never copied or destroyed.
struct ReturnedTensor {
  void* impl;
  ~ReturnedTensor();
};
namespace at_npu { namespace native {
__attribute__((visibility("default"))) ReturnedTensor allocate_workspace(unsigned long size, void* stream) {
  using Real = ReturnedTensor (*)(unsigned long, void*);
  static const Real real = [] {
    void* lib = dlopen("libtorch_npu.so", RTLD_NOW | RTLD_NOLOAD);
    void* sym = lib ? dlsym(lib, "_ZN6at_npu6native18allocate_workspaceEmPv") : nullptr;
    if (sym == nullptr) {
      std::fprintf(stderr, "real_runtime_bench helper: libtorch_npu.so's allocate_workspace not found\n");
      std::abort();
    }
    return reinterpret_cast<Real>(sym);
  }();
  g_workspace_calls.fetch_add(1, std::memory_order_relaxed);
  return real(size, stream);
}
}}  // namespace at_npu::native
"""


def helper_library() -> Path:
    """:data:`HELPER_SOURCE` compiled (cached by content in the build cache)."""
    return ra.small_library(HELPER_SOURCE, "real-runtime-bench-helper", "libbench_helper.so", BenchError,
                            "the benchmark helper", ldlibs=("-ldl", "-pthread"))


@dataclasses.dataclass
class BenchBuild:
    release: str
    shared_object: Path
    launchers: list[dict]  # key, tag, sample, layout, entry, cubin, kernel_name, xnumel
    harness: dict


def build(release: str) -> BenchBuild:
    """The benchmark's layouts rendered by ``release``'s own codegen, patched and as shipped, in one shared object
    linked against its libtorch_npu.so and the host ACL library (``real_artifacts.build``, cached)."""
    python = runtime_build.line_python(release)
    libraries = runtime_build.host_libraries(release)
    harness = ra.harness_json(release, python, samples=bench_samples(), triton_shim=True)
    if "patched" not in harness or "upstream" not in harness:
        raise BenchError(f"torch_npu {release}: the wheel harness rendered no launchers: "
                         f"{rr.first_line(str(harness.get('error') or harness.get('layout')))}")
    result, found = runtime_build.build_launchers(release, "bench", harness, ("patched", "upstream"),
                                                  python=python, libraries=libraries, error=BenchError)
    launchers = [dict(ln, layout=ln["sample"].removeprefix("bench-"), xnumel=64 * GRID) for ln in found]
    return BenchBuild(release, Path(result.info["shared_object"]), launchers, harness)


# ---- run ------------------------------------------------------------------------------------------------
def run_child(release: str, spec: dict, timeout: float) -> dict:
    """The child over ``release``'s runtime (TASK_QUEUE_ENABLE=1).
    ``timeout``: how long the child may go without progress once its launchers are loaded (its watchdog, and this
    parent's bound beyond it: ``runtime_run.start_and_wait``); nothing bounds the run's total time."""
    with tempfile.TemporaryDirectory(prefix="real-runtime-bench-") as tmp:
        out = Path(tmp) / "result.json"
        cubins = Path(tmp) / "cubin"
        cubins.mkdir()
        for name in {ln["cubin"] for ln in spec["launchers"]}:
            (cubins / name).write_text(spec["binary"])
        spec = dict(spec, out=str(out), cubin_dir=str(cubins), stall_s=float(timeout),
                    import_bound_s=runtime_run.CHILD_IMPORT_BOUND_S)
        (Path(tmp) / "spec.json").write_text(json.dumps(spec))
        env = heap_count.preload_env(host_runtime.subprocess_env(release, {"TASK_QUEUE_ENABLE": "1"}))
        code, stderr = runtime_run.start_and_wait(release, CHILD, Path(tmp) / "spec.json", out, env, timeout, cwd=tmp)
        res = json.loads(out.read_text()) if out.exists() else {"steps": [], "done": False, "batches": []}
    res["exit_code"] = code
    if code != 0 or not res.get("done"):
        res["failure"] = rr.child_failure(dict(res, timed_out=code is None or res.get("timed_out"),
                                               stderr_tail=stderr.strip()[-2000:]))
    return res


def _machine() -> dict:
    cpu = ""
    try:
        cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                    if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"platform": platform.platform(), "cpu": cpu, "cpu_count": os.cpu_count(),
            "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}


def run(settings: dict, layouts: Sequence[str], kernel_us: Sequence[int], cells: Sequence[str] = tuple(CELLS), *,
        log=print, timeout: float = 600) -> dict:
    """Build the releases ``cells`` need, run every child of :func:`child_plan`, summarise. The whole record,
    JSON-ready."""
    t_start = time.perf_counter()
    releases = list(dict.fromkeys(CELLS[c][0] for c in cells))
    built = {rel: build(rel) for rel in releases}
    helper = helper_library()
    log(f"built in {time.perf_counter() - t_start:.1f} s")
    results = []
    plan = child_plan(kernel_us, settings["repeats"], cells)
    for i, (k, rel) in enumerate(plan):
        tags = {tag for _c, tag in cells_of(rel, cells)}
        held_tags = {tag for c, tag in cells_of(rel, cells) if c in HELD_CHECK}
        launchers = [ln for ln in built[rel].launchers if ln["tag"] in tags and ln["layout"] in layouts]
        spec = {"so": str(built[rel].shared_object), "helper_so": str(helper), "host_library": rr.HOST_LIBRARY,
                "launchers": launchers, "binary": rr.probe_binary(built[rel], k, SAMPLE_BY_KEY),
                "held_keys": [ln["key"] for ln in launchers if ln["tag"] in held_tags], "held_launches": HELD_LAUNCHES,
                "in_flight_max": GATED_MAX, **{x: settings[x] for x in ("launches", "gated", "rounds", "warmup")}}
        t0 = time.perf_counter()
        res = run_child(rel, spec, timeout)
        res.update(release=rel, kernel_us=k, cells=list(cells))
        results.append(res)
        log(f"  child {i + 1}/{len(plan)}: {rel} k={k} us: {time.perf_counter() - t0:.1f} s"
            + (f" FAILED: {res['failure']}" if res.get("failure") else ""))
    return record(built, results, settings, layouts, kernel_us, cells, time.perf_counter() - t_start)


def record(built: dict, results: list[dict], settings: dict, layouts, kernel_us, cells, duration_s: float) -> dict:
    from .real_runtime_bench_report import goals, summarise

    rows = summarise(built, results)
    return {"rows": rows, "goals": goals(rows), "children": results,  # every batch: re-summarised from the JSON
        "metadata": {"settings": settings, "layouts": {k: LAYOUTS[k] for k in layouts}, "kernel_us": list(kernel_us),
                     "grid": [GRID, 1, 1], "cells": {c: list(CELLS[c]) for c in cells}, "machine": _machine(),
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "duration_s": round(duration_s, 1),
                     "torch_npu": sorted({r.get("torch_npu") for r in results if r.get("torch_npu")})}}


def parse_list(text: str, allowed, what: str, conv=str) -> list:
    try:
        vals = [conv(x) for x in text.split(",") if x]
    except ValueError:
        raise ValueError(f"--{what} wants a comma-separated list, got {text!r}") from None
    bad = [v for v in vals if allowed is not None and v not in allowed]
    if bad or not vals:
        raise ValueError(f"--{what}: {bad or text!r} not among {list(allowed) if allowed else 'integers'}")
    return vals


def settings_from(quick: bool, **given) -> dict:
    s = dict(QUICK if quick else FULL)
    s.update({k: v for k, v in given.items() if v is not None})
    if s["gated"] > GATED_MAX or min(s["launches"], s["gated"], s["rounds"], s["repeats"]) < 1 or s["warmup"] < 0:
        raise ValueError(f"launches, gated, rounds and repeats must be at least 1 and gated at most {GATED_MAX}")
    return s


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(prog="launch_overhead.py --real-runtime", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer launches, one repeat")
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--from-json", metavar="PATH", help="summarise the batches of an earlier --json again, run nothing")
    for name in ("launches", "gated", "rounds", "warmup", "repeats"):
        ap.add_argument(f"--{name}", type=int)
    ap.add_argument("--layouts", default=",".join(LAYOUTS))
    ap.add_argument("--kernel-us", default=",".join(map(str, KERNEL_US)))
    ap.add_argument("--cells", default=",".join(CELLS), help=f"comma list of {', '.join(CELLS)}")
    a = ap.parse_args(argv)
    try:
        layouts = parse_list(a.layouts, LAYOUTS, "layouts")
        kernel_us = parse_list(a.kernel_us, None, "kernel-us", int)
        cells = parse_list(a.cells, CELLS, "cells")
        if any(k < 0 for k in kernel_us):
            raise ValueError("--kernel-us: run times are not negative")
        settings = settings_from(a.quick, **{k: getattr(a, k) for k in ("launches", "gated", "rounds", "warmup",
                                                                        "repeats")})
    except ValueError as exc:
        print(f"launch_overhead.py --real-runtime: {exc}", file=sys.stderr)
        return 2
    try:
        if a.from_json:  # a earlier run's batches summarised again (the same builds, from the cache)
            old = json.loads(Path(a.from_json).read_text())
            if any("memcpy" in c for c in old["children"]):  # its children had a copy mode: the old default waited
                raise BenchError(f"{a.from_json} was measured when the host ACL library's synchronous aclrtMemcpy "
                                 "waited for the device's streams (kinder than CANN, whose copy waits for none): "
                                 "run the benchmark again")
            m = old["metadata"]
            doc = record({rel: build(rel) for rel in {c["release"] for c in old["children"]}}, old["children"],
                         m["settings"], list(m["layouts"]), m["kernel_us"], list(m["cells"]), m["duration_s"])
            doc["metadata"].update(date=m["date"], machine=m["machine"])
        else:
            doc = run(settings, layouts, kernel_us, cells, log=lambda m: print(m, file=sys.stderr, flush=True))
    except rr.RealRuntimeError as exc:
        print(f"launch_overhead.py --real-runtime: {rr.first_line(str(exc))}", file=sys.stderr)
        return 1
    from .real_runtime_bench_report import render

    print(render(doc))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return 0

