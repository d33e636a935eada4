"""Builds and runs the C++ side: the launch helper, the host ACL simulation
and their C++ tests (through CMake + ctest), plus a few programs compiled with
``sim_build.compile_program``.

The CMake build lives outside the clone, in
``$TORCH_NPU_PATCHSET_BUILD_CACHE/cmake/<hash of this checkout's path>``; it
is configured, built and run once per pytest session under a file lock, so
concurrent pytest processes neither race on it nor rebuild needlessly.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATCHSET = ROOT / "torch_npu" / "_inductor" / "patchset"


from torch_npu._inductor.patchset.tooling import sim_build  # noqa: E402

_CXX = os.environ.get("CXX") or "g++"
needs_cxx = pytest.mark.skipif(shutil.which(_CXX) is None, reason=f"C++ compiler {_CXX!r} not found")
needs_cmake = pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("ctest") is None,
                                 reason="cmake/ctest not found")

# Test cases that must exist; the list guards against one silently disappearing.
REQUIRED_CTESTS = {
    "test_regions.regions_disjoint_and_aligned_for_every_combination",
    "test_regions.init_values_seen_by_kernel",
    "test_regions.packed_layouts_match_domain_rule",
    "test_ordering.back_to_back_launches_first_still_running",
    "test_ordering.stream_block_growth_between_launches",
    "test_errors.workspace_size_overflow_fails_before_allocation",
    "test_errors.total_over_cap_fails_before_allocation",
    "test_errors.fault_allocator_throws_becomes_bad_alloc_code",
    "test_errors.fault_memset",
    "test_errors.fault_memcpy_async_on_new_content_frees_fresh_pinned_buffer",
    "test_errors.fault_malloc_host",
    "test_errors.fault_create_event_at_eviction_keeps_entry_and_launches",
    "test_errors.fault_record_event_at_eviction_keeps_entry_and_launches",
    "test_errors.fault_query_event_while_reaping_launches_and_retries",
    "test_stress.threads_8_streams_4_launches_200",
    "test_stress.steady_state_one_request_no_sync_no_blocking_no_own_heap",
    "test_launch_path.allocator_failure_on_queue_thread_returns_code_logs_once_leaks_nothing",
    "test_launch_path.fill_failure_on_queue_thread_returns_acl_code",
    "test_launch_path.two_devices_keep_lock_images_and_events_apart",
    "test_launch_path.capture_replays_after_cache_churn_read_live_images",
    "test_launch_path.capture_of_zero_fill_and_new_content_needs_no_event_or_eviction",
    "test_launch_path.streams_never_wait_on_each_other",
    "test_pinned_cache.evicted_buffer_lives_until_its_copies_ran",
    "test_contrast_upstream.upstream_locks_and_workspace_alias",
    # issue 17: capture and threads against torch_npu's allocators as they are
    "test_capture_threads.scenario_capture_then_grow",
    "test_capture_threads.scenario_capture_then_empty_cache",
    "test_capture_threads.scenario_two_graphs_one_stream",
    "test_capture_threads.scenario_global_capture_other_stream",
    "test_capture_threads.scenario_devices_threads_queue_off",
    "test_capture_threads.capturing_launch_takes_graph_pool_memory_and_never_syncs",
    "test_capture_threads.byte_fills_write_exact_lock_content_during_capture",
    "test_capture_threads.housekeeping_waits_while_another_stream_captures",
    "test_capture_threads.eviction_skips_a_victim_it_cannot_retire",
    "test_capture_threads.zero_content_launch_reaps_retired_images",
    "test_capture_threads.queue_thread_failure_is_readable_by_the_caller",
    "acl_sim_counters",
}


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
                run.steps.append(("counters", _run([build / "acl_sim_counters", "--check"], timeout=300)))
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


@needs_cmake
@needs_cxx
def test_counters_table(cmake_run):
    assert cmake_run.ok(), cmake_run.report()
    out = cmake_run.output("counters")
    print(out)
    rows = {line[:44].strip(): line[44:].split() for line in out.splitlines() if line.startswith(("helper", "upstream"))}
    helper = rows["helper, init 7 (pinned async copy)"]
    upstream = rows["upstream, init 7, memcpy model 'waits'"]
    # columns: alloc reqs, sync copy, async copy, memset, block host, pinned alloc, heap alloc, errors
    assert [float(x) for x in helper] == [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert float(upstream[0]) == 2.0 and float(upstream[1]) == 1.0 and float(upstream[7]) > 0


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
  uint64_t id;
  {
    torch_npu::inductor::LaunchResources r;
    if (torch_npu::inductor::acquire_launch_resources("triton_py", s, 3, 1, 1, 3, 256, l, &r) != ACL_SUCCESS) return 2;
    struct { void* lock; void* ws; int32_t g[3]; } args{r.locks(), r.workspace(), {3, 1, 1}};
    if (aclrtLaunchKernelWithHostArgs(h, 3, s, nullptr, &args, sizeof args, nullptr, 0) != ACL_SUCCESS) return 3;
    id = acl_sim::last_launch_id();
  }
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
    for d in (PATCHSET / "csrc", PATCHSET / "tooling" / "acl_sim"):
        assert not list(d.rglob("__init__.py")), d


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
