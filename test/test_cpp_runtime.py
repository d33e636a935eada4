"""Builds and runs the C++ side: the launch helper's C++ unit tests on a released torch_npu's own runtime
(``tooling/releases/cpp_tests.py``: compiled against the wheel's headers, run in one child per TASK_QUEUE_ENABLE
value over the host ACL library, each case a pytest result here), the host ACL simulation's own tests (through
CMake + ctest), plus a few programs compiled with ``sim_build.compile_program``.

The CMake build lives outside the clone, in
``$TORCH_NPU_PATCHSET_BUILD_CACHE/cmake/<hash of this checkout's path>``; it
is configured, built and run once per pytest session under a file lock, so
concurrent pytest processes neither race on it nor rebuild needlessly.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import release_wheels

ROOT = Path(__file__).resolve().parents[1]
PATCHSET = ROOT / "torch_npu" / "_inductor" / "patchset"


from torch_npu._inductor.patchset.tooling.sim import build as sim_build  # noqa: E402

_CXX = os.environ.get("CXX") or "g++"
needs_cxx = pytest.mark.skipif(shutil.which(_CXX) is None, reason=f"C++ compiler {_CXX!r} not found")
needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("ctest") is None,
                                 reason="cmake/ctest not found")

# The helper's C++ test cases on the real runtime (test/cpp/test_*.cpp on real_support.h) and the TASK_QUEUE_ENABLE
# values each runs with; the list guards against one silently disappearing or changing its children.
REQUIRED_REAL_CASES = {
    # regions and lock content (issue 22: LaunchMemory / LaunchRegions)
    "test_regions.regions_disjoint_and_aligned_for_every_combination": "1",
    "test_regions.regions_do_not_depend_on_allocator_base_alignment": "1",
    "test_regions.lock_content_seen_by_kernel_for_every_layout": "1",
    "test_regions.zero_grid_takes_nothing": "1",
    "test_regions.no_locks_no_workspace_takes_nothing": "1",
    "test_regions.ffts_address_and_argument_order_decoded": "1",
    "test_regions.probe_flags_wrong_pointer_presence": "1",
    # ordering: a block held until its kernel has finished, reused only by the same stream
    "test_ordering.back_to_back_launches_on_one_stream_get_another_block_while_the_first_runs": "1",
    "test_ordering.block_is_reused_only_by_the_same_stream": "1",
    "test_ordering.concurrent_streams_do_not_overlap": "1",
    "test_ordering.paused_queue_n_launches_held_until_their_lambdas_ran": "1",
    "test_ordering.a_block_is_held_until_its_kernel_has_finished": "1",
    "test_ordering.out_of_memory_gives_done_blocks_back_and_asks_again": "1",
    # errors: on the calling thread (sizes, the allocator), or in the lambda (a fill)
    "test_errors.workspace_size_overflow_throws_on_calling_thread_naming_the_kernel": "1",
    "test_errors.lock_size_overflow_throws_on_calling_thread_naming_the_kernel": "1",
    "test_errors.out_of_memory_is_the_allocators_error_on_the_calling_thread": "1",
    "test_errors.injected_allocator_failure_is_rethrown_with_its_text": "1",
    "test_errors.fill_failure_on_queue_thread_returns_its_code_with_one_log_line": "1!",  # stops the queue: last
    "test_errors.a_later_fill_failure_stops_at_that_fill": "1",
    # the launch path through torch_npu's queue, devices
    "test_launch_path.queue_thread_launches_run_in_order_and_clean": "1",
    "test_launch_path.task_queue_off_runs_the_lambda_on_the_calling_thread": "0",
    "test_launch_path.two_devices_take_memory_of_their_own": "10",
    "test_launch_path.streams_never_wait_on_each_other": "0",
    # threads, devices, steady state
    "test_stress.threads_8_streams_4_launches_200": "10",
    "test_stress.devices_and_threads_queue_on_and_off": "10",
    "test_stress.steady_state_one_allocator_call_no_sync_no_blocking_no_pinned": "1",
    # the released upstream fix, for contrast (upstream's own launchers: test_real_runtime.py)
    "test_contrast_upstream.helper_is_clean_in_the_same_scenarios": "1",
}
REAL_RUNS = sorted((case, q) for case, queues in REQUIRED_REAL_CASES.items() for q in queues if q != "!")

LEG = ".".join(importlib.metadata.version("torch").split("+")[0].split(".")[:3])
#: The release the helper's C++ tests run on, per CI leg (test_real_runtime.py's REFERENCE): each on its own torch
#: line (2.13.0 on torch 2.13.0+cpu on the 2.14.1 leg).
CPP_RELEASE = {"2.7.1": "2.7.1.post10", "2.14.1": "2.13.0"}.get(LEG)

# The simulation's own tests (ctest) that must exist.
REQUIRED_CTESTS = {
    # the simulation catches what it claims to (ACL boundary: memory, copies, events, devices, capture, logs)
    "test_sim.device_memory_is_not_host_accessible",
    "test_sim.uninitialised_read_detected",
    "test_sim.use_after_free_and_out_of_bounds_detected",
    "test_sim.stale_pinned_source_detected",
    "test_sim.events_track_stream_progress",
    "test_sim.capture_records_and_replay_runs",
    "test_sim.event_record_or_device_sync_invalidates_capture",
    "test_sim.fault_injection_hits_the_nth_call",
    # the torch_npu stand-ins the simulation harness still uses, where the real runtime does not check them
    "test_sim.synchronise_from_a_queue_thread_is_a_self_wait",
    "test_sim.no_out_of_memory_retry_while_a_capture_is_underway",
    "test_sim.device_capacity_bounds_every_allocator",
    "test_sim.on_call_hook_runs_before_the_nth_call",
}


@pytest.fixture(scope="session")
def real_cpp() -> dict:
    """Every case of the helper's C++ tests, run on CPP_RELEASE's own runtime (one build, a child per
    TASK_QUEUE_ENABLE value)."""
    if CPP_RELEASE is None:
        pytest.skip(f"no release declared for the torch {LEG} leg")
    from torch_npu._inductor.patchset.tooling.releases import cpp_tests

    return cpp_tests.run(release_wheels.fetched(CPP_RELEASE))


@needs_cxx
def test_real_cases_are_the_required_ones(real_cpp):
    """Every case the test files register is required, with the same TASK_QUEUE_ENABLE values, and back."""
    assert real_cpp["cases"] == REQUIRED_REAL_CASES


@needs_cxx
@pytest.mark.parametrize("case,queue", REAL_RUNS, ids=[f"{c}[TASK_QUEUE_ENABLE={q}]" for c, q in REAL_RUNS])
def test_cpp_case_on_real_runtime(real_cpp, case, queue):
    result = real_cpp["results"].get((case, queue))
    assert result is not None, f"{case} did not run with TASK_QUEUE_ENABLE={queue}"
    assert result["ok"], result["message"]


def _run(cmd, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


class _CMakeRun:
    def __init__(self, build: Path):
        self.build = build
        self.steps: list[tuple[str, subprocess.CompletedProcess]] = []

    def ok(self) -> bool:
        return all(p.returncode == 0 for _, p in self.steps)

    def report(self) -> str:
        return "\n".join(f"$ {name} (exit {p.returncode})\n{p.stdout}{p.stderr}" for name, p in self.steps)

    def output(self, name: str) -> str:
        for n, p in self.steps:
            if n == name:
                return p.stdout + p.stderr
        return ""


@pytest.fixture(scope="session")
def cmake_run() -> _CMakeRun:
    if shutil.which("cmake") is None or shutil.which("ctest") is None:
        pytest.skip("cmake/ctest not found")
    if shutil.which(_CXX) is None:
        pytest.skip(f"C++ compiler {_CXX!r} not found")
    top = sim_build.build_dir() / "cmake"
    top.mkdir(parents=True, exist_ok=True)
    key = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    build = top / key
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    run = _CMakeRun(build)
    with open(top / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one configure/build/ctest at a time per checkout
        try:
            conf = _run(["cmake", "-S", ROOT, "-B", build, *gen])
            if conf.returncode != 0 and (build / "CMakeCache.txt").exists():
                shutil.rmtree(build)  # stale cache (other generator or moved tree): start over once
                conf = _run(["cmake", "-S", ROOT, "-B", build, *gen])
            run.steps.append(("configure", conf))
            if conf.returncode == 0:
                run.steps.append(("build", _run(["cmake", "--build", build, "-j", str(os.cpu_count() or 2)])))
            if run.ok():
                run.steps.append(("ctest-list", _run(["ctest", "--test-dir", build, "-N"])))
                run.steps.append(("ctest", _run(["ctest", "--test-dir", build, "--output-on-failure",
                                                 "-j", str(os.cpu_count() or 2)], timeout=900)))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return run


@needs_cmake
@needs_cxx
def test_cmake_build_and_ctest_green(cmake_run):
    assert cmake_run.ok(), cmake_run.report()
    assert "100% tests passed" in cmake_run.output("ctest"), cmake_run.report()


@needs_cmake
@needs_cxx
def test_required_ctest_cases_exist(cmake_run):
    assert cmake_run.ok(), cmake_run.report()
    listed = cmake_run.output("ctest-list")
    missing = sorted(n for n in REQUIRED_CTESTS if f": {n}\n" not in listed + "\n")
    assert not missing, f"missing ctest cases: {missing}\n{listed}"


_PROGRAM = r"""
#include <cstdio>
#include <acl/acl.h>
#include <acl_sim/control.h>
#include <npu_launch_resources.h>

