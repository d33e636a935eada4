"""What a launch costs on torch_npu's own runtime: the floor, torch_npu's own fix and the patch set, side by side.

``benchmarks/launch_overhead.py --real-runtime`` runs this. Two released wheels run their launchers over the host
ACL library (a TEST DOUBLE of CANN, loaded only into the subprocesses started here; ``host_runtime.py``): their
own ``libtorch_npu.so``, task queue and caching allocator, the launchers their own codegen renders, as shipped and
after ``patchset.apply()`` (whatever the checkout's ``launch_codegen`` writes: nothing of the launcher is written
here). Cells:

* ``floor``: 2.7.1.post10 as shipped (NULL workspace and lock pointers);
* ``own-fix``: 2.7.1.post11 as shipped (two ``allocate_workspace`` requests in the lambda, the locks written by a
  synchronous ``aclrtMemcpy``), and ``own-fix-nowait``: the same with the host ACL library's synchronous copy not
  waiting for the work queued before it (``ACL_HOST_MEMCPY=immediate``; by default it waits);
* ``patch-post10`` / ``patch-post11``: both releases patched.

Per cell: the benchmark's layouts (:data:`LAYOUTS`) x simulated kernel time (the probe kernel's run time on the
host ACL library's stream thread). Children (one per release, kernel time and copy mode) run alternately, in a
rotating order, ``repeats`` times; inside a child the launchers take turns (``real_runtime_bench_child.py`` says
what each measures). Numbers are medians over every batch of a cell; counters per launch, the worst batch.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

from ... import launch_codegen as lc
from ..sim import harness as sim_harness
from ..sim.samples import Sample
from . import real_artifacts as ra
from . import real_runtime as rr
from . import rendered
from .real_runtime_judge import LAUNCH_CALLS, SYNC_CALLS, expectations, probe_view

CHILD = Path(__file__).with_name("real_runtime_bench_child.py")
FLOOR_RELEASE, OWN_FIX_RELEASE = "2.7.1.post10", "2.7.1.post11"
#: cell -> (release, rendering, host ACL library's synchronous copy)
CELLS = {
    "floor": (FLOOR_RELEASE, "upstream", "waits"),
    "own-fix": (OWN_FIX_RELEASE, "upstream", "waits"),
    "own-fix-nowait": (OWN_FIX_RELEASE, "upstream", "immediate"),
    "patch-post10": (FLOOR_RELEASE, "patched", "waits"),
    "patch-post11": (OWN_FIX_RELEASE, "patched", "waits"),
}
PATCH_SET = ("patch-post10", "patch-post11")
GRID = 4  # launched blocks (below the 48-core clamp)
#: The layouts: what compilers report (BiSheng: lock init value 0; docs/facts.md) and the init-7 layout.
LAYOUTS = {
    "ordered": ("workspace 256 B/block + 16 legacy lock slots, init 0 (what compilers report)",
                {"workspace_size": 256, "lock_num": 16}),
    "unordered": ("workspace 256 B/block + packed layout, 1 unordered lock (what compilers report)",
                  {"workspace_size": 256, "sync_block_lock_layout": 1 << 32}),
    "init7": ("workspace 256 B/block + 16 legacy lock slots, init 7 (no known compiler reports it)",
              {"workspace_size": 256, "lock_num": 16, "lock_init_val": 7}),
}
REPORTED = ("ordered", "unordered")  # the layouts the goals name
KERNEL_US = (0, 20, 100)
FULL = {"launches": 2000, "gated": 1000, "rounds": 2, "warmup": 50, "repeats": 3}
QUICK = {"launches": 300, "gated": 200, "rounds": 1, "warmup": 20, "repeats": 1}
GATED_MAX = 4000  # torch_npu's task queue holds 4096 tasks: more behind a held gate would never be queued


def bench_samples() -> tuple[Sample, ...]:
    return tuple(Sample(f"bench-{key}", title, {"name": f"triton_red_bench_{key} aiv", "mix_mode": "aiv",
                                                 "parallel_mode": "simd", "force_simt_only": False, **fields},
                        "*fp32,*fp32,i32", (GRID, 1, 1)) for key, (title, fields) in LAYOUTS.items())


SAMPLE_BY_KEY = {s.key: s for s in bench_samples()}


class BenchError(rr.RealRuntimeError):
    """The benchmark could not run (said in one line)."""


# ---- build ----------------------------------------------------------------------------------------------
#: The benchmark's own helper: a timed loop over a launcher's C entry, and a counting pass-through of torch_npu's
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
using Entry = int (*)(void*, void*, int64_t, int32_t, void*, const char*, char*, size_t);
extern "C" __attribute__((visibility("default"))) int bench_calls(void* fn, int n, void* in, void* out, int64_t numel,
    int32_t device, void* stream, const char* cubin_dir, int64_t* ns, char* error, size_t error_size) {
  const Entry entry = reinterpret_cast<Entry>(fn);
  int failed = 0;
  char scratch[4096];
  for (int i = 0; i < n; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const int rc = entry(in, out, numel, device, stream, cubin_dir, failed ? scratch : error, failed ? sizeof scratch : error_size);
    ns[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    failed += rc != 0;
  }
  return failed;
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
    digest = hashlib.sha256(HELPER_SOURCE.encode()).hexdigest()[:16]
    out = ra.build_cache() / f"real-runtime-bench-helper-{digest}" / "libbench_helper.so"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        src = out.parent / f"helper.{os.getpid()}.cpp"
        src.write_text(HELPER_SOURCE)
        tmp = out.parent / f".libbench_helper.{os.getpid()}.so"
        cxx = os.environ.get("CXX") or "g++"
        proc = subprocess.run([cxx, "-std=c++17", "-O2", "-shared", "-fPIC", "-o", str(tmp), str(src), "-ldl"],
                              capture_output=True, text=True)
        src.unlink(missing_ok=True)
        if proc.returncode != 0:
            raise BenchError(f"the benchmark helper did not compile: {rr.first_line(proc.stderr)}")
        os.replace(tmp, out)
    return out


@dataclasses.dataclass
class BenchBuild:
    release: str
    shared_object: Path
    launchers: list[dict]  # key, tag, sample, layout, entry, cubin, kernel_name, xnumel
    harness: dict


def build(release: str) -> BenchBuild:
    """The benchmark's layouts rendered by ``release``'s own codegen, patched and as shipped, in one shared object
    linked against its libtorch_npu.so and the host ACL library (``real_artifacts.build``, cached)."""
    python = rr.line_python(release)
    harness = ra.harness_json(release, python, samples=bench_samples(), triton_shim=True)
    if "patched" not in harness or "upstream" not in harness:
        raise BenchError(f"torch_npu {release}: the wheel harness rendered no launchers: "
                         f"{rr.first_line(str(harness.get('error') or harness.get('layout')))}")
    flavour = ra.Flavour(name="bench", tags=("patched", "upstream"), entries=rr.entries_source,
                         acl_libraries=rr.host_libraries(release), harness=harness, triton_shim=True)
    try:
        result = ra.build(release, python=python, flavour=flavour)
    except ra.TierError as exc:
        raise BenchError(str(exc)) from exc
    if not result.ok:
        raise BenchError(result.message)
    launchers = []
    for i, key in enumerate(result.info["launchers"]):
        tag, sample_key = key.split("/", 1)
        found = rr._LOAD_KERNEL.search(harness[tag][sample_key]["cpp"])
        if not found:
            raise BenchError(f"torch_npu {release}: no loadKernel(...) in the rendered {key} launcher")
        launchers.append({"key": key, "tag": tag, "sample": sample_key, "layout": sample_key.removeprefix("bench-"),
                          "entry": f"{rr.ENTRY}{i}", "cubin": Path(found.group("path")).name,
                          "kernel_name": found.group("name"), "xnumel": 64 * GRID})
    return BenchBuild(release, Path(result.info["shared_object"]), launchers, harness)


def probe_binary(built: BenchBuild, kernel_us: int) -> str:
    """The kernel binary every launcher reads: the host ACL library's probe per kernel, told what it must find and
    how long it runs."""
    lines, seen = ["ACL_HOST_PROBE_BINARY 1"], set()
    for ln in built.launchers:
        name = ln["kernel_name"].split()[0]
        if name in seen:
            continue
        seen.add(name)
        plan, site, args, grid = rendered.sample_setup(built.harness, SAMPLE_BY_KEY[ln["sample"]], ln["tag"])
        exp = sim_harness.expected(plan, site, grid)
        lines.append(f"kernel {name} has_ffts={int(site.has_ffts)} simt_only={int(site.simt(plan))} "
                     f"lock_bytes={exp['lock_bytes']} workspace_bytes={exp['workspace_bytes']} "
                     f"own_args_bytes={lc.own_args_bytes(args)} sim_time_us={kernel_us}")
    return "\n".join(lines) + "\n"


# ---- run ------------------------------------------------------------------------------------------------
def run_child(release: str, spec: dict, memcpy: str, timeout: float) -> dict:
    """The child over ``release``'s runtime (TASK_QUEUE_ENABLE=1, the host ACL library's copy mode ``memcpy``)."""
    from . import host_runtime

    with tempfile.TemporaryDirectory(prefix="real-runtime-bench-") as tmp:
        out = Path(tmp) / "result.json"
        cubins = Path(tmp) / "cubin"
        cubins.mkdir()
        for name in {ln["cubin"] for ln in spec["launchers"]}:
            (cubins / name).write_text(spec["binary"])
        spec = dict(spec, out=str(out), cubin_dir=str(cubins), deadline_s=max(5.0, timeout - 10))
        (Path(tmp) / "spec.json").write_text(json.dumps(spec))
        env = host_runtime.subprocess_env(release, {"TASK_QUEUE_ENABLE": "1", "ACL_HOST_MEMCPY": memcpy})
        try:
            proc = subprocess.run([rr.line_python(release), "-P", str(CHILD), str(Path(tmp) / "spec.json")], env=env,
                                  capture_output=True, text=True, timeout=timeout, cwd=tmp)
            code, stderr = proc.returncode, proc.stderr
        except subprocess.TimeoutExpired as exc:
            code, stderr = None, str(exc.stderr or "")
        res = json.loads(out.read_text()) if out.exists() else {"steps": [], "done": False, "batches": []}
    res["exit_code"] = code
    if code != 0 or not res.get("done"):
        res["failure"] = rr.child_failure(dict(res, timed_out=code is None or res.get("timed_out"),
                                               stderr_tail=stderr.strip()[-2000:]))
    return res


def child_plan(kernel_us: Sequence[int], repeats: int, cells: Sequence[str] = tuple(CELLS)) -> list[tuple[int, str, str]]:
    """(kernel us, release, copy mode) of every child, in the order they run: per repeat and kernel time each
    release's child (and the no-wait child) once, the order rotated so that none is always first."""
    kinds = list(dict.fromkeys((CELLS[c][0], CELLS[c][2]) for c in cells))
    out, turn = [], 0
    for _rep in range(repeats):
        for k in kernel_us:
            out += [(k, *kinds[(turn + i) % len(kinds)]) for i in range(len(kinds))]
            turn += 1
    return out


