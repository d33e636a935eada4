"""The acceptance kit (``python -m torch_npu._inductor.patchset selftest``): its judgements, its report
and its command line. The end-to-end checks run on a device (docs/verification.md, the selftest section); here what decides
passed / failed / skipped is exercised on inputs whose answer is known, and the command itself is run as
a user runs it: on this machine's CPU, and with a torch_npu installed that has no usable NPU."""
from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import release_wheels
import torch

import torch_npu._inductor.patchset as patchset
from torch_npu._inductor.patchset import selftest as st
from torch_npu._inductor.patchset.launch_plan import plan_from_metadata
from torch_npu._inductor.patchset.tooling.sim import launcher_writer as lc

COMMAND = [sys.executable, "-m", "torch_npu._inductor.patchset", "selftest"]
NEEDS_NOTHING = plan_from_metadata({}, kernel="triton_poi_fused_0")
NEEDS_BOTH = plan_from_metadata({"workspace_size": 64, "lock_num": 2, "lock_init_val": 0}, kernel="triton_tem_fused_mm_1")
ARGS = lc.args_from_signature("*fp32,i32")
#: Two launchers as the patch set writes them (launch_codegen, the code the runtime hooks emit).
TAKES = lc.launcher_source(NEEDS_BOTH, lc.LaunchSite(), ARGS)
NOTHING = lc.launcher_source(NEEDS_NOTHING, lc.LaunchSite(), ARGS)
WRAPPER = "#include <cstdint>\n" + NOTHING + "\n" + TAKES + "\nvoid inductor_entry_impl() {}\n"
PLANS = {"triton_poi_fused_0": NEEDS_NOTHING, "triton_tem_fused_mm_1": NEEDS_BOTH}
LEG = ".".join(torch.__version__.split("+")[0].split(".")[:3])
#: The release whose own runtime runs the simulation check on each CI leg (test_real_runtime.py's reference).
REFERENCE_RELEASE = {"2.7.1": "2.7.1.post10", "2.14.1": "2.13.0"}.get(LEG, "2.7.1.post10")

#: torch_npu's own launcher shape (codegen/cpp_wrapper.py, rtKernelLaunch) as the runtime hook patches it:
#: a named ``launch_call_0``, upstream's comments and braces, the ffts query first in the lambda.
UPSTREAM_SHAPE = """
template <typename in_ptr0_type_>
static inline void call_triton_red_fused_sum_1(const in_ptr0_type_& in_ptr0, int64_t n, aclrtStream stream_,
                                               const std::optional<std::string>& cubin_dir_ = std::nullopt){
    uint32_t grid_0 = ((n + (64 - 1)) / (64));
    uint32_t grid_1 = 1;
    uint32_t grid_2 = 1;
    if (grid_0 == 0 || grid_1 == 0 || grid_2 == 0) return;
    if (triton_red_fused_sum_1 == nullptr) {
        triton_red_fused_sum_1 = loadKernel("/tmp/x.cubin", "triton_red_fused_sum_1 mix {", 1, cubin_dir_);
    }
    // npu-sync-resources: locks 4 int64 slots, each 1; workspace 1024 B per block x grid. }
    uint32_t npu_sync_block_num = grid_0 * grid_1 * grid_2;
    torch_npu::inductor::LockLayout npu_sync_locks;
    torch_npu::inductor::LaunchMemory npu_sync_memory("triton_red_fused_sum_1", stream_,
        grid_0, grid_1, grid_2, npu_sync_block_num, UINT64_C(1024), npu_sync_locks);
    const torch_npu::inductor::LaunchRegions npu_sync_regions = npu_sync_memory.regions();

    auto launch_call_0 = [=]() {
        rtError_t ret;
        void* ffts_addr = NULL;
        uint32_t ffts_len;
        ret = rtGetC2cCtrlAddr((uint64_t*)&ffts_addr, &ffts_len);
        if (ret != RT_ERROR_NONE) return ret;
        aclError npu_sync_status = npu_sync_regions.write_locks("triton_red_fused_sum_1", stream_);
        if (npu_sync_status != ACL_SUCCESS) return npu_sync_status;
        void* sync_block_lock = npu_sync_regions.locks;
        void* workspace_addr = npu_sync_regions.workspace;
        struct __attribute__((packed)) { void* ffts_addr; } kernel_args = { ffts_addr };
        ret = rtKernelLaunch(triton_red_fused_sum_1, grid_0, &kernel_args, sizeof(kernel_args), NULL, stream_);
        return ret;
    };

    launchKernel(launch_call_0, "triton_red_fused_sum_1");
    npu_sync_memory.handed();  // queued: the block is the thread's again, for its next launch on the stream
}
"""

