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
    # ordering: a block kept per (thread, stream) and reused; given back only behind its last kernel (issue 39)
    "test_ordering.back_to_back_launches_on_one_stream_reuse_the_kept_block": "1",
    "test_ordering.a_larger_launch_gives_the_old_block_back_behind_its_last_kernel": "1",
    "test_ordering.each_stream_keeps_a_block_of_its_own": "1",
    "test_ordering.concurrent_streams_do_not_overlap": "1",
    "test_ordering.paused_queue_n_launches_share_the_threads_block": "1",
    "test_ordering.threads_on_one_stream_keep_blocks_of_their_own": "1",
    "test_ordering.a_thread_that_ends_with_its_kernel_pending_gives_the_block_back_after_it": "1",
    "test_ordering.a_cache_miss_gives_idle_blocks_back_behind_their_streams": "1",
    "test_ordering.a_launch_on_a_stream_that_is_not_current_is_refused": "1",
    "test_ordering.a_launch_on_an_external_stream_is_refused": "1",
    "test_ordering.a_launch_that_threw_leaves_the_block_to_its_threads_next_launch": "1",
    "test_ordering.out_of_memory_retry_frees_a_retired_block_whose_lambda_still_waited": "1",
    "test_ordering.out_of_memory_retry_while_another_stream_captures": "1",
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
    "test_stress.steady_state_no_allocator_call_no_event_no_sync_no_blocking_no_pinned": "1",
    # the released upstream fix, for contrast (upstream's own launchers: test_real_runtime.py)
    "test_contrast_upstream.helper_is_clean_in_the_same_scenarios": "1",
    # a graph's wrapper of launch_codegen's launches and its mutants (tooling/releases/wrapper_shape.py; issues 22, 31, 39)
    "test_wrapper_shape.wrapper_with_the_queue_held_shares_one_block_and_gives_back_none_while_queued": "1",
    "test_wrapper_shape.wrapper_with_the_queue_off_shares_one_block": "0",
    # the kept rule's checks, each shown to catch the wrong rule it is there for (mutant_helpers.py; issue 39)
    "test_wrapper_shape.a_block_replaced_by_a_larger_one_goes_back_only_after_its_kernel": "1",
    "test_wrapper_shape.a_capture_status_error_is_no_capture": "1",
    "test_wrapper_shape.threads_never_share_a_block": "1",
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
    "test_sim.a_record_is_a_task_of_its_stream",
    "test_sim.event_ids_are_limited_per_device",
    "test_sim.capture_records_and_replay_runs",
    "test_sim.event_record_or_device_sync_invalidates_capture",
    "test_sim.fault_injection_hits_the_nth_call",
    "test_sim.device_capacity_bounds_device_allocations",
    "test_sim.on_call_hook_runs_before_the_nth_call",
    "test_sim.a_synchronous_copy_does_not_wait_for_streams",  # as CANN's: no stream waited for
    # torch_npu's stand-ins the simulation's users still run on: streams, the caching allocator's events (issue 47)
    "test_sim.current_stream_is_the_threads_own_per_device_and_a_real_stream",
    "test_sim.a_block_freed_with_a_recorded_use_waits_for_its_event",
    "test_sim.empty_cache_and_the_out_of_memory_retry_free_blocks_behind_their_events",
    "test_sim.no_event_while_a_capture_is_underway_then_only_for_uses_from_before_it",
    "test_sim.a_record_through_the_task_queue_completes_only_once_the_queue_made_it",
    "test_sim.a_cache_miss_runs_the_free_memory_callbacks_then_searches_again",
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
  const c10_npu::NPUStream npu = c10_npu::getNPUStreamFromPool();
  c10_npu::setCurrentNPUStream(npu);  // as a wrapper's caller does: the launch goes to the current stream
  aclrtStream s = npu.stream(false);
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
  m.handed();
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


from torch_npu._inductor.patchset.launch_plan import plan_from_metadata  # noqa: E402
from torch_npu._inductor.patchset.tooling.sim import expected_memory  # noqa: E402

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
    """The helper's byte fills (for_each_lock_fill) are exactly the ones expected_memory computes."""
    plan = plan_from_metadata(dict(meta, name="k"))
    exe = sim_build.compile_program(_FILLS_PROGRAM, "lock-fills")
    args = [plan.legacy_slots, plan.ordered_locks, plan.unordered_locks, plan.participant_factor,
            plan.lock_init_value, blocks]
    out = _run([exe, *args], timeout=60)
    assert out.returncode == 0, out.stderr
    assert [tuple(f) for f in json.loads(out.stdout)] == expected_memory.lock_fills(plan, blocks)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
