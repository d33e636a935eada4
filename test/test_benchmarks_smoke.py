"""Smoke test for benchmarks/launch_overhead.py: it builds, runs a tiny setting (alone, and against
another helper side by side) and writes the documented JSON. No timing assertions: numbers are
reported, not judged; the counters and verdicts are what the simulation decides."""
from __future__ import annotations

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
SCRIPT = ROOT / "benchmarks" / "launch_overhead.py"
TINY = ["--launches", "40", "--rounds", "2", "--warmup", "4", "--kernel-us", "0,5"]
MEASURED = ("calling_ns_median", "queue_ns_median", "total_ns_median", "allocator_calls", "device_synchronizations",
            "host_blocking_calls", "page_locked_allocations", "host_heap_allocs", "peak_live_blocks", "verdict",
            "helper_way")

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CXX") or "g++") is None,
                                reason="no C++ compiler for the simulation build")


def _run(tmp_path: Path, *extra: str) -> tuple[str, dict]:
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), *TINY, "--json", str(out), *extra],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "strategy" in proc.stdout and "verdict" in proc.stdout  # the table was printed
    assert "queue: host ns of the launch lambda on torch_npu's queue thread" in proc.stdout  # and explained
    return proc.stdout, json.loads(out.read_text())


def test_tiny_run_writes_schema_and_patchset_is_clean(tmp_path):
    _, doc = _run(tmp_path, "--layouts", "ordered,unordered")
    rows = doc["rows"]
    assert len(rows) == 2 * 2 * 2  # layouts x kernel times x strategies
    for r in rows:
        assert r["strategy"] in ("null", "patchset") and r["layout"] in ("ordered", "unordered")
        assert r["kernel_us"] in (0, 5)
        for k in MEASURED:
            assert f"current_{k}" in r, (k, r)
        for k in ("calling_ns_median", "queue_ns_median"):
            assert r[f"current_{k}"] > 0, (k, r)
        assert r["current_total_ns_median"] == r["current_calling_ns_median"] + r["current_queue_ns_median"]
    assert doc["metadata"]["settings"]["launches"] == 40 and doc["metadata"]["machine"]
    for r in (r for r in rows if r["strategy"] == "patchset"):
        # issue 22's steady state: one allocator call, nothing that waits, nothing page-locked
        assert r["current_verdict"] == "clean", r
        assert r["current_allocator_calls"] == 1 and r["current_device_synchronizations"] == 0, r
        assert r["current_host_blocking_calls"] == 0 and r["current_page_locked_allocations"] == 0, r
        assert r["current_frees_on_queue_thread"] == 0, r
        # issue 31: blocks held until their lambdas ran, so more than one at once, bounded by the 40 launches
        assert 1 <= r["current_peak_live_blocks"] <= 40, r
        assert "on the calling thread (LaunchMemory)" in r["current_helper_way"]
    for r in (r for r in rows if r["strategy"] == "null"):
        assert r["current_verdict"] == "null-pointers", r  # the floor hands the kernel nothing


def test_emit_launchers_uses_launch_codegen(tmp_path):
    header = tmp_path / "gen.h"
    subprocess.run([sys.executable, str(SCRIPT), "--emit-launchers", str(header)], check=True, timeout=120)
    text = header.read_text()
    assert "torch_npu::inductor::LaunchMemory npu_sync_memory(" in text and "npu_sync_memory.release_when_finished();" in text
    assert "launchKernel(launch_call" in text and "RunOpApiV2" in text  # through torch_npu's queue
    assert "npu-sync-resources" in text  # launch_codegen's marker
    assert "kLayouts" in text and "call_bench_null" in text


def _helper_at(commit: str, tmp_path: Path) -> Path:
    rel = "torch_npu/_inductor/patchset/csrc"
    try:
        names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", commit, rel],
                               capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"commit {commit} (the helper before issue 22) not available: {exc}")
    out = tmp_path / f"csrc-{commit}"
    for name in names:
        dest = out / name[len(rel) + 1:]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:{name}"],
                                        capture_output=True, check=True).stdout)
    return out


def test_against_the_helper_before_issue_22_side_by_side(tmp_path):
    """b45157f's helper runs its own way (memory inside the lambda, from the workspace allocator)."""
    stdout, doc = _run(tmp_path, "--layouts", "unordered", "--baseline-helper", str(_helper_at("b45157f", tmp_path)),
                       "--repeats", "2")
    assert "n/b" in stdout and "acquire_launch_resources" in stdout
    rows = doc["rows"]
    assert len(rows) == 2 * 2
    for r in rows:
        for tag in ("current", "baseline"):
            assert len(r[f"{tag}_calling_ns_median_runs"]) == 2 and r[f"{tag}_queue_ns_median"] > 0, r
        assert r["queue_ns_median_current_vs_baseline"] > 0 and r["total_ns_median_current_vs_baseline"] > 0
    for r in (r for r in rows if r["strategy"] == "patchset"):
        assert "inside the launch lambda" in r["baseline_helper_way"]
        assert r["baseline_verdict"] == "clean" and r["current_verdict"] == "clean", r
        assert r["baseline_allocator_calls"] == 1 and r["current_allocator_calls"] == 1, r