LAMBDA_START = "    auto launch_call = [=]() -> aclError {\n        aclError ret = ACL_SUCCESS;\n"
RELEASE = ("    npu_sync_memory.handed();  // queued: the block is the thread's again, for its next launch on the "
           "stream\n")
MEMORY = ('    torch_npu::inductor::LaunchMemory npu_sync_memory("triton_tem_fused_mm_1", stream_,\n'
          "        grid_0, grid_1, grid_2, npu_sync_block_num, UINT64_C(64), npu_sync_locks);\n")
#: The shapes issue 22 forbids, each made from the good launcher, and what the read-back says.
MUTATIONS = {
    "allocation in the lambda": (
        lambda s: s.replace(LAMBDA_START, LAMBDA_START + "        void* w = allocate_workspace(64, stream_);\n"),
        "allocate_workspace inside the launch lambda"),
    "the old in-lambda helper": (
        lambda s: s.replace(MEMORY, "").replace(RELEASE, "").replace(
            LAMBDA_START, LAMBDA_START + "        aclError st = torch_npu::inductor::acquire_launch_resources(\n"
                                         "            \"k\", stream_, grid_0, grid_1, grid_2, 1, 64, locks, &r);\n"),
        "0 torch_npu::inductor::LaunchMemory before the launch lambda (want 1)"),
    "memory taken inside the lambda": (
        lambda s: s.replace(MEMORY, "").replace(LAMBDA_START, LAMBDA_START + MEMORY),
        "LaunchMemory inside the launch lambda"),
    "the lambda gets the owning object": (
        lambda s: s.replace("void* workspace_addr = npu_sync_regions.workspace;",
                            "void* workspace_addr = npu_sync_memory.regions().workspace;"),
        "the launch lambda names the owning npu_sync_memory"),
    "handed back later than right after the launch": (
        lambda s: s.replace(RELEASE, "    other_work(stream_);\n" + RELEASE),
        "the statement right after launchKernel(...) is not npu_sync_memory.handed();"),
    "handed back only by the destructor": (
        lambda s: s.replace(RELEASE, ""),
        "the statement right after launchKernel(...) is not npu_sync_memory.handed();"),
    "released once queued (issue 31)": (
        lambda s: s.replace(RELEASE, "    npu_sync_memory.release();\n"),
        "the statement right after launchKernel(...) is not npu_sync_memory.handed();"),
    "a null workspace pointer": (
        lambda s: s.replace("void* workspace_addr = npu_sync_regions.workspace;", "void* workspace_addr = NULL;"),
        "the launch lambda sets workspace_addr to a null pointer"),
    "aclrtMalloc in the lambda": (
        lambda s: s.replace(LAMBDA_START, LAMBDA_START + "        aclrtMalloc(&p, 64, ACL_MEM_MALLOC_HUGE_FIRST);\n"),
        "aclrtMalloc inside the launch lambda"),
}


# ---- reading the generated C++ back (issue 22's shape) ---------------------------------------------------------
def test_launches_are_split_per_call_function_at_its_closing_brace():
    launches = st.launches_in(WRAPPER)
    assert sorted(launches) == ["triton_poi_fused_0", "triton_tem_fused_mm_1"]
    assert launches["triton_tem_fused_mm_1"].endswith(RELEASE + "}")
    assert "inductor_entry_impl" not in launches["triton_tem_fused_mm_1"]


def test_the_patch_sets_launchers_read_back_clean():
    assert st.read_back(TAKES, True) == {"launches": 1, "takes_memory": True, "problems": []}
    assert st.read_back(NOTHING, False) == {"launches": 1, "takes_memory": False, "problems": []}
    upstream = st.launches_in(UPSTREAM_SHAPE)["triton_red_fused_sum_1"]
    assert st.read_back(upstream, True) == {"launches": 1, "takes_memory": True, "problems": []}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_each_forbidden_shape_is_named(name):
    mutate, says = MUTATIONS[name]
    bad = mutate(TAKES)
    assert bad != TAKES, "the mutation did not apply"
    problems = st.read_back(bad, True)["problems"]
    assert any(says in p for p in problems), problems


def test_a_launch_that_needs_nothing_takes_nothing():
    problems = st.read_back(TAKES, False)["problems"]
    assert any("takes LaunchMemory ['npu_sync_memory'] though its kernel needs no workspace or locks" in p
               for p in problems)
    assert any("releases npu_sync_memory though its kernel needs no memory" in p for p in problems)
    assert st.read_back("static inline void call_k() { return; }", True)["problems"] == ["no launchKernel(...) call"]