def cells_of(release: str, memcpy: str, cells: Sequence[str] = tuple(CELLS)) -> list[tuple[str, str]]:
    """(cell, rendering) that a child of ``release`` with copy mode ``memcpy`` measures."""
    return [(c, CELLS[c][1]) for c in cells if CELLS[c][0] == release and CELLS[c][2] == memcpy]


# ---- judge (pure) -----------------------------------------------------------------------------------------
def _count(calls: dict, names: Sequence[str], baseline: dict | None = None) -> int:
    n = sum((calls.get(f) or {}).get("calls", 0) for f in names)
    return n - sum((baseline or {}).get(f, 0) for f in names)


def batch_counters(batch: dict, baseline: dict) -> dict:
    """Per launch of a free run: allocator calls (caching + workspace allocator), device synchronisations,
    host-blocking calls (synchronous copies, stream and device synchronisations), page-locked allocations; the
    synchronisation the child makes after the run (``baseline``: what a bare one calls) taken off."""
    n, calls = batch["launches"], batch["calls"]
    syncs = _count(calls, SYNC_CALLS, baseline)
    dsync = _count(calls, ("aclrtSynchronizeDevice", "aclrtSynchronizeDeviceWithTimeout"), baseline)
    copies = _count(calls, ("aclrtMemcpy",), baseline)
    return {"allocator_calls": (batch["caching_requests"] + batch["workspace_calls"]) / n,
            "caching_allocator_calls": batch["caching_requests"] / n, "workspace_allocator_calls": batch["workspace_calls"] / n,
            "device_synchronizations": dsync / n, "host_blocking_calls": (syncs + copies) / n,
            "sync_copies": copies / n, "page_locked_allocations": _count(calls, ("aclrtMallocHost",), baseline) / n,
            "launch_calls": _count(calls, LAUNCH_CALLS) / n, "memsets": _count(calls, ("aclrtMemsetAsync",)) / n}


