"""``python -m torch_npu._inductor.patchset launcher``: plan, C++, dry run, samples table, scenarios.

``--simulate`` runs the launcher on a released torch_npu's own runtime (``releases/real_sources.py``): each test
that runs one names the leg's reference release (:data:`RELEASE`, fetched as test_real_runtime.py fetches it).
"""
from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

import pytest
import release_wheels

from torch_npu._inductor.patchset import cli
from torch_npu._inductor.patchset.launch_plan import plan_from_metadata
from torch_npu._inductor.patchset.tooling.commands import launcher as launcher_cli
from torch_npu._inductor.patchset.tooling.releases import mutant_helpers, real_sources
from torch_npu._inductor.patchset.tooling.sim import launcher_writer as lc

ROOT = Path(__file__).resolve().parents[1]
LEG = ".".join(importlib.metadata.version("torch").split("+")[0].split(".")[:3])
#: The release whose own runtime runs --simulate on each CI leg (test_real_runtime.py's reference).
RELEASE = {"2.7.1": "2.7.1.post10", "2.14.1": "2.13.0"}.get(LEG)


@pytest.fixture(scope="module")
def release():
    if RELEASE is None:
        pytest.fail(f"no reference release for the torch {LEG} leg")
    return release_wheels.fetched(RELEASE)


