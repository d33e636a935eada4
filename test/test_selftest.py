"""The acceptance kit (``python -m torch_npu._inductor.patchset selftest``): its judgements, its report
and its command line. The end-to-end checks themselves run on a device (docs/selftest-cuda.md); here
what decides passed / failed / skipped is exercised on inputs whose answer is known."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from torch_npu._inductor.patchset.launch_plan import plan_from_metadata
from torch_npu._inductor.patchset.tooling import selftest as st

WRAPPER = """
#include <cstdint>
static inline void call_triton_poi_fused_0(const void* in, uint32_t n, aclrtStream stream_) {
    auto launch_call = [=]() {
        void* workspace_addr = NULL;
        void* sync_block_lock = NULL;
        return 0;
    };
}
static inline void call_triton_tem_fused_mm_1(const void* in, uint32_t n, aclrtStream stream_) {
    auto launch_call = [=]() {
        aclError npu_sync_status = torch_npu::inductor::acquire_launch_resources(
            "triton_tem_fused_mm_1", stream_, grid_0, grid_1, grid_2, 1, UINT64_C(64), locks, &r);
        return npu_sync_status;
    };
}
"""
NEEDS_NOTHING = plan_from_metadata({}, kernel="triton_poi_fused_0")
NEEDS_WORKSPACE = plan_from_metadata({"workspace_size": 64}, kernel="triton_tem_fused_mm_1")


def test_launches_are_split_per_call_function():
    launches = st.launches_in(WRAPPER)
    assert sorted(launches) == ["triton_poi_fused_0", "triton_tem_fused_mm_1"]
    assert "acquire_launch_resources(" in launches["triton_tem_fused_mm_1"]
    assert "acquire_launch_resources(" not in launches["triton_poi_fused_0"]


def test_npu_wrapper_passes_when_the_helper_is_called_exactly_where_memory_is_needed():
    plans = {"triton_poi_fused_0": NEEDS_NOTHING, "triton_tem_fused_mm_1": NEEDS_WORKSPACE}
    detail, data = st.check_wrapper("npu", [WRAPPER], plans, "t")
    assert "2 launches; 1 need memory and call the helper" in detail
    assert data["helper_calls"]["triton_tem_fused_mm_1"] == {"calls_helper": True,
                                                              "needs": {"workspace": True, "locks": False}}


def test_npu_wrapper_fails_naming_the_launch_that_does_not_call_the_helper():
    plans = {"triton_poi_fused_0": plan_from_metadata({"lock_num": 2, "lock_init_val": 0}, kernel="triton_poi_fused_0"),
             "triton_tem_fused_mm_1": NEEDS_WORKSPACE}
    with pytest.raises(st.CheckFailed, match=r"triton_poi_fused_0 \(needs \{'workspace': False, 'locks': True\}, "
                                              r"calls helper False\)"):
        st.check_wrapper("npu", [WRAPPER], plans, "t")


def test_wrapper_without_launchers_fails_on_a_device():
    with pytest.raises(st.CheckFailed, match="no C\\+\\+ call_<kernel> launchers"):
        st.check_wrapper("cuda", ["def call(args):\n    pass\n"], {}, "t")
    with pytest.raises(st.CheckFailed, match="no generated code"):
        st.check_wrapper("npu", [], {}, "t")


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

    assert st._run_check("a", lambda: ("fine", {"n": 1})).status == st.PASSED
    skipped = st._run_check("b", skip)
    assert (skipped.status, skipped.detail) == (st.SKIPPED, "no device here")
    assert st._run_check("c", fail).detail == "out differs"
    crashed = st._run_check("d", crash)
    assert crashed.status == st.FAILED and crashed.detail == "ValueError: boom"
    assert any("boom" in line for line in crashed.data["traceback"])


def test_end_to_end_checks_skip_with_the_reason_where_they_cannot_run():
    with pytest.raises(st.CheckSkipped, match="no Ascend NPU here"):
        st.check_flex_backward("npu")
    with pytest.raises(st.CheckSkipped, match="Triton templates"):
        st.check_flex_backward("cpu")
    if not torch.cuda.is_available():
        with pytest.raises(st.CheckSkipped, match="no CUDA device"):
            st.check_kernels("kernels-locks", "cuda", {})


def test_codegen_check_passes_on_the_sample_kernels():
    detail, _ = st.check_codegen()
    assert "sample kernels: the helper is called exactly where memory is needed" in detail


def _result(statuses):
    checks = [st.Check(f"check-{i}", s, f"detail {i} | with a pipe", {}) for i, s in enumerate(statuses)]
    counts = {s: statuses.count(s) for s in (st.PASSED, st.FAILED, st.SKIPPED)}
    env = {"patchset": "0", "torch": "2.7.1", "device_name": "cpu", "python": "3.11"}
    return {"environment": env, "device": "cpu", "checks": [c.to_json() for c in checks], "counts": counts,
            "ok": counts[st.FAILED] == 0}


def test_markdown_report_is_one_table_a_user_can_paste(tmp_path):
    md = st.format_markdown(_result([st.PASSED, st.SKIPPED, st.FAILED]))
    assert md.startswith("# torch-npu-inductor-patches selftest: 1 passed, 1 failed, 1 skipped\n")
    assert "| check-2 | **failed** | detail 2 \\| with a pipe |" in md
    assert "| torch_npu | not installed |" in md


@pytest.mark.parametrize("statuses,code", [((st.PASSED, st.SKIPPED), 0), ((st.PASSED, st.FAILED), 1)])
def test_exit_status_is_1_only_when_a_check_failed(monkeypatch, tmp_path, capsys, statuses, code):
    monkeypatch.setattr(st, "run", lambda device=None: _result(list(statuses)))
    report = tmp_path / "selftest.md"
    args = type("A", (), {"device": "cpu", "json": True, "report": str(report)})()
    assert st.main(args) == code
    assert json.loads(capsys.readouterr().out)["ok"] is (code == 0)
    assert report.read_text().startswith("# torch-npu-inductor-patches selftest")


def test_cli_offers_the_selftest_with_its_options():
    proc = subprocess.run([sys.executable, "-m", "torch_npu._inductor.patchset", "selftest", "--help"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for option in ("--device", "{npu,cuda,cpu}", "--json", "--report"):
        assert option in proc.stdout


def test_aot_wrapper_must_carry_the_helper_once_and_no_path_of_this_machine():
    from torch_npu._inductor.patchset import launch_codegen as lc

    good = "\n".join(["#include <torch_npu/csrc/inductor/aoti_include/npu.h>", *lc.helper_inline_lines(),
                      "static inline void call_k() {}"])
    assert st.aot_source_problems("m.cpp", good) == []
    absolute = good.replace("#include <torch_npu", f'#include "{lc.HELPER_DIR / lc.HELPER_HEADER}"\n#include <torch_npu', 1)
    assert any("by this machine's path" in p for p in st.aot_source_problems("m.cpp", absolute))
    twice = good + "\n" + lc.INLINE_BEGIN
    assert st.aot_source_problems("m.cpp", twice) == ["m.cpp carries the inlined helper 2 times (want 1)"]
    assert st.aot_source_problems("m.cpp", "static inline void call_k() {}") == [
        "m.cpp carries the inlined helper 0 times (want 1)"]


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_aot_check_runs_on_an_npu_only_and_says_why(device):
    outcome = st._run_check("aot-package", lambda: st.check_aot(device))
    assert outcome.status == st.SKIPPED and "torch_npu's" in outcome.detail and device in outcome.detail