def test_against_a_copy_of_this_helper(tmp_path):
    # A copy of this very helper has LaunchMemory: it runs the generated shape too.
    helper = tmp_path / "helper"
    shutil.copytree(ROOT / "torch_npu" / "_inductor" / "patchset" / "csrc", helper)
    _, doc = _run(tmp_path, "--layouts", "ordered", "--kernel-us", "0", "--baseline-helper", str(helper),
                  "--repeats", "2", "--strategies", "patchset")
    (row,) = doc["rows"]
    assert "on the calling thread" in row["baseline_helper_way"] and row["baseline_verdict"] == "clean"


def test_bad_baseline_helper_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--baseline-helper", str(tmp_path)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "no npu_launch_resources.h there" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_import_overhead_script_runs(tmp_path):
    out = tmp_path / "import.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "import_overhead.py"), "--runs", "1", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(out.read_text())
    assert set(data) == {"runs", "import_torch_ms_armed", "import_torch_ms_disabled", "import_torch_delta_ms",
                         "entry_point_ms"}
    assert data["entry_point_ms"] > 0


# ---- --real-runtime: torch_npu's own runtime over the host ACL library (a test double of CANN, in subprocesses) ----
LEG = ".".join(importlib.metadata.version("torch").split("+")[0].split(".")[:3])
#: The leg whose torch line the benchmark's releases (2.7.1.post10, post11) run on; the tiny run takes post11 alone
#: (its own fix, with the host ACL library's copy waiting and not, and the patch set: one build, two children).
REAL_RUNTIME_CASES = {"2.7.1": [("own-fix", "own-fix-nowait", "patch-post11")]}.get(LEG, [])
KERNEL_US = 20
REAL_TINY = ["--real-runtime", "--layouts", "ordered", "--kernel-us", str(KERNEL_US), "--launches", "40", "--gated", "20",
             "--rounds", "2", "--warmup", "5", "--repeats", "1"]


@pytest.mark.parametrize("cells", REAL_RUNTIME_CASES, ids="+".join)
def test_real_runtime_tiny_run_counts_per_launch(tmp_path, cells):
    """On 2.7.1.post11's own task queue and caching allocator: the patch set's launch takes one caching-allocator
    block and nothing that waits, its kernel gets clean memory; torch_npu's own fix makes two workspace-allocator
    calls and a blocking copy per launch, and its kernel's regions alias. The counts come from torch_npu's own
    allocator statistics and the host ACL library's call records, so a launcher that changed would show here. The own
    fix's copy waits for the kernel queued before it (20 us each) on torch_npu's queue thread; told not to wait
    (ACL_HOST_MEMCPY=immediate), the host ACL library lets the kernels start with wrong lock content."""
    from torch_npu._inductor.patchset.tooling.releases import real_runtime_bench as rrb

    release_wheels.fetched(rrb.OWN_FIX_RELEASE)
    out = tmp_path / "real.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), *REAL_TINY, "--cells", ",".join(cells), "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "queue/floor" in proc.stdout and "goals (issue 30):" in proc.stdout
    doc = json.loads(out.read_text())
    rows = {r["cell"]: r for r in doc["rows"]}
    assert set(rows) == set(cells) and all(r["batches"] == 2 for r in rows.values()), rows
    patch, own, nowait = rows["patch-post11"], rows["own-fix"], rows["own-fix-nowait"]
    for r in (patch, own, nowait):
        assert r["call_ns"] > 0 and r["queue_ns"] > 0 and r["launches_per_s"] > 0, r
        assert r["launch_calls"] == 1, r  # every launch reached aclrtLaunchKernelWithHostArgs once
    assert patch["verdict"] == "clean", patch["problems"]
    assert (patch["caching_allocator_calls"], patch["workspace_allocator_calls"]) == (1, 0), patch
    assert (patch["allocator_calls"], patch["device_synchronizations"], patch["host_blocking_calls"],
            patch["page_locked_allocations"]) == (1, 0, 0, 0), patch
    assert patch["memsets"] == 1 and patch["sync_copies"] == 0, patch  # init 0: one byte fill, on the stream
    assert 1 <= patch["peak_live_blocks"] <= 40, patch  # blocks held until their lambdas ran, at most the batch
    assert (own["caching_allocator_calls"], own["workspace_allocator_calls"], own["sync_copies"]) == (0, 2, 1), own
    # Host heap allocations on the calling thread (heap_count.py's counting malloc, preloaded into the child; each
    # child first checks it on allocations of a known number, and a miscount turns every verdict). The launchers' own
    # code makes one per launch, the patch set's as the own fix's: the std::function its lambda goes to torch_npu's
    # queue in (the helper's LaunchMemory adds none once warm). The rest is counted too: 3 in all for the own fix,
    # and on top for the patch set torch_npu's caching allocator's request and free on the calling thread.
    assert all(c["heap_known"]["counted"] == c["heap_known"]["made"] for c in doc["children"]), doc["children"]
    assert patch["heap_in_launchers"] == own["heap_in_launchers"] == 1, (patch, own)
    assert own["heap_allocations"] == 3 and patch["heap_allocations"] > own["heap_allocations"], (patch, own)
    assert own["host_blocking_calls"] == 1 and own["peak_live_blocks"] == 0, own
    assert any("regions overlap" in p for p in own["problems"]), own["problems"]  # its two requests alias
    assert patch["total_vs_own_fix"] == patch["total_ns"] / own["total_ns"]
    assert (nowait["workspace_allocator_calls"], nowait["sync_copies"]) == (2, 1), nowait  # the same launcher
    # each waiting copy outlasts the kernel queued before it: the queue thread's time per launch is at least that
    assert own["queue_wall_ns"] >= 0.9 * KERNEL_US * 1000, own
    # and the next launch's locks are written after that kernel, which wrote into them (the two requests alias);
    # a copy that does not wait writes them before, and the kernel before overwrites them
    assert "lock-content" not in own["verdict"] and "lock-content" in nowait["verdict"], (own, nowait)