def run_cli(*argv, capsys):
    code = cli.main(["launcher", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def run_command(*argv, timeout=600):
    """The command as a user types it."""
    return subprocess.run([sys.executable, "-m", "torch_npu._inductor.patchset", "launcher", *argv],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def assert_one_clear_line(proc, code: int, *words: str):
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "g++" not in proc.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def test_plan_text(capsys):
    code, out, err = run_cli("--metadata", '{"name": "k mix", "workspace_size": 64, "lock_num": 3, "lock_init_val": 5}',
                             "--grid", "4,2,1", capsys=capsys)
    assert code == 0, err
    assert "workspace of 64 bytes per block" in out and "3 int64 lock slots, each = 5" in out
    assert "lock bytes        24" in out and "workspace bytes   512" in out
    assert "lock content      3 int64 slots: 5 x 3" in out


def test_emit_cpp_and_simulate_json(release, capsys):
    meta = {"name": "triton_x mix", "mix_mode": "mix", "sync_block_lock_layout": (1 << 32) | 1,
            "auto_tile_and_bind_subblock": True, "workspace_size": 32, "lock_init_val": -1}
    code, out, err = run_cli("--metadata", json.dumps(meta), "--grid", "6,1,1", "--signature", "*fp16,*fp32,i32",
                             "--vector-cores", "4", "--emit-cpp", "--simulate", "--real-runtime", release, "--json",
                             capsys=capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["ok"] is True and len(data["launches"]) == 2
    assert data["plan"]["participant_factor"] == 2 and data["plan"]["block_num"] == 4
    assert "LaunchMemory npu_sync_memory(" in data["cpp"] and "npu_sync_memory.handed();" in data["cpp"]
    for launch in data["launches"]:
        # the reference rule: with an unordered lock the whole region is zero, slot 0 of it = P = 4 x 2
        assert launch["lock_values_at_start"] == [0, 8]
        assert launch["lock_content"] == [[0, 8], [8, 1], [0, (1 + 2 * 8) * 8 - 1]]
        # measured: what the kernel got, at least what it uses
        assert launch["promised_lock_bytes"] == 64 + (1 + 2 * 8) * 64 and launch["promised_workspace_bytes"] == 32 * 6
        assert launch["lock_bytes"] >= launch["promised_lock_bytes"]
        assert launch["workspace_bytes"] >= launch["promised_workspace_bytes"]
        assert not launch["regions_overlap"]
        # what it cost: one request to torch_npu's caching allocator, nothing that waits; the lambda on its queue
        assert launch["allocator_calls"] == launch["caching_allocator_calls"] == 1
        assert launch["device_synchronizations"] == launch["host_blocking_calls"] == launch["sync_copies"] == 0
        assert launch["page_locked_allocations"] == 0
        assert launch["acl_code"] == 0 and launch["thread"] == "torch_npu's task-queue thread"
        # a block is held until its kernel has finished, then the calling thread gives it back
        assert launch["block_freed_on"] == "calling thread, once its kernel had finished"
    assert data["release"] == release and data["queue"] == "1"


def test_metadata_from_file(tmp_path, capsys):
    f = tmp_path / "meta.json"
    f.write_text('{"name": "k", "lock_num": 4294967296}')
    code, out, _ = run_cli("--metadata", f"@{f}", "--json", capsys=capsys)
    assert code == 0
    plan = json.loads(out)["plan"]
    assert plan["lock_layout"] == "packed" and plan["unordered_locks"] == 1 and plan["lock_bytes"] == 3 * 64


@pytest.mark.parametrize(
    "meta,words",
    [
        ('{"name": "k", "workspace_size": -1}', "workspace_size=-1 is negative"),
        ('{"name": "k", "lock_num": true}', "lock_num=True is a bool"),
        ('{"name": "k", "lock_num": 9223372036854775808}', "overflows int64"),
        ("{not json", "bad metadata"),
        ("[1, 2]", "must be a JSON object"),
        ('{"name": "k", "workspace_sise": 64}', "unknown key 'workspace_sise'"),
    ],
)
def test_bad_metadata_exits_2_with_error_on_stderr(meta, words, capsys):
    code, out, err = run_cli("--metadata", meta, capsys=capsys)
    assert code == 2 and out == ""
    assert words in err and len(err.strip().splitlines()) == 1


def test_bad_grid_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["launcher", "--metadata", "{}", "--grid", "0,1,1"])
    assert info.value.code == 2


# ---- issue 24, item 10: bad input as a user types it -----------------------------------------
def test_unknown_metadata_key_lists_the_valid_ones():
    proc = run_command("--metadata", '{"name": "k", "workspace_sise": 64}', "--simulate")
    line = assert_one_clear_line(proc, 2, "unknown key 'workspace_sise'", "did you mean 'workspace_size'?",
                                 "valid keys:")
    assert all(k in line for k in launcher_cli.METADATA_KEYS)
    assert proc.stdout == ""


@pytest.mark.parametrize("workspace,grid,words", [
    (1 << 62, "1024,1,1", ("kernel 'k'", "launch sizes overflow 64 bits", "workspace 4611686018427387904 B")),
    (1 << 40, "4,1,1", ("kernel 'k'", "NPU out of memory. Tried to allocate 4096.00 GiB")),
])
def test_huge_workspace_with_simulate_is_one_clear_line(workspace, grid, words, release):
    # --queue off: with the queue on, the child holds torch_npu's queue during the call, and the caching
    # allocator's out-of-memory retry waits for that queue (real_runtime_child; launcher.SIMULATE_TIMEOUT_S)
    proc = run_command("--metadata", json.dumps({"name": "k", "workspace_size": workspace}), "--grid", grid,
                       "--simulate", "--real-runtime", release, "--queue", "off")
    assert_one_clear_line(proc, 1, "fails on the calling thread, before anything is queued", *words)
    assert proc.stdout == ""


def test_simulate_without_a_release_says_what_to_pass():
    """No torch_npu installed (the CI legs): --simulate and --samples say which flag to add, in one line."""
    assert real_sources.installed_release() is None
    for argv in (("--metadata", '{"name": "k", "lock_num": 2}', "--simulate"), ("--samples",)):
        proc = run_command(*argv, timeout=120)
        assert_one_clear_line(proc, 2, "no torch_npu is installed here", "--real-runtime RELEASE")
        assert proc.stdout == ""


@pytest.mark.parametrize("extra,words", [
    (("--capture",), ("--capture", "--scenario capture-then-empty-cache-grow --real-runtime RELEASE")),
    (("--devices", "2"), ("--devices", "--scenario devices-threads-queue-off --real-runtime RELEASE")),
    (("--inject-fault", "alloc"), ("--inject-fault alloc", "--scenario queue-thread-oom-retry --real-runtime RELEASE")),
])
def test_options_only_the_simulation_had_point_at_the_scenarios(extra, words, capsys):
    code, out, err = run_cli("--metadata", json.dumps(MIXED), "--simulate", "--real-runtime", "2.7.1.post10", *extra,
                             capsys=capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert all(w in err for w in words), err


def test_too_large_grid_says_so():
    proc = run_command("--metadata", '{"name": "k", "lock_num": 2}', "--grid", "100000,100000,1", "--simulate")
    assert_one_clear_line(proc, 2, "--grid 100000,100000,1", "10000000000 programs", "32 bits")
    proc = run_command("--metadata", '{"name": "k", "lock_num": 2}', "--grid", "4000,1000,1", "--simulate")
    assert_one_clear_line(proc, 2, "4000000 blocks", "--vector-cores")
    assert "code 0" not in proc.stderr


def test_negative_grid_says_the_grid_is_wrong():
    proc = run_command("--metadata", '{"name": "k"}', "--grid", "-8,1,1")
    assert_one_clear_line(proc, 2, "argument --grid", "'-8,1,1'", "1..2**31-1")
    assert "expected one argument" not in proc.stderr


# ---- samples -------------------------------------------------------------------------------
def test_samples_plans_through_python_m():
    proc = run_command("--samples", "--no-simulate")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for key in ("none", "workspace", "locks", "both", "packed-mix", "lock-num-2pow32", "simt-only", "ffts"):
        assert f"\n{key} " in out
    assert "not as a 34359738368-byte request" in out


def test_samples_plans_json(capsys):
    code = cli.main(["launcher", "--samples", "--no-simulate", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["ok"]
    both = next(r for r in data["samples"] if r["sample"] == "both")
    assert both["plan"]["lock_bytes"] == 32 and both["plan"]["workspace_bytes"] == 1024 * 24


# ---- what the kernel actually got; the launch path as torch_npu runs it ------------------
MIXED = {"name": "triton_mix mix", "mix_mode": "mix", "sync_block_lock_layout": (2 << 32) | 2,
         "workspace_size": 64, "lock_init_val": 5}


def _sim_json(capsys, release, *extra):
    code, out, err = run_cli("--metadata", json.dumps(MIXED), "--grid", "4,1,1", "--simulate", "--real-runtime",
                             release, "--json", *extra, capsys=capsys)
    return code, json.loads(out)


@pytest.mark.parametrize("queue", ["on", "off"])
def test_mixed_layout_reference_lock_content(queue, release, capsys):
    code, data = _sim_json(capsys, release, "--queue", queue)
    assert code == 0 and data["ok"], data
    assert data["queue"] == {"on": "1", "off": "0"}[queue]
    for launch in data["launches"]:
        # 2 ordered lines hold 0 (not lock_init_val 5); each unordered lock: slot 0 = P = 4, then zeros
        assert launch["lock_content"] == [[0, 16], [4, 1], [0, 71], [4, 1], [0, 71]]
        assert launch["workspace_bytes"] >= launch["promised_workspace_bytes"] == 256
        assert launch["workspace_region"]["overrun"] == 0 and launch["acl_code"] == 0
        assert launch["thread"] == ("calling thread" if queue == "off" else "torch_npu's task-queue thread")


def test_lock_description_and_content_agree_and_every_counter_is_explained(release):
    # MIXED on grid 4,1,1: the build test_mixed_layout_reference_lock_content makes (one build, cached)
    proc = run_command("--metadata", json.dumps(MIXED), "--grid", "4,1,1", "--simulate", "--real-runtime", release)
    assert proc.returncode == 0, proc.stderr
    content = "160 int64 slots: 0 x 16, 4, 0 x 71, 4, 0 x 71"  # the plan's, and what each kernel saw
    assert f"lock content      {content}" in proc.stdout
    assert proc.stdout.count(f"kernel saw lock content {content}, ") == 2
    assert "lock values" not in proc.stdout  # a set of values beside a count of slots read as a contradiction
    assert f"torch_npu {release} patched, on its own runtime" in proc.stdout
    costs = [ln for ln in proc.stdout.splitlines() if ln.strip().startswith("costs:")]
    assert len(costs) == 2
    for ln in costs:  # in words; each launch's block goes back through the calling thread once its kernel finished
        assert ("1 allocator call, 0 device synchronisations, 0 host-blocking calls, 0 page-locked allocations; "
                "launch blocks freed on: calling thread, once its kernel had finished") in ln
    legend = next(ln for ln in proc.stdout.splitlines() if ln.strip().startswith("(allocator calls:"))
    for term in ("host-blocking calls:", "page-locked allocations:", "Launch block:"):
        assert term in legend
    assert "host_blocking_calls=" not in proc.stdout


def test_inject_fault_in_the_lambda_returns_code_no_exception(release, capsys):
    # the lock fill (--inject-fault fill; a failed kernel launch, "launch", takes the same way out of the lambda)
    code, data = _sim_json(capsys, release, "--inject-fault", "fill")
    assert code == 0 and data["ok"], data
    first = data["launches"][0]
    assert first["acl_code"] == real_sources.FAULT_CODE and not first["exception_escaped"] and not first["call_threw"]
    assert first["app_logs"] > 0  # aclAppLog: the helper's line and torch_npu's own (the double counts them)
    # torch_npu's queue is stopped now: it reports the failed task, and runs nothing more
    assert "The Inner error" in first["sync_error"]
    assert all("not_judged" in x for x in data["launches"][1:])


def _mutant(plan, site, kernel_args, old: str, new: str) -> str:
    src = lc.launcher_source(plan, site, kernel_args)
    assert old in src, src
    return src.replace(old, new, 1)


BOTH = {"name": "triton_both", "workspace_size": 1024, "lock_num": 4, "lock_init_val": 7}
WRONG_FILL = ("if (aclrtMemsetAsync(npu_sync_regions.locks, npu_sync_regions.sizes.lock_bytes, 1, "
              "npu_sync_regions.sizes.lock_bytes, stream_) != ACL_SUCCESS) return 1;\n        void* sync_block_lock = ")
#: name: (metadata, the edit of the generated launcher: (old, new), a rule of mutant_helpers, or None).
MUTANTS = {
    "none": (BOTH, None),
    # the launcher asks for a quarter of the workspace: the kernel's region runs past its block
    "quarter-workspace": (BOTH, ("UINT64_C(1024)", "UINT64_C(256)")),
    "aliasing": (BOTH, ("void* workspace_addr = ", "void* workspace_addr = sync_block_lock; (void)")),
    "wrong-lock-content": (dict(BOTH, lock_init_val=0), ("void* sync_block_lock = ", WRONG_FILL)),  # wants 0, gets 1
    # issue 31's defect: the block goes back once the queue call returns, while the lambda waits in the queue
    "release-once-queued": (BOTH, "release-once-queued"),
}


@pytest.fixture(scope="module")
def mutants(release):
    """The generated launcher and its mutants in one build and one child (TASK_QUEUE_ENABLE=1)."""
    jobs = []
    for name, (meta, edit) in MUTANTS.items():
        plan = plan_from_metadata(meta, kernel=meta["name"])
        site, args = lc.LaunchSite(), lc.args_from_signature("*fp32,i32")
        src = lc.launcher_source(plan, site, args)
        if edit in mutant_helpers.NAMES:
            src = mutant_helpers.definition(edit) + mutant_helpers.use(src, edit)
        elif edit is not None:
            src = _mutant(plan, site, args, *edit)
        jobs.append(real_sources.job(name, plan, site, args, (8, 1, 1), launcher_cpp=src))
    return {k: v["1"] for k, v in real_sources.run(release, jobs).items()}


def _problems(res: dict) -> list[str]:
    return [q for x in res["launches"] for q in x["problems"]]


def test_generated_launcher_is_clean(mutants):
    assert mutants["none"]["ok"], mutants["none"]


@pytest.mark.parametrize("name,words", [
    ("quarter-workspace", "-byte block torch_npu's caching allocator gave the launch"),
    ("aliasing", "regions overlap"),
    ("wrong-lock-content", "lock content at start"),
    ("release-once-queued", "the launch block went back to the allocator inside the call, before its kernel finished"),
])
def test_mutants_fail_the_judge(name, words, mutants):
    res = mutants[name]
    assert not res["ok"]
    assert any(words in q for q in _problems(res)), _problems(res)


# ---- the scenarios: on torch_npu's own runtime only (test_real_runtime.py runs them) ----------------------
def test_scenario_list_needs_no_release(capsys):
    from torch_npu._inductor.patchset.tooling.releases import real_runtime as rr

    code, out, err = run_cli("--scenario", "list", "--json", capsys=capsys)
    assert code == 0, err
    assert [r["name"] for r in json.loads(out)["scenarios"]] == list(rr.SCENARIOS)
    # the simulation's scenarios all have a real-runtime version (issue 30), under their own name or merged
    for name in ("two-graphs-one-stream", "global-capture-other-stream", "queue-thread-oom-retry",
                 "devices-threads-queue-off", "torch-npu-op-workspace-concurrent", "empty-cache-other-thread",
                 "empty-cache-while-queued", "capture-then-empty-cache-grow"):
        assert name in rr.SCENARIOS


def test_scenario_without_a_release_is_one_line_and_exit_2():
    """A scenario runs on a release's own runtime only: without --real-runtime the command says which flag to add,
    before building or fetching anything."""
    proc = run_command("--scenario", "two-graphs-one-stream", timeout=120)
    assert proc.stdout == ""
    assert_one_clear_line(proc, 2, "--scenario two-graphs-one-stream runs on a torch_npu release's own runtime",
                          "--real-runtime RELEASE")


@pytest.mark.parametrize("name,says", [
    ("capture-then-shrink", "unknown scenario 'capture-then-shrink'"),
    ("capture-then-grow", "the simulation's capture-then-grow is part of capture-then-empty-cache-grow"),
])
def test_unknown_scenario_exits_2_naming_the_valid_ones(name, says, capsys):
    from torch_npu._inductor.patchset.tooling.releases import real_runtime as rr

    code, out, err = run_cli("--scenario", name, "--json", capsys=capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
    assert says in err and all(n in err for n in rr.SCENARIOS)


def test_helper_option_is_gone():
    """--helper built the simulation's scenarios against an earlier helper; those are retired (the real runtime's
    mutants stand for the earlier helpers: test_real_runtime.py)."""
    proc = run_command("--scenario", "list", "--helper", str(ROOT), timeout=120)
    assert proc.returncode == 2 and proc.stdout == "" and "unrecognized arguments: --helper" in proc.stderr, proc.stderr