def test_npu_wrapper_passes_when_memory_is_taken_exactly_where_needed():
    detail, data = st.check_wrapper("npu", [WRAPPER], PLANS, "t")
    assert detail.startswith("2 launches; 1 need memory and take it before the lambda, keep it for the thread's "
                             "next launch on the stream, none allocates inside its lambda")
    assert data["read_back"]["triton_tem_fused_mm_1"] == {
        "needs": {"workspace": True, "locks": True}, "launches": 1, "takes_memory": True, "problems": []}


def test_npu_wrapper_fails_naming_the_launch_in_the_wrong_shape():
    bad = WRAPPER.replace(TAKES, MUTATIONS["the old in-lambda helper"][0](TAKES))
    with pytest.raises(st.CheckFailed, match=r"t: generated launches not in the expected shape: "
                                              r"triton_tem_fused_mm_1: the launch: 0 torch_npu::inductor::LaunchMemory"):
        st.check_wrapper("npu", [bad], PLANS, "t")
    plans = dict(PLANS, triton_poi_fused_0=plan_from_metadata({"lock_num": 2, "lock_init_val": 0},
                                                              kernel="triton_poi_fused_0"))
    with pytest.raises(st.CheckFailed, match=r"triton_poi_fused_0: the launch: 0 torch_npu::inductor::LaunchMemory"):
        st.check_wrapper("npu", [WRAPPER], plans, "t")


def test_wrapper_without_launchers_fails_on_a_device():
    with pytest.raises(st.CheckFailed, match="no C\\+\\+ call_<kernel> launchers"):
        st.check_wrapper("cuda", ["def call(args):\n    pass\n"], {}, "t")
    with pytest.raises(st.CheckFailed, match="no generated code"):
        st.check_wrapper("npu", [], {}, "t")


def test_codegen_check_reads_the_sample_launchers_back():
    detail, _ = st.check_codegen()
    assert detail.startswith("10 sample kernels: the 8 that need memory take it before the launch lambda and "
                             "keep it for the thread's next launch on the stream (handed after launchKernel)")


def test_simulation_check_runs_the_installed_files_and_names_a_wrong_launch(monkeypatch, tmp_path):
    """The ``simulation`` check with torch_npu "installed" as a local build of the leg's reference release (its
    files linked into a site folder of their own, its version ``<release>+git1a2b3c4``, the released wheel out of
    reach): the sample launchers run on those files' own task queue and caching allocator and pass; with the lock
    fill of one kernel left out they fail, naming that kernel and what its probe saw."""
    from torch_npu._inductor.patchset.tooling.releases import host_runtime, real_artifacts, real_sources

    whole = host_runtime.extracted_wheel(release_wheels.fetched(REFERENCE_RELEASE))
    release = f"{REFERENCE_RELEASE}+git1a2b3c4"  # as a source build names itself: not a released version
    site = tmp_path / "site-packages"
    (site / f"torch_npu-{release}.dist-info").mkdir(parents=True)
    (site / "torch_npu").symlink_to(whole / "torch_npu", target_is_directory=True)
    for member in next(whole.glob("torch_npu-*.dist-info")).iterdir():
        linked = site / f"torch_npu-{release}.dist-info" / member.name
        if member.name == "METADATA":
            linked.write_text(re.sub(r"(?m)^Version: .*$", f"Version: {release}", member.read_text()))
        else:
            linked.symlink_to(member)

    def out_of_reach(*_a, **_k):
        raise AssertionError("the released wheel was asked for")

    monkeypatch.setattr(real_artifacts, "npu_wheel", out_of_reach)
    monkeypatch.setattr(host_runtime.wheels, "wheel_path", out_of_reach)
    monkeypatch.setattr(st, "torch_npu_installed", lambda: release)
    library = site / "torch_npu" / "lib" / "libtorch_npu.so"
    monkeypatch.setattr(st, "installed_runtime_library", lambda: library)
    imported, run_child = [], real_sources.run_child
    monkeypatch.setattr(real_sources, "run_child", lambda *a, **k: imported.append(run_child(*a, **k)) or imported[-1])
    detail, data = st.check_simulation()
    assert {r.get("torch_npu_file") for r in imported} == {str(site / "torch_npu" / "__init__.py")}
    assert detail.startswith(f"10 sample kernels, each launched twice on torch_npu {release}'s own task queue and "
                             f"caching allocator (the installed {library}, over the host ACL library"), detail
    assert data == {"installed_library": str(library)}
    assert real_artifacts.installed_site(release) is None  # the wheel serves the release again afterwards

    real_source = lc.launcher_source

    def without_the_fill(plan, *rest, **kw):  # the flex-backward sample's lambda skips write_locks
        cpp = real_source(plan, *rest, **kw)
        if plan.kernel == "triton_tem_fused_flex_bwd_3":
            cpp, n = re.subn(r"npu_sync_status = npu_sync_regions\.write_locks\([^;]*\);", "npu_sync_status = 0;", cpp)
            assert n == 1
        return cpp

    monkeypatch.setattr(lc, "launcher_source", without_the_fill)
    with pytest.raises(st.CheckFailed, match=rf"launches on torch_npu {re.escape(release)}'s own runtime went wrong: "
                                             r"\{'both': \[") as failed:
        st.check_simulation()
    # each of its two launches found locks it was not given: what an earlier kernel left in the allocator's block
    # ([[7, 4]]), or memory never written, which the host ACL library also reports as an uninitialised read ([])
    problems = ast.literal_eval(str(failed.value).split(" went wrong: ", 1)[1])
    assert set(problems) == {"both"}, problems
    seen = [m.group(1) for m in map(re.compile(r"lock content at start (\[.*\]) != \[\[1, 4\]\] ").match,
                                    problems["both"]) if m]
    assert len(seen) == 2, problems
    others = [p for p in problems["both"] if not p.startswith("lock content at start ")]
    assert all("uninitialised-read" in p or "disturbed" in p for p in others), others
    assert ("[]" in seen) == any("uninitialised-read: probe kernel (lock read at start)" in p for p in others), problems