def test_real_runtime_bad_cells_is_one_line():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--real-runtime", "--cells", "floor,nope"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and "--cells" in proc.stderr and "nope" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_real_runtime_children_alternate_and_rotate():
    from torch_npu._inductor.patchset.tooling.releases import real_runtime_bench_cells as cells

    plan = cells.child_plan([0, 20], 2)
    kinds = {(rel, mem) for _k, rel, mem in plan}
    assert kinds == {("2.7.1.post10", "waits"), ("2.7.1.post11", "waits"), ("2.7.1.post11", "immediate")}
    assert len(plan) == 2 * 2 * 3 and [k for k, _r, _m in plan[:3]] == [0, 0, 0]
    firsts = [plan[i][1:] for i in range(0, len(plan), 3)]  # who goes first, per repeat and kernel time
    assert len(set(firsts)) == 3  # no child always first
    assert cells.cells_of("2.7.1.post11", "waits") == [("own-fix", "upstream"), ("patch-post11", "patched")]


def test_real_runtime_heap_counter_that_miscounts_fails_the_verdict():
    from torch_npu._inductor.patchset.tooling.releases import real_runtime_bench_report as report

    assert report.heap_counter_problems({"heap_known": {"made": 9, "counted": 9}}) == []
    missed = report.heap_counter_problems({"heap_known": {"made": 9, "counted": 1}})
    assert missed == ["the heap counter counted 1 of 9 known allocations"]
    assert report.short_verdict(missed) == "heap-counter"


def test_real_runtime_goals_say_not_met():
    from torch_npu._inductor.patchset.tooling.releases import real_runtime_bench_report as report

    def row(cell, k, layout="ordered", **kw):
        base = {"layout": layout, "kernel_us": k, "cell": cell, "verdict": "clean", "allocator_calls": 1,
                "device_synchronizations": 0, "host_blocking_calls": 0, "page_locked_allocations": 0}
        return dict(base, **kw)

    rows = report.with_ratios([
        row("floor", 0, queue_ns=500, total_ns=900, launches_per_s=100, queue_wall_ns=1000, total_wall_ns=1400),
        row("own-fix", 0, queue_ns=3000, total_ns=3400, launches_per_s=100, queue_wall_ns=9000, total_wall_ns=9400),
        row("patch-post11", 0, queue_ns=800, total_ns=2300, launches_per_s=100, queue_wall_ns=5000,
            total_wall_ns=6500, host_blocking_calls=1),
        row("own-fix", 20, launches_per_s=1000), row("patch-post11", 20, launches_per_s=9000),
    ])
    text = "\n".join(report.goals(rows))
    assert "20 us kernels >= 10x the own fix: 9.00x .. 9.00x: NOT met" in text
    assert "total host ns (call + queue CPU) <= 1.5x the own fix: 0.68x .. 0.68x: met" in text
    assert "queue-thread CPU ns <= 1.5x the floor: 1.60x .. 1.60x: NOT met" in text
    assert "counters 1/0/0/0 per launch in every patch-set cell: NOT met (1 cells differ)" in text