def batch_verdict(built: BenchBuild, ln: dict, batch: dict) -> list[str]:
    """What went wrong in a free run: calls that threw, launches that never reached the kernel, what the kernels
    got (the simulation's rules on the probe's records), the host ACL library's error reports."""
    problems = []
    if batch.get("failed_calls"):
        problems.append(f"{batch['failed_calls']} calls threw: {rr.first_line(batch['call_error'], 160)}")
    if batch.get("sync_error"):
        problems.append(f"synchronize: {rr.first_line(batch['sync_error'], 160)}")
    if batch["probe_count"] != batch["launches"] - batch.get("failed_calls", 0):
        problems.append(f"{batch['probe_count']} of {batch['launches']} launches reached the kernel")
    plan, site, _args, grid = rendered.sample_setup(built.harness, SAMPLE_BY_KEY[ln["sample"]], ln["tag"])
    exp = expectations(plan, site, grid)
    for d in batch["probe_digest"]:
        for p in sim_harness.kernel_problems(probe_view(d["record"]), *exp):
            # the content found differs from record to record: what was expected is enough here
            problems.append(f"lock content at start differs from {p.split(' != ')[-1]}" if p.startswith("lock content")
                            else p)
    if batch.get("error_count"):
        kinds = sorted({e["kind"] for e in batch.get("errors", [])})
        problems.append(f"{batch['error_count']} host ACL library error reports ({', '.join(kinds)})")
    if batch.get("missing_calls"):
        problems.append(f"unimplemented ACL calls {sorted(batch['missing_calls'])}")
    return list(dict.fromkeys(problems))