# ---- values against eager ------------------------------------------------------------------------------------
def test_compare_names_the_first_difference_and_its_tolerance():
    want = torch.zeros(2, 3)
    got = want.clone()
    assert st.compare("x", got, want, atol=1e-3, rtol=0) is None
    got[1, 2] = 0.5
    msg = st.compare("x", got, want, atol=1e-3, rtol=0)
    assert msg.startswith("x: max |compiled - eager| = 0.5 (atol 0.001, rtol 0)") and "first at (1, 2)" in msg
    assert "shape (3,) != eager (2, 3)" in st.compare("x", torch.zeros(3), want, atol=1, rtol=1)
    assert "1 non-finite values" in st.compare("x", torch.tensor([0.0, float("nan")]), torch.zeros(2), atol=1, rtol=1)


def test_each_outcome_is_recorded_with_why():
    def skip():
        raise st.CheckSkipped("no device here")

    def fail():
        raise st.CheckFailed("out differs")

    def crash():
        raise ValueError("boom")

    assert st.run_check("a", lambda: ("fine", {"n": 1})).status == st.PASSED
    skipped = st.run_check("b", skip)
    assert (skipped.status, skipped.detail) == (st.SKIPPED, "no device here")
    assert st.run_check("c", fail).detail == "out differs"
    crashed = st.run_check("d", crash)
    assert crashed.status == st.FAILED and crashed.detail == "ValueError: boom"
    assert any("boom" in line for line in crashed.data["traceback"])


