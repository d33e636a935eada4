"""``python -m torch_npu._inductor.patchset launcher``: plan, C++, dry run, samples table."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from torch_npu._inductor.patchset import cli


def run_cli(*argv, capsys):
    code = cli.main(["launcher", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_plan_text(capsys):
    code, out, err = run_cli("--metadata", '{"name": "k mix", "workspace_size": 64, "lock_num": 3, "lock_init_val": 5}',
                             "--grid", "4,2,1", capsys=capsys)
    assert code == 0, err
    assert "workspace of 64 bytes per block" in out and "3 int64 lock slots, each = 5" in out
    assert "lock bytes        24" in out and "workspace bytes   512" in out


def test_emit_cpp_and_simulate_json(capsys):
    meta = {"name": "triton_x mix", "mix_mode": "mix", "sync_block_lock_layout": (1 << 32) | 1,
            "auto_tile_and_bind_subblock": True, "workspace_size": 32, "lock_init_val": -1}
    code, out, err = run_cli("--metadata", json.dumps(meta), "--grid", "6,1,1", "--signature", "*fp16,*fp32,i32",
                             "--vector-cores", "4", "--emit-cpp", "--simulate", "--json", capsys=capsys)
    assert code == 0, err
    data = json.loads(out)
    assert data["ok"] is True and len(data["launches"]) == 2
    assert data["plan"]["participant_factor"] == 2 and data["plan"]["block_num"] == 4
    assert "acquire_launch_resources(" in data["cpp"]
    for launch in data["launches"]:
        assert set(launch) >= {"workspace_bytes", "lock_bytes", "regions_overlap", "lock_values_at_start",
                               "allocator_calls", "sync_copies", "host_blocking_calls", "ok"}
        # the reference rule: with an unordered lock the whole region is zero, slot 0 of it = P = 4 x 2
        assert launch["lock_values_at_start"] == [0, 8]
        assert launch["lock_content"] == [[0, 8], [8, 1], [0, (1 + 2 * 8) * 8 - 1]]
        # measured: what the kernel got, at least what it uses
        assert launch["promised_lock_bytes"] == 64 + (1 + 2 * 8) * 64 and launch["promised_workspace_bytes"] == 32 * 6
        assert launch["lock_bytes"] >= launch["promised_lock_bytes"]
        assert launch["workspace_bytes"] >= launch["promised_workspace_bytes"]
        assert launch["allocator_calls"] == 1 and launch["sync_copies"] == 0 and not launch["regions_overlap"]


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
    ],
)
def test_bad_metadata_exits_2_with_error_on_stderr(meta, words, capsys):
    code, out, err = run_cli("--metadata", meta, capsys=capsys)
    assert code == 2 and out == ""
    assert words in err


def test_bad_grid_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["launcher", "--metadata", "{}", "--grid", "0,1,1"])
    assert info.value.code == 2


def test_samples_table_through_python_m():
    proc = subprocess.run([sys.executable, "-m", "torch_npu._inductor.patchset", "launcher", "--samples"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for key in ("none", "workspace", "locks", "both", "packed-mix", "lock-num-2pow32", "simt-only", "ffts"):
        assert f"\n{key} " in out
    assert "all ok: True" in out
    assert "not as a 34359738368-byte request" in out


def test_samples_json(capsys):
    code = cli.main(["launcher", "--samples", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["ok"]
    both = next(r for r in data["samples"] if r["sample"] == "both")
    assert both["plan"]["lock_bytes"] == 32 and both["plan"]["workspace_bytes"] == 1024 * 24
    assert all(launch["ok"] for launch in both["launches"])


# ---- issue 12: what the kernel actually got; the launch path as torch_npu runs it ------------
from torch_npu._inductor.patchset import launch_codegen as lc  # noqa: E402
from torch_npu._inductor.patchset.launch_plan import plan_from_metadata  # noqa: E402
from torch_npu._inductor.patchset.tooling import launcher_cli  # noqa: E402

MIXED = {"name": "triton_mix mix", "mix_mode": "mix", "sync_block_lock_layout": (2 << 32) | 2,
         "workspace_size": 64, "lock_init_val": 5}


def _sim_json(capsys, *extra):
    code, out, err = run_cli("--metadata", json.dumps(MIXED), "--grid", "4,1,1", "--simulate", "--json", *extra,
                             capsys=capsys)
    return code, json.loads(out)


def test_mixed_layout_reference_lock_content(capsys):
    code, data = _sim_json(capsys)
    assert code == 0 and data["ok"], data
    for launch in data["launches"]:
        # 2 ordered lines hold 0 (not lock_init_val 5); each unordered lock: slot 0 = P = 4, then zeros
        assert launch["lock_content"] == [[0, 16], [4, 1], [0, 71], [4, 1], [0, 71]]
        assert launch["workspace_bytes"] >= launch["promised_workspace_bytes"] == 256
        assert launch["workspace_region"]["overrun"] == 0 and launch["acl_code"] == 0


@pytest.mark.parametrize("fault", ["alloc", "fill", "launch"])
def test_inject_fault_returns_code_no_exception_nothing_live(fault, capsys):
    code, data = _sim_json(capsys, "--inject-fault", fault)
    assert code == 0 and data["ok"], data
    first = data["launches"][0]
    assert first["acl_code"] != 0 and not first["exception_escaped"] and first["live_allocations_after"] == 0
    # torch_npu's queue is poisoned now: the next launch call reports it
    assert data["launches"][1]["call_threw"] and "The Inner error" in data["launches"][1]["call_error"]
    if fault == "alloc":
        assert first["acl_code"] == 200000  # ACL_ERROR_BAD_ALLOC


@pytest.mark.parametrize("extra", [("--capture", "--devices", "2"), ("--queue", "off"), ("--devices", "2")])
def test_capture_devices_queue_clean(extra, capsys):
    code, data = _sim_json(capsys, *extra)
    assert code == 0 and data["ok"], data
    if "--capture" in extra:
        replays = [x for x in data["launches"] if x["phase"] == "replay"]
        assert len(replays) == 6 and {x["device"] for x in replays} == {0, 1}


def _mutant(plan, site, kernel_args, old: str, new: str) -> str:
    src = lc.launcher_source(plan, site, kernel_args)
    assert old in src, src
    return src.replace(old, new, 1)


def _simulate_mutant(launcher_cpp, meta, grid, tag):
    plan = plan_from_metadata(meta, kernel=meta["name"].split()[0])
    site = lc.LaunchSite()
    args = lc.args_from_signature("*fp32,i32")
    return launcher_cli.simulate(plan, site, args, grid, launcher_cpp=launcher_cpp(plan, site, args), tag=tag)


BOTH = {"name": "triton_both", "workspace_size": 1024, "lock_num": 4, "lock_init_val": 7}


def test_mutation_quarter_workspace_fails_judge():
    # the launcher asks for a quarter of the workspace: the kernel's region runs past its allocation
    res = _simulate_mutant(lambda p, s, a: _mutant(p, s, a, "UINT64_C(1024)", "UINT64_C(256)"), BOTH, (8, 1, 1),
                           "mutant-quarter")
    assert not res["ok"]
    assert any("past the end" in q or "bytes, the kernel uses" in q for x in res["launches"] for q in x["problems"])


def test_mutation_aliasing_lock_and_workspace_fails_judge():
    res = _simulate_mutant(lambda p, s, a: _mutant(p, s, a, "void* workspace_addr = ", "void* workspace_addr = sync_block_lock; (void)"),
                           BOTH, (8, 1, 1), "mutant-alias")
    assert not res["ok"]
    assert any("overlap" in q for x in res["launches"] for q in x["problems"])


def test_mutation_wrong_lock_content_fails_judge():
    meta = dict(BOTH, lock_init_val=0)  # the reference wants 0; the mutant fills 1
    res = _simulate_mutant(lambda p, s, a: _mutant(p, s, a, "void* sync_block_lock = ",
                                                   "if (aclrtMemsetAsync(npu_sync_resources.locks(), npu_sync_resources.lock_bytes(), 1, "
                                                   "npu_sync_resources.lock_bytes(), stream_) != ACL_SUCCESS) return 1;\n"
                                                   "    void* sync_block_lock = "),
                           meta, (8, 1, 1), "mutant-locks")
    assert not res["ok"]
    assert any("lock content" in q for x in res["launches"] for q in x["problems"])


# ---- issue 17: graph capture and threads against torch_npu's allocators as they are ----------
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
#: The last commit before issue 17's fix: its helper is "the old behaviour" each scenario must catch.
OLD_HELPER_COMMIT = "6876426"
#: What each scenario reports against that helper (the simulation's error kind, or a replay/capture code).
OLD_HELPER_FAILS_WITH = {
    "capture-then-grow": "use-after-free",
    "capture-then-empty-cache": "use-after-free",
    "two-graphs-one-stream": "overlap-with-running-kernel",
    "global-capture-other-stream": "capture-invalidated",
    "devices-threads-queue-off": "allocator-race",
}


def test_scenario_names_agree_with_the_program(capsys):
    code, out, err = run_cli("--scenario", "list", "--json", capsys=capsys)
    assert code == 0, err
    assert [r["name"] for r in json.loads(out)["scenarios"]] == list(launcher_cli.SCENARIOS)
    assert set(OLD_HELPER_FAILS_WITH) == set(launcher_cli.SCENARIOS)


def test_unknown_scenario_exits_2_naming_the_valid_ones(capsys):
    code, out, err = run_cli("--scenario", "capture-then-shrink", "--simulate", "--json", capsys=capsys)
    assert code == 2 and out == ""
    assert "capture-then-shrink" in err and all(name in err for name in launcher_cli.SCENARIOS)


@pytest.mark.parametrize("name", launcher_cli.SCENARIOS)
def test_scenario_runs_clean(name, capsys):
    code, out, err = run_cli("--scenario", name, "--simulate", "--json", capsys=capsys)
    data = json.loads(out)
    assert code == 0 and data["ok"], data
    assert data["scenario"] == name and data["sim_errors"] == [] and data["notes"] == []
    assert all(s["acl_code"] == 0 for s in data["steps"])
    if name != "devices-threads-queue-off":
        assert data["replays"] and all(r["acl_code"] == 0 and r["lock_content_ok"] and r["kernels_seen"] > 0
                                       for r in data["replays"])


def _old_helper(tmp_path: Path) -> Path:
    rel = "torch_npu/_inductor/patchset/csrc"
    try:
        names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", OLD_HELPER_COMMIT, rel],
                               capture_output=True, text=True, check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"commit {OLD_HELPER_COMMIT} (the helper before issue 17) not available: {exc}")
    if not names:
        pytest.skip(f"commit {OLD_HELPER_COMMIT} has no {rel}")
    out = tmp_path / "old_csrc"
    for name in names:
        dest = out / name[len(rel) + 1:]
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(subprocess.run(["git", "-C", str(ROOT), "show", f"{OLD_HELPER_COMMIT}:{name}"],
                                        capture_output=True, check=True).stdout)
    return out


@pytest.mark.parametrize("name", launcher_cli.SCENARIOS)
def test_scenario_fails_with_the_old_helper(name, tmp_path):
    data = launcher_cli.run_scenario(name, helper_dir=_old_helper(tmp_path))
    assert not data["ok"], data
    kind = OLD_HELPER_FAILS_WITH[name]
    assert any(e.startswith(kind + ":") for e in data["sim_errors"]), data["sim_errors"][:5]