#: The verdict column's words for the problems :func:`batch_verdict` finds (the JSON keeps the problems whole).
VERDICT_WORDS = (("sync pointer is null", "null-pointers"), ("regions overlap", "regions-overlap"),
                 ("lock content", "lock-content"), ("disturbed", "disturbed"), ("calls threw", "threw"),
                 ("reached the kernel", "launches-lost"), ("synchronize:", "sync-error"),
                 ("host ACL library error", "host-errors"), ("unimplemented", "missing-acl"))


def short_verdict(problems: Sequence[str]) -> str:
    if not problems:
        return "clean"
    words = [next((w for s, w in VERDICT_WORDS if s in p), "other") for p in problems]
    return "+".join(dict.fromkeys(words))


def _median(v):
    return statistics.median(v) if v else None


def summarise(built: dict[str, BenchBuild], results: list[dict]) -> list[dict]:
    """One row per (layout, kernel us, cell): medians over every batch (each repeat's rounds), counters the worst
    batch's, peak live launch blocks the most, the verdict every batch's problems."""
    acc: dict = {}
    for res in results:
        b = built[res["release"]]
        by_key = {ln["key"]: ln for ln in b.launchers}
        for batch in res.get("batches", []):
            ln = by_key[batch["key"]]
            cell = next(c for c, t in cells_of(res["release"], res["memcpy"], res["cells"]) if t == ln["tag"])
            a = acc.setdefault((ln["layout"], res["kernel_us"], cell), {"batches": [], "problems": []})
            a["batches"].append(dict(batch, counters_per_launch=batch_counters(batch, res.get("synchronize_calls", {}))))
            a["problems"] += batch_verdict(b, ln, batch)
        for failure in filter(None, [res.get("failure")]):
            for cell, tag in cells_of(res["release"], res["memcpy"], res["cells"]):
                for ln in (x for x in b.launchers if x["tag"] == tag):
                    acc.setdefault((ln["layout"], res["kernel_us"], cell), {"batches": [], "problems": []})[
                        "problems"].append(f"child: {failure}")
    rows = []
    for layout in LAYOUTS:
        for k in sorted({key[1] for key in acc}):
            for cell in CELLS:
                a = acc.get((layout, k, cell))
                if a is None:
                    continue
                bs = a["batches"]
                row = {"layout": layout, "kernel_us": k, "cell": cell, "release": CELLS[cell][0],
                       "rendering": CELLS[cell][1], "copy": CELLS[cell][2], "batches": len(bs)}
                if bs:
                    call = _median([x["call_ns_median"] for x in bs])
                    queue = _median([x["queue_cpu_ns"] / x["launches"] for x in bs])
                    wall = _median([x["queue_ns_per_launch"] for x in bs if "queue_ns_per_launch" in x])
                    row.update(call_ns=call, call_ns_mean=_median([x["call_ns_mean"] for x in bs]), queue_ns=queue,
                               queue_wall_ns=wall, total_ns=call + queue,
                               total_wall_ns=call + wall if wall is not None else None,
                               launches_per_s=_median([x["launches"] / x["wall_s"] for x in bs]),
                               peak_live_blocks=max(x["peak_live_allocations"] for x in bs),
                               runs={"call_ns": [x["call_ns_median"] for x in bs],
                                     "queue_ns": [round(x["queue_cpu_ns"] / x["launches"]) for x in bs],
                                     "queue_wall_ns": [x.get("queue_ns_per_launch") for x in bs],
                                     "launches_per_s": [round(x["launches"] / x["wall_s"]) for x in bs]})
                    for c in bs[0]["counters_per_launch"]:
                        row[c] = max(x["counters_per_launch"][c] for x in bs)
                row["problems"] = list(dict.fromkeys(a["problems"]))
                row["verdict"] = short_verdict(row["problems"])
                rows.append(row)
    return with_ratios(rows)


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each row's ratios against the own fix (launches per second, total host ns) and the floor (queue thread) of
    its layout and kernel time."""
    ref = {(r["layout"], r["kernel_us"], r["cell"]): r for r in rows}
    for r in rows:
        own, floor = ref.get((r["layout"], r["kernel_us"], "own-fix")), ref.get((r["layout"], r["kernel_us"], "floor"))

        def ratio(a, b):
            return a / b if a is not None and b else None

        r["launches_per_s_vs_own_fix"] = ratio(r.get("launches_per_s"), own and own.get("launches_per_s"))
        r["total_vs_own_fix"] = ratio(r.get("total_ns"), own and own.get("total_ns"))
        r["queue_vs_floor"] = ratio(r.get("queue_ns"), floor and floor.get("queue_ns"))
        r["total_wall_vs_own_fix"] = ratio(r.get("total_wall_ns"), own and own.get("total_wall_ns"))
        r["queue_wall_vs_floor"] = ratio(r.get("queue_wall_ns"), floor and floor.get("queue_wall_ns"))
    return rows


def goals(rows: list[dict]) -> list[str]:
    """Issue 30's goals, each with the measured figures and met / not met (never assumed)."""
    out = []
    patch = [r for r in rows if r["cell"] in PATCH_SET]

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    for k in (20, 100):
        rs = [r for r in patch if r["kernel_us"] == k and r.get("launches_per_s_vs_own_fix") is not None]
        if rs:
            v = [r["launches_per_s_vs_own_fix"] for r in rs]
            out.append(f"launches/s with {k} us kernels >= 10x the own fix: {min(v):.2f}x .. {max(v):.2f}x: "
                       f"{verdict(min(v) >= 10)}")
    rs = [r for r in patch if r["kernel_us"] == 0 and r["layout"] in REPORTED and r.get("total_vs_own_fix") is not None]
    if rs:
        v = [r["total_vs_own_fix"] for r in rs]
        out.append(f"0 us, reported layouts: total host ns (call + queue CPU) <= 1.5x the own fix: {min(v):.2f}x .. {max(v):.2f}x: "
                   f"{verdict(max(v) <= 1.5)}")
        v = [r["queue_vs_floor"] for r in rs if r.get("queue_vs_floor") is not None]
        if v:
            out.append(f"0 us, reported layouts: queue-thread CPU ns <= 1.5x the floor: {min(v):.2f}x .. {max(v):.2f}x: "
                       f"{verdict(max(v) <= 1.5)}")
        for key, what in (("total_wall_vs_own_fix", "total with q wall vs the own fix"),
                          ("queue_wall_vs_floor", "q wall vs the floor")):
            v = [r[key] for r in rs if r.get(key) is not None]
            if v:
                out.append(f"  (the same by wall time, {what}: {min(v):.2f}x .. {max(v):.2f}x)")
    if patch:
        bad = [r for r in patch if (r.get("allocator_calls"), r.get("device_synchronizations"),
                                    r.get("host_blocking_calls"), r.get("page_locked_allocations")) != (1, 0, 0, 0)]
        out.append(f"counters 1/0/0/0 per launch in every patch-set cell: {verdict(not bad)}"
                   + (f" ({len(bad)} cells differ)" if bad else ""))
        unclean = [r for r in patch if r["verdict"] != "clean"]
        out.append(f"every patch-set cell clean: {verdict(not unclean)}")
    return out