def test_end_to_end_checks_skip_with_the_reason_where_they_cannot_run():
    with pytest.raises(st.CheckSkipped, match="no usable Ascend NPU here: torch_npu is not installed"):
        st.check_flex_backward("npu")
    with pytest.raises(st.CheckSkipped, match="Triton templates"):
        st.check_flex_backward("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(st.CheckSkipped, match=r"no usable cuda here: torch.cuda.is_available\(\) is False"):
            st.check_kernels("kernels-locks", "cuda")


def test_the_combined_kernels_check_runs_a_program_of_its_own():
    """kernels-workspace-and-locks compiles its own graph (template matmul then scatter): not a re-count."""
    kind, wanted = st.KERNEL_CHECKS["kernels-workspace-and-locks"]
    assert kind not in ("workspace", "locks") and wanted == ("workspace", "locks")
    a, b, bias, idx, keep = st._inputs(kind, 96, "cpu")
    fn, options = st.KERNEL_PROGRAMS[kind]
    assert options["max_autotune_gemm_backends"] == "TRITON"
    want = st._masked_scatter(st._mm_epilogue(a, b, bias)[:, 0], idx, keep)
    assert torch.equal(fn(a, b, bias, idx, keep), want) and want.abs().sum() > 0


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_aot_check_runs_on_an_npu_only_and_says_why(device):
    outcome = st.run_check("aot-package", lambda: st.check_aot(device))
    assert outcome.status == st.SKIPPED and "torch_npu's" in outcome.detail and device in outcome.detail


def test_aot_wrapper_must_carry_the_helper_once_and_no_path_of_this_machine():
    good = "\n".join(["#include <torch_npu/csrc/inductor/aoti_include/npu.h>", *lc.helper_inline_lines(),
                      "static inline void call_k() {}"])
    assert st.aot_source_problems("m.cpp", good) == []
    absolute = good.replace("#include <torch_npu", f'#include "{lc.HELPER_DIR / lc.HELPER_HEADER}"\n#include <torch_npu', 1)
    assert any("by this machine's path" in p for p in st.aot_source_problems("m.cpp", absolute))
    twice = good + "\n" + lc.INLINE_BEGIN
    assert st.aot_source_problems("m.cpp", twice) == ["m.cpp carries the inlined helper 2 times (want 1)"]
    assert st.aot_source_problems("m.cpp", "static inline void call_k() {}") == [
        "m.cpp carries the inlined helper 0 times (want 1)"]


# ---- the device and the environment ------------------------------------------------------------------------------
def test_device_choice_says_what_was_asked_and_why():
    if st.torch_npu_installed() is None and not torch.cuda.is_available():
        choice = st.choose_device(None)
        assert (choice.device, choice.problem) == ("cpu", None)
        assert "torch_npu is not installed and torch.cuda.is_available() is False" in choice.why
        assert "launches no device kernel" in st.check_device(choice)[0]
    asked = st.choose_device("npu")
    assert asked.why == "asked for (--device npu)"
    if st.torch_npu_installed() is None:
        assert asked.problem == "torch_npu is not installed"
        outcome = st.run_check("device", lambda: st.check_device(asked))
        assert outcome.status == st.FAILED and "this run says nothing about the fix" in outcome.detail


def test_cann_and_driver_versions_are_read_where_they_are(tmp_path):
    home = tmp_path / "ascend-toolkit" / "latest"
    (home / "x86_64-linux").mkdir(parents=True)
    (home / "x86_64-linux" / "ascend_toolkit_install.info").write_text(
        "package_name=Ascend-cann-toolkit\ninnerversion=V100R001C19\nversion=8.0.RC3\narch=x86_64\n")
    (home / "opp").mkdir()
    (home / "opp" / "ascend_opp_install.info").write_text("version=7.0.0\n")
    found = st.cann_version({"ASCEND_HOME_PATH": str(home)}, default_roots=())
    assert found == f"8.0.RC3 ({home / 'x86_64-linux' / 'ascend_toolkit_install.info'})"
    missing = st.cann_version({}, default_roots=(str(tmp_path / "none"),))
    assert missing == f"not found ({tmp_path / 'none'}: no such folder; unset: ASCEND_HOME_PATH, ASCEND_TOOLKIT_HOME)"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert st.cann_version({"ASCEND_TOOLKIT_HOME": str(empty)}, default_roots=()) == (
        f"not found (ASCEND_TOOLKIT_HOME={empty}: no version file; unset: ASCEND_HOME_PATH)")
    driver = tmp_path / "version.info"
    assert st.npu_driver_version(str(driver)) == f"not found ({driver}: no such file)"
    driver.write_text("Version=24.1.rc3\nascendhal_version=7.35.23\n")
    assert st.npu_driver_version(str(driver)) == f"24.1.rc3 ({driver})"


def test_the_compiler_is_inductors_with_its_version(monkeypatch):
    from torch._inductor import cpp_builder

    text = st.cpp_compiler()
    assert text.startswith(f"{cpp_builder.get_cpp_compiler()} (")
    assert "): " in text and text.split("): ", 1)[1]  # the --version line
    monkeypatch.setattr(cpp_builder, "get_cpp_compiler", lambda: (_ for _ in ()).throw(RuntimeError("no cxx\nmore")))
    assert st.cpp_compiler() == "not found: Inductor's get_cpp_compiler() raised RuntimeError: no cxx"


def test_the_command_line_is_reported_as_typed(monkeypatch):
    import types

    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name="torch_npu._inductor.patchset.__main__")
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert st.command_line(["/x/__main__.py", "selftest", "--report", "my report.md"]) == (
        "python -m torch_npu._inductor.patchset selftest --report 'my report.md'")
    main.__spec__ = None
    assert st.command_line(["/venv/bin/torch-npu-patchset", "selftest"]) == "torch-npu-patchset selftest"