int main() {
  aclrtStream s = nullptr;
  if (aclrtCreateStream(&s) != ACL_SUCCESS) return 2;
  acl_sim::ProbeConfig cfg;
  cfg.name = "triton_py";
  cfg.lock_bytes = 2 * 64 + (1 + 2 * 6) * 64;  // 2 ordered, 1 unordered, P = 3 * 2
  cfg.workspace_bytes = 3 * 256;
  aclrtFuncHandle h = acl_sim::register_probe_kernel(cfg);
  torch_npu::inductor::LockLayout l;
  l.ordered = 2;
  l.unordered = 1;
  l.participant_factor = 2;
  l.init_value = -5;
  torch_npu::inductor::LaunchMemory m("triton_py", s, 3, 1, 1, 3, 256, l);
  const torch_npu::inductor::LaunchRegions r = m.regions();
  if (r.write_locks("triton_py", s) != ACL_SUCCESS) return 2;
  struct { void* lock; void* ws; int32_t g[3]; } args{r.locks, r.workspace, {3, 1, 1}};
  if (aclrtLaunchKernelWithHostArgs(h, 3, s, nullptr, &args, sizeof args, nullptr, 0) != ACL_SUCCESS) return 3;
  const uint64_t id = acl_sim::last_launch_id();
  m.release_when_finished();
  aclrtSynchronizeStream(s);
  acl_sim::ProbeRecord rec;
  if (!acl_sim::probe_record(id, &rec)) return 4;
  std::printf("slots %zu first %lld unordered0 %lld last %lld errors %llu\n", rec.lock_slots_at_start.size(),
              (long long)rec.lock_slots_at_start[0], (long long)rec.lock_slots_at_start[16],
              (long long)rec.lock_slots_at_start.back(), (unsigned long long)acl_sim::counters().errors);
  return 0;
}
"""


@needs_cxx
def test_compile_program_runs_helper_against_sim():
    exe = sim_build.compile_program(_PROGRAM, "py_probe")
    assert exe.exists()
    out = _run([exe], timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    # 2 ordered locks x 8 slots = 0 (beside an unordered lock); unordered lock: slot 0 = P = 6, 13*8 slots in all
    assert out.stdout.split() == ["slots", str(16 + 13 * 8), "first", "0", "unordered0", "6", "last", "0",
                                  "errors", "0"]
    # cached: same path, no rebuild
    assert sim_build.compile_program(_PROGRAM, "py_probe") == exe


@needs_cxx
def test_compile_program_reports_compiler_errors():
    with pytest.raises(RuntimeError) as info:
        sim_build.compile_program("int main() { return undefined_symbol; }\n", "py_broken")
    assert "undefined_symbol" in str(info.value)


@needs_cxx
def test_sim_library_cached_outside_clone():
    lib = sim_build.sim_library()
    assert lib.exists() and lib.name == "libacl_sim.a"
    assert sim_build.sim_library() == lib
    assert ROOT not in lib.parents
    assert sim_build.build_dir() in lib.parents


def test_build_dir_from_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_NPU_PATCHSET_BUILD_CACHE", str(tmp_path / "cache"))
    assert sim_build.build_dir() == tmp_path / "cache"
    assert (tmp_path / "cache").is_dir()


def test_no_init_py_in_package_data():
    for d in (PATCHSET / "csrc", PATCHSET / "tooling" / "sim" / "acl_sim"):
        assert not list(d.rglob("__init__.py")), d


# ---- the generated launcher's shape, and the mutations issues 22 and 31 must catch -------------
from torch_npu._inductor.patchset import launch_codegen as lc  # noqa: E402
from torch_npu._inductor.patchset.launch_plan import plan_from_metadata  # noqa: E402

LAUNCHES_IN_WRAPPER = 6
_META = {"name": "triton_shape", "workspace_size": 512, "lock_num": 8, "lock_init_val": 3}
_SIGNATURE = "*fp32,i32"


def _body(i: int) -> list[str]:
    """Launch ``i`` of the wrapper: the body of launch_codegen.launcher_source, names made unique."""
    plan = plan_from_metadata(_META, kernel="triton_shape")
    src = lc.launcher_source(plan, lc.LaunchSite(prefix=f"npu_sync{i}_"), lc.args_from_signature(_SIGNATURE))
    lines = src.splitlines()
    start = next(n for n, ln in enumerate(lines) if ln.endswith(") {")) + 1
    body = [ln for ln in lines[start:-1] if "return;" not in ln]  # the grid check is the wrapper's
    assert lines[-1] == "}" and any("launchKernel(launch_call" in ln for ln in body), src
    return [ln.replace("launch_call", f"launch_call_{i}") for ln in body]


def _owner_in_lambda(body: list[str], i: int) -> list[str]:
    """Mutant: the lambda holds the owning object (a shared_ptr to the LaunchMemory) instead of the raw regions."""
    p = f"npu_sync{i}_"
    text = "\n".join(body)
    text = text.replace(f"torch_npu::inductor::LaunchMemory {p}memory(",
                        f"auto {p}owner = std::make_shared<torch_npu::inductor::LaunchMemory>(")
    for field in ("write_locks(", "locks;", "workspace;", "held,"):
        text = text.replace(f"{p}regions.{field}", f"{p}owner->regions().{field}")
    out = [ln for ln in text.splitlines() if f"{p}memory.release_when_finished();" not in ln and f"{p}regions = " not in ln]
    assert f"{p}owner->regions().locks" in "\n".join(out)
    return out


def _release_once_queued(body: list[str], i: int) -> list[str]:
    """Mutant (issue 31's defect): the calling thread marks the launch done itself once the queue call
    returned, so its block goes back while the lambda may still wait in the queue."""
    p = f"npu_sync{i}_"
    mark = f"if ({p}regions.held != nullptr) {{ {p}regions.held->with_event = false; {p}regions.held->done.store(true); }}"
    out = [ln.replace(f"{p}memory.release_when_finished();", f"{mark} {p}memory.release_when_finished();")
           for ln in body]
    assert out != body
    return out


def wrapper_source(variant: str) -> str:
    """A wrapper function making LAUNCHES_IN_WRAPPER launches of the generated code, one after the other
    (as a compiled graph's wrapper does), in the generated shape or one of three mutants."""
    bodies = [_body(i) for i in range(LAUNCHES_IN_WRAPPER)]
    releases: list[str] = []
    if variant == "owner-in-lambda":
        bodies = [_owner_in_lambda(b, i) for i, b in enumerate(bodies)]
    elif variant == "release-once-queued":
        bodies = [_release_once_queued(b, i) for i, b in enumerate(bodies)]
    elif variant == "release-at-end":
        releases = [ln for b in bodies for ln in b if "memory.release_when_finished();" in ln]
        bodies = [[ln for ln in b if "memory.release_when_finished();" not in ln] for b in bodies]
        assert len(releases) == LAUNCHES_IN_WRAPPER
    else:
        assert variant == "generated"
    params = ", ".join(["aclrtFuncHandle kernel_handle"] + [f"{a.ctype} {a.value}" for a in
                                                            lc.args_from_signature(_SIGNATURE)]
                       + ["uint32_t grid_0", "uint32_t grid_1", "uint32_t grid_2", "aclrtStream stream_"])
    lines = [f"static void graph_wrapper({params}) {{", "    if (grid_0 == 0 || grid_1 == 0 || grid_2 == 0) return;"]
    for b in bodies:
        lines += b
    lines += releases + ["}"]
    return "\n".join(lines) + "\n"


_SHAPE_MAIN = r"""
// Twice: (A) the task queue on but paused, so the wrapper's launches are all queued before any runs;
// (B) the task queue off, so each lambda runs inside its launchKernel call.
static acl_sim::Counters run_wrapper(aclrtFuncHandle h, void* buf, aclrtStream s, bool paused) {
  acl_sim::reset_counters();
  acl_sim::set_task_queues_paused(paused);
  graph_wrapper(h, buf, 7, 4, 1, 1, s);
  acl_sim::Counters during = acl_sim::counters();
  acl_sim::set_task_queues_paused(false);
  acl_sim::drain_task_queues();
  aclrtSynchronizeStream(s);
  return during;
}
static void next_launch_releases() { torch_npu::inductor::HeldBlocks::all().release_done(); }

int main() {
  aclrtStream s = nullptr;
  if (aclrtCreateStream(&s) != ACL_SUCCESS) return 2;
  acl_sim::ProbeConfig cfg;
  cfg.name = "triton_shape";
  cfg.lock_bytes = 8 * 8;
  cfg.workspace_bytes = 512 * 4;
  cfg.sim_time_us = 200;
  cfg.own_args_bytes = 12;
  aclrtFuncHandle h = acl_sim::register_probe_kernel(cfg);
  void* buf = nullptr;
  if (aclrtMalloc(&buf, 256, ACL_MEM_MALLOC_HUGE_FIRST) != ACL_SUCCESS) return 2;
  run_wrapper(h, buf, s, false);  // warm: the stream's blocks exist
  next_launch_releases();
  const uint64_t first = acl_sim::latest_launch_id();
  const acl_sim::Counters queued_during = run_wrapper(h, buf, s, true);
  next_launch_releases();
  const acl_sim::Counters queued = acl_sim::counters();
  acl_sim::set_task_queue_enabled(false);
  // Each kernel finishes before the next launch's own allocation (the stream synchronised as each starts): a
  // later launch can then give the block back, unless the wrapper still holds it.
  for (uint64_t n = 1; n <= 64; ++n) acl_sim::on_call("raw_alloc_with_stream", n, [s] { aclrtSynchronizeStream(s); });
  const acl_sim::Counters inline_during = run_wrapper(h, buf, s, false);
  acl_sim::clear_faults();
  const acl_sim::Counters inline_ = acl_sim::counters();
  acl_sim::set_task_queue_enabled(true);
  int clean = 0;
  for (const auto& r : acl_sim::probe_records())
    if (r.launch_id > first && r.lock_slots_at_start == std::vector<int64_t>(8, 3) && r.locks_unchanged &&
        r.workspace_written && r.access_errors == 0) ++clean;
  (void)inline_during;
  std::printf("{\"queued_peak_live_blocks\": %llu, \"queued_allocator_calls\": %llu, \"queued_frees\": %llu, "
              "\"frees_while_queued\": %llu, \"queued_frees_on_queue_thread\": %llu, \"inline_peak_live_blocks\": %llu, "
              "\"inline_frees_on_queue_thread\": %llu, \"clean_kernels\": %d, \"sim_errors\": %llu}\n",
              (unsigned long long)queued.peak_live_caching_allocations, (unsigned long long)queued.caching_requests,
              (unsigned long long)queued.caching_frees, (unsigned long long)queued_during.caching_frees,
              (unsigned long long)queued.caching_frees_on_queue_threads,
              (unsigned long long)inline_.peak_live_caching_allocations,
              (unsigned long long)inline_.caching_frees_on_queue_threads, clean,
              (unsigned long long)(queued.errors + inline_.errors));
  return 0;
}
"""


def launch_block_profile(variant: str) -> dict:
    src = "\n".join(["#include <cstdio>", "#include <memory>", "#include <vector>", lc.includes(),
                     '#include "acl_sim/control.h"', wrapper_source(variant), _SHAPE_MAIN])
    exe = sim_build.compile_program(src, f"shape-{variant}")
    out = _run([exe], timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def held_until_done_given_back_by_calling_threads(profile: dict) -> list[str]:
    """Issue 31: no block goes back while its lambda may still wait in torch_npu's queue; what is held is
    bounded by the launches in flight (with the task queue off and each kernel finished before the next
    launch's allocation, at most two blocks: the previous launch's, given back by the one after it, and
    its own); blocks go back on calling threads, never on torch_npu's queue thread (issue 22)."""
    problems = []
    if profile["frees_while_queued"]:
        problems.append(f"{profile['frees_while_queued']} launch blocks freed while their lambdas were still queued")
    if profile["queued_peak_live_blocks"] > LAUNCHES_IN_WRAPPER or profile["queued_frees"] != LAUNCHES_IN_WRAPPER:
        problems.append(f"{profile['queued_peak_live_blocks']} blocks live at once and {profile['queued_frees']} given "
                        f"back for {LAUNCHES_IN_WRAPPER} queued launches (want at most and exactly "
                        f"{LAUNCHES_IN_WRAPPER})")
    if profile["inline_peak_live_blocks"] > 2:
        problems.append(f"{profile['inline_peak_live_blocks']} launch blocks live at once with the task queue off "
                        f"(want at most 2: each goes back at a later launch once its kernel finished)")
    if profile["queued_frees_on_queue_thread"] or profile["inline_frees_on_queue_thread"]:
        problems.append("launch blocks freed on the queue thread")
    return problems


@needs_cxx
def test_generated_wrapper_holds_blocks_until_their_lambdas_ran():
    profile = launch_block_profile("generated")
    assert held_until_done_given_back_by_calling_threads(profile) == [], profile
    assert profile["queued_allocator_calls"] == LAUNCHES_IN_WRAPPER
    assert profile["queued_peak_live_blocks"] == LAUNCHES_IN_WRAPPER  # one per launch in flight, no more
    assert profile["clean_kernels"] == 2 * LAUNCHES_IN_WRAPPER and profile["sim_errors"] == 0, profile


@needs_cxx
@pytest.mark.parametrize("mutant,caught_by", [
    # the lambda's copy of the owner lives as long as the wrapper's launch_call: held to the wrapper's end
    ("owner-in-lambda", f"{LAUNCHES_IN_WRAPPER} launch blocks live at once with the task queue off"),
    ("release-at-end", f"{LAUNCHES_IN_WRAPPER} launch blocks live at once with the task queue off"),
    ("release-once-queued", f"{LAUNCHES_IN_WRAPPER} launch blocks freed while their lambdas were still queued"),
])
def test_mutant_wrapper_is_caught(mutant, caught_by):
    profile = launch_block_profile(mutant)
    problems = held_until_done_given_back_by_calling_threads(profile)
    assert any(caught_by in p for p in problems), (problems, profile)


_FILLS_PROGRAM = r"""
#include <cstdio>
#include <npu_launch_resources.h>
int main(int argc, char** argv) {
  // argv: legacy ordered unordered factor init block_num
  if (argc != 7) return 2;
  torch_npu::inductor::LockLayout l;
  l.legacy_slots = std::strtoull(argv[1], nullptr, 10);
  l.ordered = uint32_t(std::strtoul(argv[2], nullptr, 10));
  l.unordered = uint32_t(std::strtoul(argv[3], nullptr, 10));
  l.participant_factor = uint32_t(std::strtoul(argv[4], nullptr, 10));
  l.init_value = std::strtoll(argv[5], nullptr, 10);
  const uint32_t blocks = uint32_t(std::strtoul(argv[6], nullptr, 10));
  const auto sizes = torch_npu::inductor::launch_sizes("fills", blocks, 1, 1, blocks, 0, l);
  std::printf("[");
  bool first = true;
  torch_npu::inductor::for_each_lock_fill(l, sizes, [&](uint64_t offset, uint8_t byte, uint64_t count) {
    std::printf("%s[%llu, %u, %llu]", first ? "" : ", ", (unsigned long long)offset, unsigned(byte),
                (unsigned long long)count);
    first = false;
    return ACL_SUCCESS;
  });
  std::printf("]\n");
  return 0;
}
"""


@needs_cxx
@pytest.mark.parametrize("meta,blocks", [
    ({"lock_num": 5, "lock_init_val": 0}, 3),
    ({"lock_num": 5, "lock_init_val": -1}, 3),
    ({"lock_num": 3, "lock_init_val": 0x1234}, 1),
    ({"lock_num": 2, "lock_init_val": -(1 << 63)}, 1),
    ({"sync_block_lock_layout": 3, "lock_init_val": 7}, 4),
    ({"sync_block_lock_layout": (2 << 32) | 1, "lock_init_val": 7}, 300),
    ({"sync_block_lock_layout": 1 << 32, "mix_mode": "mix", "auto_tile_and_bind_subblock": True}, 200),
])
def test_helper_fills_are_launch_plans(meta, blocks):
    """The helper's byte fills (for_each_lock_fill) are exactly launch_plan's lock_fills."""
    plan = plan_from_metadata(dict(meta, name="k"))
    exe = sim_build.compile_program(_FILLS_PROGRAM, "lock-fills")
    args = [plan.legacy_slots, plan.ordered_locks, plan.unordered_locks, plan.participant_factor,
            plan.lock_init_value, blocks]
    out = _run([exe, *args], timeout=60)
    assert out.returncode == 0, out.stderr
    assert [tuple(f) for f in json.loads(out.stdout)] == plan.lock_fills(blocks)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