# ---- output -----------------------------------------------------------------------------------------------
def _num(x, fmt="{:.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def _ctr(x) -> str:
    return "-" if x is None else (f"{x:g}" if abs(x - round(x)) < 1e-9 else f"{x:.2f}")


HEAD = ["layout", "k_us", "cell", "call", "queue", "total", "q wall", "launch/s", "l/s/own", "total/own",
        "queue/floor", "alloc", "dsync", "block", "pinned", "peak", "verdict"]


def table(rows: list[dict]) -> str:
    out = []
    for r in rows:
        out.append([r["layout"], str(r["kernel_us"]), r["cell"], _num(r.get("call_ns")), _num(r.get("queue_ns")),
                    _num(r.get("total_ns")), _num(r.get("queue_wall_ns")), _num(r.get("launches_per_s")),
                    _num(r.get("launches_per_s_vs_own_fix"), "{:.2f}"), _num(r.get("total_vs_own_fix"), "{:.2f}"),
                    _num(r.get("queue_vs_floor"), "{:.2f}"), _ctr(r.get("allocator_calls")),
                    _ctr(r.get("device_synchronizations")), _ctr(r.get("host_blocking_calls")),
                    _ctr(r.get("page_locked_allocations")), _num(r.get("peak_live_blocks")), r["verdict"]])
    widths = [max(len(h), *(len(x[i]) for x in out)) if out else len(h) for i, h in enumerate(HEAD)]
    left = {0, 2, len(HEAD) - 1}

    def fmt(x):
        return "  ".join(v.ljust(widths[i]) if i in left else v.rjust(widths[i]) for i, v in enumerate(x)).rstrip()

    return "\n".join([fmt(HEAD), fmt(["-" * w for w in widths])] + [fmt(x) for x in out])


LEGEND = ("call: host ns per launch on the calling thread (median over a batch's calls of call_<kernel>: the launch "
          "memory, the queue call, the hand-over); queue: CPU ns per launch of torch_npu's queue thread over a "
          "free-running batch (what it computes; a lambda blocked in a copy is not running); total = call + queue; "
          "q wall: ns per launch the queue thread took through a batch queued behind a held gate, back to back "
          "(its waits and its preemption included); launch/s: launches per second of a free run, first call to the "
          "end of torch.npu.synchronize(); l/s/own, total/own: against the own-fix cell of the same layout and kernel "
          "time; queue/floor: against the floor's. Per launch (the worst batch): alloc = allocator calls (torch_npu's "
          "caching-allocator requests + workspace-allocator calls), dsync = device synchronisations, block = "
          "host-blocking calls (synchronous copies, stream and device synchronisations), pinned = page-locked "
          "allocations; peak = most caching-allocator allocations live at once in a free run beyond those before it "
          "(the launch blocks held); verdict: the probe kernel's records by the simulation's rules and the host ACL "
          "library's error reports ('clean', or what they found).")


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
    for i, (k, rel, mem) in enumerate(plan):
        tags = {tag for _c, tag in cells_of(rel, mem, cells)}
        launchers = [ln for ln in built[rel].launchers if ln["tag"] in tags and ln["layout"] in layouts]
        spec = {"so": str(built[rel].shared_object), "helper_so": str(helper), "host_library": rr.HOST_LIBRARY,
                "launchers": launchers, "binary": probe_binary(built[rel], k),
                **{x: settings[x] for x in ("launches", "gated", "rounds", "warmup")}}
        t0 = time.perf_counter()
        res = run_child(rel, spec, mem, timeout)
        res.update(release=rel, kernel_us=k, memcpy=mem, cells=list(cells))
        results.append(res)
        log(f"  child {i + 1}/{len(plan)}: {rel} k={k} us copy {mem}: {time.perf_counter() - t0:.1f} s"
            + (f" FAILED: {res['failure']}" if res.get("failure") else ""))
    return record(built, results, settings, layouts, kernel_us, cells, time.perf_counter() - t_start)


def record(built: dict, results: list[dict], settings: dict, layouts, kernel_us, cells, duration_s: float) -> dict:
    rows = summarise(built, results)
    return {"rows": rows, "goals": goals(rows), "children": results,  # every batch: re-summarised from the JSON
        "metadata": {"settings": settings, "layouts": {k: LAYOUTS[k] for k in layouts}, "kernel_us": list(kernel_us),
                     "grid": [GRID, 1, 1], "cells": {c: list(CELLS[c]) for c in cells}, "machine": _machine(),
                     "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                     "duration_s": round(duration_s, 1),
                     "torch_npu": sorted({r.get("torch_npu") for r in results if r.get("torch_npu")})}}


def render(doc: dict) -> str:
    s = doc["metadata"]["settings"]
    head = (f"Launch overhead on torch_npu's own runtime (released wheels over the host ACL library, a test double of "
            f"CANN): per cell and child {s['rounds']} rounds of {s['launches']} free-running and {s['gated']} gated "
            f"launches ({s['warmup']} warm-up), grid {GRID} blocks, TASK_QUEUE_ENABLE=1; {s['repeats']} alternating "
            f"repeats; medians over the batches. Synchronous copy: waits for the work queued before it on the device "
            f"(\"copy no-wait\": copies at once).")
    return "\n".join([head, table(doc["rows"]), LEGEND, "goals (issue 30):", *(f"  {g}" for g in doc["goals"]),
                      f"total {doc['metadata']['duration_s']} s"])


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
            m = old["metadata"]
            doc = record({rel: build(rel) for rel in {c["release"] for c in old["children"]}}, old["children"],
                         m["settings"], list(m["layouts"]), m["kernel_us"], list(m["cells"]), m["duration_s"])
            doc["metadata"].update(date=m["date"], machine=m["machine"])
        else:
            doc = run(settings, layouts, kernel_us, cells, log=lambda m: print(m, file=sys.stderr, flush=True))
    except rr.RealRuntimeError as exc:
        print(f"launch_overhead.py --real-runtime: {rr.first_line(str(exc))}", file=sys.stderr)
        return 1
    print(render(doc))
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return 0