# ---- the report and the exit status -------------------------------------------------------------------------------
def _result(statuses):
    checks = [st.Check(f"check-{i}", s, f"detail {i} | with a pipe", {}) for i, s in enumerate(statuses)]
    counts = {s: statuses.count(s) for s in (st.PASSED, st.FAILED, st.SKIPPED)}
    env = {"patchset": "0", "torch": "2.7.1", "device": "cpu", "device_name": "x86_64", "python": "3.11",
           "device_why": "the default without torch_npu or CUDA", "device_problem": None,
           "cann": "not found (/usr/local/Ascend/ascend-toolkit/latest: no such folder)", "npu_driver": "not found (x)",
           "compiler": "g++ (/usr/bin/g++): g++ 11", "autoload": "armed",
           "settings": {"TORCH_NPU_PATCHSET_DISABLE": "flex"}, "disabled_unknown": ["flex"],
           "patch_ids": ["a", "b"], "autoload_failures": ["autoload: OSError('x')"]}
    return {"asked": "python -m torch_npu._inductor.patchset selftest", "environment": env, "device": "cpu",
            "checks": [c.to_json() for c in checks], "counts": counts, "ok": counts[st.FAILED] == 0}


def test_markdown_report_is_what_a_user_pastes_into_an_issue():
    md = st.format_markdown(_result([st.PASSED, st.SKIPPED, st.FAILED]))
    assert md.startswith("# torch-npu-inductor-patches selftest: 1 passed, 1 failed, 1 skipped\n\n"
                         "`python -m torch_npu._inductor.patchset selftest`\n")
    for row in ("| device | cpu (x86_64): the default without torch_npu or CUDA |", "| torch_npu | not installed |",
                "| CANN | not found (/usr/local/Ascend/ascend-toolkit/latest: no such folder) |",
                "| NPU driver | not found (x) |", "| C++ compiler | g++ (/usr/bin/g++): g++ 11 |",
                "| settings | TORCH_NPU_PATCHSET_DISABLE=flex |",
                "| unknown ids | flex (in TORCH_NPU_PATCHSET_DISABLE: no such patch, nothing disabled by them; "
                "valid: a, b) |",
                "| autoload failure | autoload: OSError('x') |",
                "| check-2 | **failed** | detail 2 \\| with a pipe |"):
        assert row in md, row


@pytest.mark.parametrize("statuses,code", [((st.PASSED, st.SKIPPED), 0), ((st.PASSED, st.FAILED), 1)])
def test_exit_status_is_1_only_when_a_check_failed(monkeypatch, tmp_path, capsys, statuses, code):
    monkeypatch.setattr(st, "run", lambda device=None, asked=None: _result(list(statuses)))
    report = tmp_path / "selftest.md"
    args = type("A", (), {"device": "cpu", "json": True, "report": str(report)})()
    assert st.main(args) == code
    assert json.loads(capsys.readouterr().out)["ok"] is (code == 0)
    assert report.read_text().startswith("# torch-npu-inductor-patches selftest")
    assert [p.name for p in tmp_path.iterdir()] == ["selftest.md"]  # no temporary file left


