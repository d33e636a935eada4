"""``bash .ci/demo``: two real releases before and after the patch set, run on their own binaries over the
host ACL library (the real-runtime tier). The end-to-end test needs the wheels (fetched through upstream_wheels,
as the other wheel tests) and torch 2.7 (the releases' line)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from torch_npu._inductor.patchset.tooling.commands import demo
from torch_npu._inductor.patchset.tooling.e2e import matrix


def test_changed_lines_are_only_what_differs_with_kernel_names_made_equal():
    before = "static void call_k_upstream() {\n  int a = 0;\n  void* w = NULL;\n\n  return;\n}\n"
    after = "static void call_k_patched() {\n  int a = 0;\n  void* w = helper();\n  return;\n}\n"
    assert demo.changed_lines(before, after, "k") == ["@@ -3,2 +3 @@", "-  void* w = NULL;", "+  void* w = helper();"]
    assert demo.changed_lines(before, before.replace("_upstream", "_patched"), "k") == []


def _judged(problems, ok=False, errors=()):
    return {"launches": [{"problems": list(problems)}], "errors": list(errors), "ok": ok}


def test_verdict_names_each_kind_of_defect_once_and_clean_only_when_ok():
    assert demo.verdict(_judged([], ok=True)) == ["clean"]
    assert demo.verdict(_judged([], ok=False)) == ["not ok"]
    words = demo.verdict(_judged(["workspace pointer is null", "lock pointer is null",
                                  "lock and workspace regions overlap"], errors=["e1"]))
    assert words == ["NULL pointers", "aliasing: lock and workspace regions overlap", "1 simulation error reports"]
    assert demo.verdict(_judged(["something new"])) == ["something new"]


def test_the_closing_line_names_every_case_that_did_not_run():
    e2e = {"matrix": [{"case": "a"}, {"case": "b"}], "not_run": ["b"]}
    assert demo.closing(False, e2e) == "demo: UNEXPECTED result (see above); cases that did not run: b"
    assert "all 2 cases shown ran" in demo.closing(True, {**e2e, "not_run": []})


def test_bad_workers_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        demo.main(["--workers", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("--workers takes a number from 1 to 16, not '0'"), err


def test_the_demo_claim_needs_every_release_wrong_as_shipped_and_clean_patched():
    good = {"upstream": {"ok": False}, "patched": {"ok": True}}
    assert demo.expected_ok([good, good])
    job = {"as_shipped": {"ok": True}, "patched": {"ok": True}}
    assert demo.expected_ok([good], job)
    assert not demo.expected_ok([good], {**job, "patched": {"ok": False}})
    assert not demo.expected_ok([good, {"upstream": {"ok": True}, "patched": {"ok": True}}])
    assert not demo.expected_ok([{"upstream": {"ok": False}, "patched": {"ok": False}}])


@pytest.mark.skipif(not torch.__version__.startswith("2.7."), reason="the demo's releases (2.7.1.*) render on torch 2.7 only")
def test_demo_shows_null_and_aliasing_as_shipped_and_clean_patched():
    # The matrix's runs are shared with test_flex_end_to_end.py on the other worker (a lock per run): the demo may
    # wait for all of them the first time.
    proc = subprocess.run([sys.executable, "-m", "torch_npu._inductor.patchset.tooling.commands.demo", "--json"],
                          capture_output=True, text=True, timeout=4200)
    # Progress goes to stderr, a line per step, so that a first run (downloads, builds) is never silent.
    steps = proc.stderr.splitlines()
    assert all(line.startswith("demo: ") for line in steps), proc.stderr[-3000:]
    assert any("rendering the launchers of 2.7.1.post10, 2.7.1.post11" in line for line in steps)
    assert any("on its own runtime over the host ACL library" in line for line in steps)
    assert steps[-1].startswith("demo: done in ")
    if proc.returncode != 0 and "unreachable" in proc.stderr.lower():
        pytest.skip(f"package index unreachable and the wheels are not cached: {proc.stderr[-500:]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    by = {r["version"]: r for r in out["releases"]}
    assert out["ok"] and sorted(by) == ["2.7.1.post10", "2.7.1.post11"]
    assert by["2.7.1.post10"]["upstream"]["verdict"][0] == "NULL pointers"
    assert "aliasing: lock and workspace regions overlap" in by["2.7.1.post11"]["upstream"]["verdict"]
    for r in by.values():
        assert r["patched"]["verdict"] == ["clean"]
        assert "cost:      caching-allocator requests on the calling thread 1, blocking copies 0, regions overlap: no" in r["patched"]["evidence"]
        assert "-        void* workspace_addr = NULL;" in r["diff"]
        plus = [line for line in r["diff"] if line.startswith("+")]
        assert any("torch_npu::inductor::LaunchMemory npu_sync_memory(" in line for line in plus)  # before the lambda
        assert any("npu_sync_memory.handed();" in line for line in plus)  # after launchKernel
        assert any("void* workspace_addr = npu_sync_regions.workspace;" in line for line in plus)  # in the lambda
    # The user's job end to end: as shipped its backward does not compile (post10's template refuses its own masked
    # loads), patched it runs, and each of its launches got workspace_size x grid with initialised locks (the e2e
    # tier's own tests check the details).
    e2e = out["end_to_end"]
    assert "Cannot broadcast" in e2e["as_shipped"]["runs"][0]["error"]
    assert e2e["patched"]["ok"] and e2e["patched"]["graphs"] == 1 and len(e2e["patched"]["backward_launches"]) == 3
    # its kernels executed: the gradients of q, k and v match CPU eager at every length
    assert all(x["grad_errors"] and all(e["close"] for e in x["grad_errors"].values()) for x in e2e["patched"]["runs"])
    assert any("the user's job, end to end on 2.7.1.post10" in line for line in steps)
    # the first run's cases of the matrix (--matrix: all): one verdict per case, each said as it finished ("run k of
    # n"), each with its runs with a patch off where matrix.WITHOUT has them, every one of them ran
    assert e2e["matrix_ok"] and [v["case"] for v in e2e["matrix"]] == list(matrix.FIRST), e2e["matrix"]
    assert e2e["not_run"] == [] and all(v["outcome"] == "ran" for v in e2e["matrix"]), e2e["matrix"]
    assert all(len(v["without"]) == (v["case"] in matrix.WITHOUT) for v in e2e["matrix"]), e2e["matrix"]
    runs = len(matrix.FIRST) + len(set(matrix.FIRST) & set(matrix.WITHOUT))
    assert sum(line.startswith("demo:   run ") and f" of {runs}, " in line for line in steps) == runs, steps
    states = {row["id"]: row["state"] for row in by["2.7.1.post10"]["status"]}
    assert states["cpp-wrapper-sync-resources"] == "applied"
    assert {row["id"]: row["state"] for row in by["2.7.1.post11"]["status"]}["kernel-sync-metadata"] == "upstream-has-fix"
    assert any("aclrtMemcpy(" in line for line in by["2.7.1.post11"]["diff"] if line.startswith("-"))
    # The demo's status rows are what `status --against-wheel` says for the same release (post11's Flex
    # row once disagreed).
    for version, r in by.items():
        cli = subprocess.run([sys.executable, "-m", "torch_npu._inductor.patchset", "status", "--against-wheel", version],
                             capture_output=True, text=True, timeout=600)
        assert cli.returncode == 0, cli.stderr[-2000:]
        width = max(len(row["id"]) for row in r["status"]) + 2  # the status table's id column
        for row in r["status"]:
            assert f"{row['id']:<{width}}{row['state']}" in cli.stdout, (version, row, cli.stdout)


def _result(verdict, ok, got_ws, got_locks, values, overlap, allocs, copies):
    la = {"workspace_bytes": got_ws, "lock_bytes": got_locks, "promised_workspace_bytes": 24576,
          "promised_lock_bytes": 32, "workspace_region": {"kind": "none" if got_ws == 0 else "caching"},
          "lock_region": {"kind": "none" if got_locks == 0 else "caching"}, "lock_values_at_start": values,
          "regions_overlap": overlap, "allocator_calls": allocs, "sync_copies": copies}
    return {"verdict": verdict, "ok": ok, "evidence": demo.evidence({"launches": [la]})}


def test_text_report_keeps_labels_apart_from_their_values_and_says_sizes_in_words():
    r = {"version": "9.9", "layout": "cpp_wrapper_npu", "sample": "both", "diff": [],
         "status": [{"id": "flex-attention-backward-symbolic-grid", "state": "upstream-has-fix"}],
         "upstream": _result(["NULL pointers"], False, 0, 0, [], False, 0, 0),
         "patched": _result(["clean"], True, 25088, 512, [1], False, 1, 0)}
    lines = demo.format_text([r]).splitlines()
    assert "  flex-attention-backward-symbolic-grid  upstream-has-fix" in lines
    assert "    as shipped:  NULL pointers" in lines and "    patched:     clean" in lines
    assert "                 workspace: NULL            kernel needs 24576 B" in lines
    assert "                 locks:     512 B usable    kernel needs 32 B; slots hold 1 at launch" in lines
    assert "                 cost:      caching-allocator requests on the calling thread 1, blocking copies 0, regions overlap: no" in lines
    assert not any("False" in line or "True" in line or "[1]" in line for line in lines)


def test_a_download_says_what_it_fetches_how_big_and_how_long(tmp_path, monkeypatch):
    from torch_npu._inductor.patchset.tooling.releases import wheels

    monkeypatch.setenv("TORCH_NPU_PATCHSET_WHEEL_CACHE", str(tmp_path))

    def fake_pip(cmd, say, timeout=900):  # pip as it prints without a terminal; the wheel lands in -d
        name = "torch_npu-9.9.9-cp311-cp311-manylinux_2_28_x86_64.whl"
        say(f"Downloading {name} (1.0 MB)")
        (Path(cmd[cmd.index("-d") + 1]) / name).write_bytes(b"x" * 1_000_000)
        return f"Collecting torch-npu==9.9.9\n  Downloading {name} (1.0 MB)\nSaved {name}\n"

    monkeypatch.setattr(wheels, "_pip_download", fake_pip)
    said = []
    got = wheels.wheel_path("9.9.9", say=said.append)
    assert got.parent == tmp_path and got.stat().st_size == 1_000_000
    assert said[0].startswith(f"downloading torch-npu==9.9.9 from the package index into {tmp_path}")
    assert said[1] == "Downloading torch_npu-9.9.9-cp311-cp311-manylinux_2_28_x86_64.whl (1.0 MB)"
    assert said[2].startswith("torch-npu==9.9.9: 1.0 MB in ") and said[2].endswith(" s")
    said.clear()
    assert wheels.wheel_path("9.9.9", say=said.append) == got and said == []  # cached: nothing to say


def test_a_first_run_says_what_it_makes_and_how_long_before_any_download(tmp_path):
    """`bash .ci/demo` on a fresh machine: env.sh makes a ~3 GB environment first. Its first lines say so
    (what, where, how long), before any download; here `python3 -m venv` fails right after them."""
    root = Path(__file__).resolve().parents[1]
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "python3").write_text(f'#!/bin/sh\n[ "$1" = -m ] && [ "$2" = venv ] && {{ echo "no venv here" >&2; exit 3; }}\n'
                                  f'exec {sys.executable} "$@"\n')
    (shim / "python3").chmod(0o755)
    env = {"PATH": f"{shim}:/usr/bin:/bin", "HOME": str(tmp_path), "TORCH_NPU_PATCHSET_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(["bash", "-c", f"source {root}/.ci/env.sh 2.7.1"], capture_output=True, text=True,
                          env=env, timeout=60)
    lines = proc.stderr.splitlines()
    assert proc.returncode != 0 and lines[-1] == "env.sh: could not prepare the environment for torch 2.7.1", lines
    assert lines[0].startswith("env.sh: first run for torch 2.7.1: making its virtual environment in "
                               f"{tmp_path / 'cache'}/venv-torch2.7.1-"), lines
    assert lines[1] == ("env.sh: pip downloads torch 2.7.1 and the libraries it needs (about 3 GB): typically 3 to 6 "
                        "minutes; later runs reuse it"), lines
    assert lines[2] == "no venv here", lines  # nothing before the announcement, nothing downloaded after the failure