def test_cli_offers_the_selftest_with_its_options():
    proc = subprocess.run(COMMAND + ["--help"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for option in ("--device", "{npu,cuda,cpu}", "--json", "--report"):
        assert option in proc.stdout


# ---- the command, as a user runs it ---------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["missing/report.md", "missing/deeper/report.md", "."])
def test_report_into_a_missing_folder_is_refused_before_any_work(tmp_path, where):
    target = tmp_path / where
    t0 = time.monotonic()
    proc = subprocess.run(COMMAND + ["--report", str(target)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stdout == ""  # no check ran
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    if where == ".":
        assert lines[0] == f"selftest: --report {target}: is a folder; name a file"
    else:
        assert lines[0] == f"selftest: --report {target}: folder {target.parent} does not exist"
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert time.monotonic() - t0 < 60  # the checks take minutes; this is only the interpreter starting


def test_report_into_a_folder_where_no_file_can_be_made_is_refused_before_any_work():
    proc = subprocess.run(COMMAND + ["--report", "/proc/report.md"], capture_output=True, text=True, timeout=300)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr.strip().startswith("selftest: --report /proc/report.md: cannot create a file in /proc: ")
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    """The selftest as the README writes it (no --device) on this machine, with a typo in the disable list."""
    if st.torch_npu_installed() is not None or torch.cuda.is_available():
        pytest.skip("this machine has torch_npu or CUDA: the default device is not the CPU here")
    report = tmp_path_factory.mktemp("selftest") / "report.md"
    env = dict(os.environ, TORCH_NPU_PATCHSET_DISABLE="flex-atention", TORCH_NPU_LAUNCH_EXAMPLE="1")
    env.pop("ASCEND_HOME_PATH", None)
    env.pop("ASCEND_TOOLKIT_HOME", None)
    t0 = time.monotonic()
    proc = subprocess.run(COMMAND + ["--report", str(report)], capture_output=True, text=True, timeout=1500, env=env)
    return proc, report, time.monotonic() - t0


def _checks(stdout: str) -> dict:
    """{check: (status, seconds, detail)} from the text report."""
    lines = stdout.splitlines()
    out = {}
    for i, line in enumerate(lines):
        parts = line.split()
        if len(parts) == 4 and parts[1] in (st.PASSED, st.FAILED, st.SKIPPED) and parts[3] == "s)":
            out[parts[0]] = (parts[1], float(parts[2][1:]), lines[i + 1].strip())
    return out


def test_default_run_here_says_what_was_asked_and_found(cpu_run):
    proc, report, _ = cpu_run
    out = proc.stdout
    header = out.split("\n\n")[0].splitlines()
    rows = {line[2:18].strip(): line[19:] for line in header[1:] if not line.startswith("  autoload failure")}
    assert header[0] == f"torch-npu-inductor-patches {patchset.__version__} selftest"
    assert rows["asked"] == f"python -m torch_npu._inductor.patchset selftest --report {report}"
    assert rows["device"].startswith("cpu (") and rows["device"].endswith(
        "): the default without torch_npu or CUDA: torch_npu is not installed and torch.cuda.is_available() is False")
    assert rows["torch"] == torch.__version__.split("+")[0] or rows["torch"] == torch.__version__
    assert rows["torch_npu"] == "not installed"
    assert rows["CANN"].startswith("not found (") and rows["NPU driver"].startswith("not found (")
    assert rows["C++ compiler"].startswith("g++ (") or "): " in rows["C++ compiler"]
    settings = sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith(("TORCH_NPU_PATCHSET_", "TORCH_NPU_LAUNCH_"))
                      and k not in ("TORCH_NPU_PATCHSET_DISABLE", "TORCH_NPU_LAUNCH_EXAMPLE"))
    assert rows["settings"] == ", ".join(sorted(settings + ["TORCH_NPU_LAUNCH_EXAMPLE=1",
                                                            "TORCH_NPU_PATCHSET_DISABLE=flex-atention"]))
    assert rows["unknown ids"].startswith("flex-atention (in TORCH_NPU_PATCHSET_DISABLE: no such patch, nothing "
                                          "disabled by them; valid: kernel-sync-metadata, ")
    assert rows["autoload"] == "armed"
    # The typo is warned about once, on stderr, naming the valid ids.
    warnings = [ln for ln in proc.stderr.splitlines() if "names no patch" in ln]
    assert len(warnings) == 1 and "valid ids: kernel-sync-metadata, " in warnings[0], proc.stderr
    md = report.read_text()
    assert f"`python -m torch_npu._inductor.patchset selftest --report {report}`" in md
    assert "| CANN | not found (" in md and "| device | cpu (" in md


def test_default_run_here_checks_do_their_own_work(cpu_run):
    proc, _, seconds = cpu_run
    checks = _checks(proc.stdout)
    assert list(checks) == ["device", "status", "codegen", "simulation", "flex-backward", "kernels-workspace",
                            "kernels-locks", "kernels-workspace-and-locks", "aot-package"], proc.stdout
    assert checks["device"][0] == st.PASSED and "launches no device kernel" in checks["device"][2]
    for name in ("status", "codegen", "kernels-workspace", "kernels-locks", "kernels-workspace-and-locks"):
        assert checks[name][0] == st.PASSED, (name, checks[name])
    combined = checks["kernels-workspace-and-locks"]
    assert combined[2].startswith("the workspace-and-locks program matches eager at 3 sizes, 1 graph")
    assert combined[1] >= 0.5, combined  # compiled and ran its own program, not a re-count of earlier checks
    assert checks["flex-backward"][0] == checks["aot-package"][0] == st.SKIPPED
    # the launchers run on a torch_npu release's own runtime: without one, skipped, saying what runs them
    assert checks["simulation"][0] == st.SKIPPED and checks["simulation"][2].startswith(
        "torch_npu is not installed: the sample launchers run on a torch_npu release's own runtime"), checks["simulation"]
    failed = [name for name, c in checks.items() if c[0] == st.FAILED]
    assert proc.returncode == (1 if failed else 0), (failed, proc.stderr[-2000:])
    assert proc.stdout.rstrip().splitlines()[-2].startswith(f"{sum(c[0] == st.PASSED for c in checks.values())} passed")


FAKE_TORCH_NPU = """\
# A torch_npu installed where no NPU is usable: it imports, torch.npu says none is available.
import sys, types
__path__.append({ours!r})  # this checkout's torch_npu/ (the patch set lives under it)
__version__ = "2.7.1"
import torch
npu = types.ModuleType("torch.npu")
npu.is_available = lambda: False
npu.device_count = lambda: 0
torch.npu = sys.modules["torch.npu"] = npu
"""


def test_torch_npu_without_a_usable_npu_is_a_failure_never_a_cpu_run(tmp_path):
    ours = str(Path(patchset.__file__).resolve().parents[2])
    (tmp_path / "torch_npu").mkdir()
    (tmp_path / "torch_npu" / "__init__.py").write_text(FAKE_TORCH_NPU.format(ours=ours))
    dist = tmp_path / "torch_npu-2.7.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: torch-npu\nVersion: 2.7.1\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    env.pop("ASCEND_RT_VISIBLE_DEVICES", None)
    proc = subprocess.run(COMMAND + ["--json"], capture_output=True, text=True, timeout=1500, env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    assert result["device"] == "npu" and result["asked"] == "python -m torch_npu._inductor.patchset selftest --json"
    checks = {c["name"]: c for c in result["checks"]}
    device = checks["device"]
    assert device["status"] == st.FAILED
    assert device["detail"].startswith("npu, the default where torch_npu is installed (torch_npu 2.7.1), is not "
                                       "usable: torch.npu.is_available() is False (torch.npu.device_count() = 0")
    for name in ("flex-backward", "kernels-workspace", "kernels-locks", "kernels-workspace-and-locks", "aot-package"):
        assert checks[name]["status"] == st.SKIPPED, checks[name]
        assert "no usable Ascend NPU here: torch.npu.is_available() is False" in checks[name]["detail"]
    assert not any(c["status"] == st.PASSED and c["name"] in ("flex-backward", "aot-package") or
                   c["name"].startswith("kernels-") and c["status"] == st.PASSED for c in result["checks"])
    assert result["environment"]["torch_npu"] == "2.7.1"
    # nothing of torch_npu's own to run the launchers on: skipped, never the double in this process
    assert checks["simulation"]["status"] == st.SKIPPED
    assert checks["simulation"]["detail"] == "the installed torch_npu 2.7.1 has no lib/libtorch_npu.so to run the launchers on"
    assert result["environment"]["device_problem"].startswith("torch.npu.is_available() is False")


def test_an_autoload_failure_is_in_the_report(monkeypatch):
    import torch_npu_patchset_autoload as autoload

    monkeypatch.setattr(autoload, "FAILURES", [("applying after import of m", "OSError('disk full')")])
    env = st.environment(st.choose_device("cpu"))
    result = {"asked": "selftest", "environment": env, "checks": [], "counts": dict.fromkeys((st.PASSED, st.FAILED,
                                                                                               st.SKIPPED), 0)}
    assert "  autoload failure applying after import of m: OSError('disk full')" in st.format_text(result).splitlines()
    assert "| autoload failure | applying after import of m: OSError('disk full') |" in st.format_markdown(result)


def test_flex_failure_of_torch_npus_own_template_is_named_as_such(monkeypatch):
    """On torch_npu 2.7.1.post10 the Flex backward template itself does not compile with dynamic lengths
    (the end-to-end tier shows it): the check fails naming torch_npu's template, not the patch set."""
    from torch_npu._inductor.patchset import selftest

    def broken(*args):
        raise RuntimeError("CompilationError: at 20:15: ValueError('Cannot broadcast, the expanded size ...')")

    monkeypatch.setattr(selftest, "_forward_backward", broken)
    with pytest.raises(selftest.CheckFailed, match="torch_npu's own Flex Attention backward template"):
        selftest._compiled_forward_backward(None, [], None)
    monkeypatch.setattr(selftest, "_forward_backward", lambda *a: (_ for _ in ()).throw(ValueError("other")))
    with pytest.raises(ValueError, match="other"):
        selftest._compiled_forward_backward(None, [], None)
