"""The two launch patches (and the Flex grid) against the REAL torch_npu Inductor code of released wheels.

Each version runs ``tooling/releases/wheel_harness.py`` in its own interpreter (the
stand-ins replace ``torch_npu``): the real ``NPUCachingAutotuner.save_gpu_kernel``
saves every sample kernel, the real ``DeferredNpuTritonCallWrapper`` /
``CppWrapperNpu`` render its launcher, before and after ``patchset.apply()``.
The patched launchers are then compiled against the host ACL simulation and
run with the probe kernel. Releases of the older layout (C++ wrapper in
``codegen/cpp_wrapper.py``, launch through CANN's legacy ``rtKernelLaunch``;
2.7.1.post6 on this leg) go through the same steps; their launchers compile
against this file's stand-in for that legacy runtime call, which forwards to the
simulation's ``aclrtLaunchKernelWithHostArgs``.

Wheels are cached in ~/.cache/torch-npu-inductor-patches/wheels (downloaded
with pip on first use). A version that cannot be had fails the test with the
reason; only an unreachable package index skips, and says so. A wheel runs on
its own torch line only (2.7.1.* on torch 2.7.1, 2.14.0 on torch 2.14 with
triton installed): each CI leg covers the wheels of its torch.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torch_npu._inductor.patchset.launch_codegen import LAUNCH_MEMORY
from torch_npu._inductor.patchset.launch_plan import plan_from_metadata, plan_from_params
from torch_npu._inductor.patchset.tooling.releases import real_artifacts, rendered
from torch_npu._inductor.patchset.tooling.sim import build as sim_build
from torch_npu._inductor.patchset.tooling.sim import harness as sim_harness
from torch_npu._inductor.patchset.tooling.sim import launcher_writer as lc
from torch_npu._inductor.patchset.tooling.sim.samples import SAMPLES

HARNESS = Path(real_artifacts.__file__).with_name("wheel_harness.py")
NO_FIX, FIXED, LEGACY = "2.7.1.post10", "2.7.1.post11", "2.7.1.post6"
NEWEST = "2.14.0"  # the newest release (CI's second leg): post11's launch code, newer torch's wrapper API
_cache: dict = {}


def needs_matching_torch(version: str) -> None:
    """torch_npu X.Y.* is built for torch X.Y; its Inductor code imports torch X.Y's internals."""
    import importlib.util

    import torch

    line = ".".join(version.split(".")[:2])
    if ".".join(torch.__version__.split("+")[0].split(".")[:2]) != line:
        pytest.skip(f"torch_npu {version} wheels run on torch {line} only; this interpreter has torch {torch.__version__}")
    if version == NEWEST and importlib.util.find_spec("triton") is None:
        pytest.fail(f"torch_npu {version}'s Inductor code imports triton; test/requirements-torch2.14.1.txt installs it")


def needs_torch_271() -> None:
    needs_matching_torch(FIXED)


def harness(version: str, tmp_path_factory, soc: int = 220) -> dict:
    """The harness's JSON for ``version``, rendered for a stand-in device of SoC ``soc``
    (220: Ascend 910B1; 260: Ascend 950, where SIMT-only kernels are honoured): the one rendering of
    that input per run, which the real-artifact tier, the AOT tests and the demo share."""
    needs_matching_torch(version)
    if (version, soc) not in _cache:
        try:
            _cache[(version, soc)] = real_artifacts.harness_json(version, sys.executable, soc=soc)
        except real_artifacts.TierError as exc:
            pytest.fail(f"harness for torch-npu=={version}: {exc}")
    data = _cache[(version, soc)]
    if not data.get("loaded"):
        if data.get("index_unreachable"):
            pytest.skip(f"package index unreachable, torch-npu=={version} not cached: {data['error']}")
        pytest.fail(f"torch-npu=={version} could not be loaded: {data.get('error')}")
    if data.get("error"):
        pytest.fail(f"torch-npu=={version}: {data['error']}")
    return data


def rows(data):
    return {r["id"]: r for r in data["status"]}


def sample_site(s, data: dict | None = None, cpp: str = "") -> lc.LaunchSite:
    # The stand-in device is an Ascend 910B (not 950): torch_npu ignores force_simt_only there.
    if data is not None and data.get("launch_api") == "rtKernelLaunch":
        # Older layout: never clamps the block count; from 2.7.1 .. post2 and 2.8 on, FFTS unconditionally.
        return lc.LaunchSite(block_clamp=None, has_ffts="void* ffts_addr __attribute__" in cpp, simt_only=False)
    return lc.LaunchSite(block_clamp=s.block_clamp, has_ffts=s.has_ffts, simt_only=False)


def run_rendered(version: str, s, entry: dict, data: dict) -> dict:
    """Compile the launcher torch_npu rendered (patched) with the probe kernel; run it twice, through the
    simulated task queue (the release matrix's glue: loadKernel hands out the probe kernel)."""
    plan = plan_from_metadata(s.metadata, kernel=f"{s.kernel}_patched")
    site = sample_site(s, data, entry["cpp"])
    args = lc.args_from_signature("*fp32,*fp32,i32")  # the harness kernel's own arguments
    grid = (math.prod(s.grid), 1, 1)  # Grid1D (GridNpu in the older layout), XBLOCK=64: numel = 64 * grid_0
    call = rendered.rendered_call(entry["cpp"], f"call_{s.kernel}_patched", grid[0])
    cpp = rendered.rendered_source(entry["cpp"], data.get("launch_api") == "rtKernelLaunch")
    src = sim_harness.harness_source(plan, site, args, grid, launcher_cpp=cpp, call=call)
    exe = sim_build.compile_program(src, f"upstream-{version}-{s.key}")
    return sim_harness.judge(plan, site, grid, sim_harness.run_program(exe))


# ---- 2.7.1.post10: no upstream fix (NULL pointers) ------------------------------------------
def test_post10_status_applied(tmp_path_factory):
    data = harness(NO_FIX, tmp_path_factory)
    r = rows(data)
    assert data["layout"] == "cpp_wrapper_npu" and not data["import_errors"]
    assert r["kernel-sync-metadata"]["state"] == "applied", r
    assert r["cpp-wrapper-sync-resources"]["state"] == "applied", r
    assert "NULL" in r["cpp-wrapper-sync-resources"]["note"]
    assert LAUNCH_MEMORY in r["cpp-wrapper-sync-resources"]["note"]  # the status says today's launch rule


def test_post10_unpatched_passes_null(tmp_path_factory):
    data = harness(NO_FIX, tmp_path_factory)
    up = data["upstream"]["both"]
    assert "error" not in up, up.get("traceback")
    assert up["params_plan"] is None and "workspace_size" not in up["params_raw"]
    assert "void* workspace_addr = NULL;" in up["cpp"] and "void* sync_block_lock = NULL;" in up["cpp"]
    assert "LaunchMemory" not in up["cpp"] and "npu_sync_" not in up["cpp"]


@pytest.mark.parametrize("version", [NO_FIX, FIXED, NEWEST, LEGACY])
@pytest.mark.parametrize("s", SAMPLES, ids=[s.key for s in SAMPLES])
def test_patched_params_and_cpp(version, s, tmp_path_factory):
    data = harness(version, tmp_path_factory)
    entry = data["patched"][s.key]
    assert "error" not in entry, entry.get("traceback")
    plan = plan_from_metadata(s.metadata, kernel=f"{s.kernel}_patched")
    if version in (FIXED, NEWEST):  # upstream records the raw fields: one source, no stored copy
        assert entry["params_plan"] is None
        assert plan_from_params(entry["params_raw"], plan.kernel).lock_layout == plan.lock_layout
    else:
        assert entry["params_plan"] == plan.to_dict()
    cpp = entry["cpp"]
    assert "NULL;" not in cpp.replace("ffts_addr = NULL;", "")
    assert "allocate_workspace" not in cpp and "aclrtMemcpy(" not in cpp and "std::vector<int64_t>" not in cpp
    needs = plan.needs_resources
    assert cpp.count("torch_npu::inductor::LaunchMemory npu_sync_memory(") == (1 if needs else 0)
    # taken before the lambda, only plain values inside it, held until its kernel has finished:
    # handed over right after the queue call, never given back there
    before, rest = cpp.split("auto launch_call", 1)
    in_lambda, after = rest.split("launchKernel(", 1)
    assert ("LaunchMemory" in before) == needs and "npu_sync_memory" not in in_lambda
    ours = [ln.strip() for ln in in_lambda.splitlines() if "npu_sync_" in ln or "sync_block_lock =" in ln]
    assert ours[0].startswith(("aclError npu_sync_status = npu_sync_regions.write_locks(",
                               "void* sync_block_lock = npu_sync_regions.locks;")) == needs
    assert after.splitlines()[1].strip().startswith("npu_sync_memory.handed();") == needs
    assert "npu_sync_memory.release();" not in cpp
    assert lc.MARKER in cpp
    assert ("ffts_addr" in cpp) == s.has_ffts
    if data["launch_api"] == "rtKernelLaunch":  # older layout: no clamp anywhere, the launch call untouched
        assert "std::min(" not in cpp and cpp.count("rtKernelLaunch(") == 1
        up = data["upstream"][s.key]["cpp"].replace("_upstream", "_patched")
        launch = [ln for ln in up.splitlines() if "rtKernelLaunch(" in ln]
        assert launch and launch == [ln for ln in cpp.splitlines() if "rtKernelLaunch(" in ln]
    elif s.block_clamp and plan.needs_resources:
        assert f"static_cast<uint32_t>({data['num_vector_core']})" in cpp
    assert f'#include "{Path(sim_build.CSRC, lc.HELPER_HEADER)}"' in entry["include"]


# 2.7.1.post6, post10 and post11 run their patched launchers on their own runtime (test_real_runtime.py); 2.14.0
# cannot run here (no CPU build of its torch; the CUDA build aborts torch_npu's import), so it runs in the simulation.
@pytest.mark.parametrize("version", [NEWEST])
@pytest.mark.parametrize("s", SAMPLES, ids=[s.key for s in SAMPLES])
def test_patched_launcher_runs_in_simulation(version, s, tmp_path_factory):
    data = harness(version, tmp_path_factory)
    result = run_rendered(version, s, data["patched"][s.key], data)
    assert result["ok"], result
    plan = plan_from_metadata(s.metadata, kernel=s.kernel)
    # the first launch takes the block, the next ones reuse the thread's kept block
    calls = [x["allocator_calls"] for x in result["launches"]]
    assert calls == ([1] + [0] * (len(calls) - 1) if plan.needs_resources and not s.metadata.get("force_simt_only")
                     else [0] * len(calls)), calls
    for launch in result["launches"]:
        assert launch["sync_copies"] == 0 and not launch["regions_overlap"]


@pytest.mark.parametrize("version", [NO_FIX, FIXED, NEWEST, LEGACY])
def test_second_apply_changes_nothing(version, tmp_path_factory):
    data = harness(version, tmp_path_factory)
    assert data["changed_by_second_apply"] == []
    again = rows({"status": data["status_again"]})
    assert again["cpp-wrapper-sync-resources"]["state"] == "applied"
    assert again["cpp-wrapper-sync-resources"]["note"] == "already applied"


# ---- 2.7.1.post11 and 2.14.0: upstream's fix (two allocate_workspace + blocking aclrtMemcpy) -----
@pytest.mark.parametrize("version", [FIXED, NEWEST])
def test_status_says_it_replaced_upstream_allocation(version, tmp_path_factory):
    data = harness(version, tmp_path_factory)
    r = rows(data)
    assert r["kernel-sync-metadata"]["state"] == "upstream-has-fix"
    assert "records the raw sync fields workspace_size, lock_num" in r["kernel-sync-metadata"]["reason"]
    assert r["cpp-wrapper-sync-resources"]["state"] == "applied"
    assert "replaced upstream's allocation" in r["cpp-wrapper-sync-resources"]["note"]
    assert LAUNCH_MEMORY in r["cpp-wrapper-sync-resources"]["note"]
    # 2.13.0 and later add includes through the instance method: the alternative hook set was used.
    include_hook = "add_device_include" if version == NEWEST else "get_device_include_path"
    assert any(t.endswith(f"CppWrapperNpu.{include_hook}") for t in r["cpp-wrapper-sync-resources"]["targets"])


@pytest.mark.parametrize("version", [FIXED, NEWEST])
def test_unpatched_has_the_double_allocation(version, tmp_path_factory):
    data = harness(version, tmp_path_factory)
    up = data["upstream"]["both"]
    assert "error" not in up, up.get("traceback")
    assert up["params_raw"]["workspace_size"] == 1024 and up["params_raw"]["lock_num"] == 4
    assert up["cpp"].count("at_npu::native::allocate_workspace(") == 2
    assert "aclrtMemcpy(" in up["cpp"]
    packed = data["upstream"]["packed-mix"]["cpp"]
    assert "sync_block_lock_participant_factor =\n            2;" in packed or "participant_factor" in packed


# ---- Ascend 950 stand-in: SIMT-only kernels get no sync fields, before and after ----------------
@pytest.mark.parametrize("version", [FIXED, NEWEST])
def test_simt_only_launch_is_left_alone_on_ascend950(version, tmp_path_factory):
    data = harness(version, tmp_path_factory, soc=260)
    assert rows(data)["cpp-wrapper-sync-resources"]["state"] == "applied"
    up, ours = data["upstream"]["simt-only"], data["patched"]["simt-only"]
    assert "error" not in up and "error" not in ours, (up.get("traceback"), ours.get("traceback"))
    for cpp in (up["cpp"], ours["cpp"]):
        assert "sync_block_lock" not in cpp and "workspace_addr" not in cpp
        assert "LaunchMemory" not in cpp and "allocate_workspace" not in cpp
    assert ours["cpp"].replace("_patched", "") == up["cpp"].replace("_upstream", "")  # untouched
    assert ours["params_plan"] is None  # upstream records the fields; the plan is made at render time
    both = data["patched"]["both"]  # a SIMD kernel on the same device still gets its resources
    assert "error" not in both and both["cpp"].count("LaunchMemory npu_sync_memory(") == 1


# ---- 2.7.1.post6: the older layout (codegen/cpp_wrapper.py, rtKernelLaunch) has the bug too ------------
def test_post6_status_applied_through_the_older_layout(tmp_path_factory):
    data = harness(LEGACY, tmp_path_factory)
    assert data["layout"] == "legacy" and data["launch_api"] == "rtKernelLaunch" and not data["import_errors"]
    r = rows(data)
    for pid in ("kernel-sync-metadata", "cpp-wrapper-sync-resources"):
        assert r[pid]["state"] == "applied", r[pid]
    assert all(".npu_triton_heuristics:" in t for t in r["kernel-sync-metadata"]["targets"])
    assert {t.split(":")[1] for t in r["cpp-wrapper-sync-resources"]["targets"]} == {
        "CppWrapperNpu.generate_args_decl", "CppWrapperNpu.write_header",
        "DeferredNpuTritonCallWrapper.generate_launch_kernel"}
    assert all(t.startswith("torch_npu._inductor.codegen.cpp_wrapper:") for t in r["cpp-wrapper-sync-resources"]["targets"])
    assert "rtKernelLaunch" in r["cpp-wrapper-sync-resources"]["note"]
    assert LAUNCH_MEMORY in r["cpp-wrapper-sync-resources"]["note"]


def test_post6_import_hooks_patch_the_older_layout():
    """As on a real install: the entry point arms its hooks, importing the wheel's codegen/cpp_wrapper.py
    (which imports npu_triton_heuristics.py) applies both launch patches, with no explicit apply()."""
    needs_torch_271()
    code = (
        "import torch_npu_patchset_autoload as a\n"
        "a.autoload()\n"
        "from torch_npu._inductor.patchset.tooling.releases import wheels as uw\n"
        f"uw.install_stand_ins(uw.extracted_tree({LEGACY!r}))\n"
        "import importlib\n"
        "importlib.import_module('torch_npu._inductor.codegen.cpp_wrapper')\n"
        "from torch_npu._inductor.patchset import _applier\n"
        "import json\n"
        "print(json.dumps({r.id: [r.state, list(r.targets)] for r in _applier.status()}))\n"
    )
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["kernel-sync-metadata"][0] == "applied" and ".npu_triton_heuristics:" in got["kernel-sync-metadata"][1][0]
    assert got["cpp-wrapper-sync-resources"][0] == "applied"
    assert got["cpp-wrapper-sync-resources"][1][0].startswith("torch_npu._inductor.codegen.cpp_wrapper:")


def test_post6_unpatched_passes_null_to_rt_kernel_launch(tmp_path_factory):
    data = harness(LEGACY, tmp_path_factory)
    for key, up in data["upstream"].items():
        assert "error" not in up, (key, up.get("traceback"))
        assert up["params_plan"] is None and not up["params_raw"]
        assert "void* workspace_addr = NULL;" in up["cpp"] and "void* sync_block_lock = NULL;" in up["cpp"]
        assert "rtKernelLaunch(" in up["cpp"] and "LaunchMemory" not in up["cpp"]
        assert lc.HELPER_HEADER not in up["include"]


def test_flex_backward_template_the_npu_compiles(tmp_path_factory):
    """2.7.1.post6 and post10 lower Flex Attention with torch_npu's own template (torch's plain grid):
    that one is patched. post11 uses torch's template with torch_npu's own SymbolicGridFn: left alone."""
    for version in (LEGACY, NO_FIX):
        flex = harness(version, tmp_path_factory)["flex"]
        assert flex["template"] == "torch_npu._inductor.kernel.flex_attention.flex_attention_backward_template", flex
        assert flex["grid_is_symbolic"] is False and flex["patched"] is True and flex["grid_is_symbolic_after"] is True
        assert rows(harness(version, tmp_path_factory))["npu-flex-attention-backward-grid"]["state"] == "applied"
    flex = harness(FIXED, tmp_path_factory)["flex"]
    assert flex["template"].endswith(".upstream_flex_attention_backward_template") and flex["own_template"]
    assert flex["grid_is_symbolic"] is True and flex["patched"] is False
    assert rows(harness(FIXED, tmp_path_factory))["npu-flex-attention-backward-grid"]["state"] == "upstream-has-fix"


def test_status_against_wheel_reports_versions():
    from torch_npu._inductor.patchset.tooling.releases import wheels as upstream_wheels

    needs_torch_271()
    data = upstream_wheels.status_in_subprocess(FIXED)
    if not data["ok"] and data.get("index_unreachable"):
        pytest.skip(f"package index unreachable: {data['error']}")
    assert data["ok"], data
    r = {p["id"]: p for p in data["patches"]}
    assert r["cpp-wrapper-sync-resources"]["state"] == "applied"
    assert "replaced upstream's allocation" in r["cpp-wrapper-sync-resources"]["note"]
    assert LAUNCH_MEMORY in r["cpp-wrapper-sync-resources"]["note"]
    assert any("torch_npu (package object" in s for s in data["stand_ins"])
    missing = upstream_wheels.status_in_subprocess("2.7.1.post999", timeout=300)
    assert not missing["ok"] and "2.7.1.post999" in missing["error"]


def status_command(version: str) -> str:
    """stdout of the user-facing ``status --against-wheel VERSION``."""
    proc = subprocess.run(
        [sys.executable, "-m", "torch_npu._inductor.patchset", "status", "--against-wheel", version],
        capture_output=True, text=True, timeout=900,
    )
    if proc.returncode != 0 and "index" in proc.stderr and "unreachable" in proc.stderr:
        pytest.skip(f"package index unreachable: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def status_row(pid: str, state: str) -> str:
    """A row of the status table: its id column is as wide as the longest patch id, plus two."""
    from torch_npu._inductor.patchset import _declarations

    return f"{pid:<{max(len(d.id) for d in _declarations.load()) + 2}}{state}"


def test_status_command_against_wheels():
    """The user-facing command: post11 replaced, post6 (older layout) patched too."""
    needs_torch_271()
    runs = {version: status_command(version) for version in (FIXED, LEGACY)}
    assert f"torch_npu      {FIXED} (wheel code" in runs[FIXED]
    assert status_row("cpp-wrapper-sync-resources", "applied") in runs[FIXED]
    assert "replaced upstream's allocation" in runs[FIXED]
    for pid in ("kernel-sync-metadata", "cpp-wrapper-sync-resources", "npu-flex-attention-backward-grid"):
        assert status_row(pid, "applied") in runs[LEGACY], runs[LEGACY]
    # the status against a wheel loads its Inductor code only: torch_npu.npu (empty_cache's patch) is not there
    assert runs[LEGACY].count("target-missing") == 1, runs[LEGACY]
    assert status_row("npu-empty-cache-launch-memory", "target-missing") in runs[LEGACY], runs[LEGACY]


def test_status_command_against_the_newest_wheel():
    """torch 2.14 + torch_npu 2.14.0: the launch fix applies through the newer wrapper API, upstream
    records the sync fields itself, and the Flex grid is torch's own."""
    needs_matching_torch(NEWEST)
    out = status_command(NEWEST)
    assert f"torch_npu      {NEWEST} (wheel code" in out and "autoload failure" not in out
    assert status_row("kernel-sync-metadata", "upstream-has-fix") in out
    assert status_row("cpp-wrapper-sync-resources", "applied") in out and "add_device_include" in out
    assert status_row("flex-attention-backward-symbolic-grid", "upstream-has-fix") in out


# ---- unknown shapes are refused without touching anything (no wheel needed) -------------------
def _fake_cpp_wrapper_module(args_decl_src: str):
    import types

    ns: dict = {}
    exec(args_decl_src, ns)  # defines generate_args_decl; inspect cannot read exec'd source -> unknown

    class CppWrapperNpu:
        generate_args_decl = ns["generate_args_decl"]

        @staticmethod
        def get_device_include_path(device):
            return ""

    class DeferredNpuTritonCallWrapper:
        def generate_launch_kernel(self, prefix, wrapper, kernel_var_name, params):
            pass

    mod = types.ModuleType("fake_cpp_wrapper_npu")
    mod.CppWrapperNpu, mod.DeferredNpuTritonCallWrapper = CppWrapperNpu, DeferredNpuTritonCallWrapper
    return mod


@pytest.mark.parametrize(
    "src,words",
    [
        ("def generate_args_decl(self, code, call_args, arg_types):\n    return ''\n", "is not (code, call_args"),
        ("def generate_args_decl(self, code, call_args, arg_types, arg_signatures, is_triton_kernel=True,"
         " force_simt_only=False):\n    return ''\n", "source"),
    ],
)
def test_unknown_shape_is_unrecognised(src, words):
    from torch_npu._inductor.patchset._patching import UNRECOGNISED
    from torch_npu._inductor.patchset.fixes import cpp_wrapper_sync_resources as fix

    mod = _fake_cpp_wrapper_module(src)
    before = dict(vars(mod.CppWrapperNpu))
    verdict = fix.probe({fix.MODULE: mod})
    assert verdict.verdict == UNRECOGNISED and words in verdict.reason
    assert dict(vars(mod.CppWrapperNpu)) == before


# ---- every release of the older layout: the hooks on that release's own code ------------------------
# 2.8.0.post5, 2.9.1, 2.11.0.post3 and 2.12.0.post3 import their own torch line's internals, so the
# harness cannot load them on this leg (the release-matrix script renders them on their torch). Here,
# the members the hooks touch are taken from each wheel's own source (ast, at test time), put in a
# module with stand-ins for the few names they use, probed, patched and rendered; the launch lambda
# then runs in the simulation through the legacy-runtime stand-ins above.
OLDER_RELEASES = ["2.7.1", "2.7.1.post2", "2.7.1.post4", LEGACY, "2.8.0.post5", "2.9.1", "2.11.0.post3",
                  "2.12.0.post3"]
_OLDER_MEMBERS = {
    ("codegen/cpp_wrapper.py", "CppWrapperNpu"): ("generate_args_decl", "generate_debug_str", "write_header"),
    ("codegen/cpp_wrapper.py", "DeferredNpuTritonCallWrapper"): ("generate_launch_kernel",),
    ("npu_triton_heuristics.py", "NPUCachingAutotuner"): ("save_gpu_kernel", "save_npu_kernel"),
}
_OLDER_PRELUDE = '''from __future__ import annotations
import types
from itertools import count, zip_longest
import sympy
from torch import dtype as torch_dtype
from torch._inductor.codegen.cpp_utils import cexpr
from torch._inductor.codegen.wrapper import SymbolicCallArg
from torch._inductor.utils import IndentedBuffer
# stand-ins for the few other names the extracted members use
maybe_hipify_code_wrapper = lambda text: text
npu_config = types.SimpleNamespace(aot_inductor=types.SimpleNamespace(debug_kernel=False))
V = types.SimpleNamespace(graph=types.SimpleNamespace(is_const_graph=False, aot_mode=False))
def triton_support_ffts():
    return True
def config_to_dict(cfg):
    return dict(cfg.kwargs)
class UnwrapUnspecArg:
    pass
'''


def older_layout_module(version: str, tmp_path):
    """A module holding ``version``'s own CppWrapperNpu / DeferredNpuTritonCallWrapper /
    NPUCachingAutotuner members the hooks touch (source taken from the wheel)."""
    import ast
    import importlib.util
    import textwrap

    from torch_npu._inductor.patchset.tooling.releases import wheels as uw

    try:
        tree = uw.extracted_tree(version) / "torch_npu" / "_inductor"
    except uw.WheelUnavailable as exc:
        if exc.index_unreachable:
            pytest.skip(f"package index unreachable: {exc}")
        raise
    out = [_OLDER_PRELUDE]
    for (rel, cls), members in _OLDER_MEMBERS.items():
        text = (tree / rel).read_text()
        node = next(n for n in ast.parse(text).body if isinstance(n, ast.ClassDef) and n.name == cls)
        out.append(f"class {cls}:")
        for fn in node.body:
            if isinstance(fn, ast.FunctionDef) and fn.name in members:
                out.append(textwrap.indent(textwrap.dedent(ast.get_source_segment(text, fn, padded=True)), "    "))
        out.append("")
    path = tmp_path / f"older_layout_{version.replace('.', '_')}.py"
    path.write_text("\n".join(out))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # inspect.getsource reads the file: the probes see the real source
    return mod


@pytest.mark.parametrize("version", OLDER_RELEASES)
def test_older_layout_hooks_on_each_releases_own_code(version, tmp_path, monkeypatch):
    import types

    import torch
    from torch._inductor.codecache import CudaKernelParamCache
    from torch._inductor.codegen.wrapper import SymbolicCallArg  # noqa: F401
    from torch._inductor.utils import IndentedBuffer

    from torch_npu._inductor.patchset._patching import NEEDED, Patcher
    from torch_npu._inductor.patchset.fixes import cpp_wrapper_rt_launch as rt_fix
    from torch_npu._inductor.patchset.fixes import cpp_wrapper_sync_resources as cw_fix
    from torch_npu._inductor.patchset.fixes import kernel_sync_metadata as meta_fix

    needs_torch_271()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    mod = older_layout_module(version, tmp_path)
    cw_modules = {rt_fix.MODULE: mod}
    meta_modules = {meta_fix.OLDER_MODULE: mod}
    # Feature detection: both launch patches recognise this release's code, and apply through the same entry
    # points the applier uses (the declaration's implementation modules).
    assert cw_fix.probe(cw_modules).verdict == NEEDED, cw_fix.probe(cw_modules)
    assert meta_fix.probe(meta_modules).verdict == NEEDED, meta_fix.probe(meta_modules)
    patcher = Patcher()
    assert "rtKernelLaunch" in cw_fix.apply(cw_modules, patcher)
    meta_fix.apply(meta_modules, patcher)
    assert cw_fix.probe(cw_modules).reason == "already patched" and cw_fix.apply(cw_modules, Patcher()) == "already applied"

    by_key = {s.key: s for s in SAMPLES}
    data = {"launch_api": "rtKernelLaunch"}
    for key in ("both", "unordered-only"):
        s = by_key[key]
        name = f"{s.kernel}_patched"
        signature = {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "x0_numel": "i32"}
        # the release's own save path records the plan
        tuner = mod.NPUCachingAutotuner()
        tuner.inductor_meta, tuner.triton_meta = {"kernel_name": name}, {"signature": signature, "constants": {}}
        fields = dict(s.metadata, name=f"{s.kernel}_mangled", mix_mode=s.metadata.get("mix_mode", "aiv"),
                      parallel_mode="simd", force_simt_only=False, shared=1, num_warps=1)
        launcher = types.SimpleNamespace(
            bin=types.SimpleNamespace(metadata=types.SimpleNamespace(**fields), asm={"npubin": b"\x7fstand-in"},
                                      num_warps=1, shared=1),
            config=types.SimpleNamespace(kwargs={"XBLOCK": 64}), def_args=list(signature), call_args=list(signature))
        tuner.save_gpu_kernel(0, launcher)
        params = CudaKernelParamCache.get(name)
        plan = plan_from_metadata(s.metadata, kernel=name)
        assert params["npu_sync_plan"] == plan.to_dict()
        # the release's own launch code, patched
        wrapper = mod.CppWrapperNpu()
        wrapper.arg_var_id, wrapper.visited_raii_handle, wrapper.visited_handle_for_kernel_id = __import__("itertools").count(), set(), {}
        wrapper.device_codegen = types.SimpleNamespace(cpp_device_ptr=lambda: "void*")
        deferred = mod.DeferredNpuTritonCallWrapper()
        deferred.kernel_name, deferred.kernel_id = name, 0
        deferred.arg_types = [torch.float32, torch.float32, int]
        prefix = IndentedBuffer()
        with prefix.indent():
            deferred.generate_launch_kernel(prefix, wrapper, name, params)
        body = prefix.getvalue()
        assert "= NULL;" not in body.replace("ffts_addr = NULL;", "") and body.count("rtKernelLaunch(") == 1
        assert body.count("LaunchMemory npu_sync_memory(") == 1 and "std::min(" not in body
        assert body.index("LaunchMemory npu_sync_memory(") < body.index("auto launch_call")
        assert body.index("auto launch_call") < body.index("npu_sync_regions.write_locks(") < body.index("launchKernel(")
        assert body.index("launchKernel(") < body.index("npu_sync_memory.handed();")
        cpp = (f"static void* {name} = nullptr;\n"
               f"template <typename T0, typename T1>\nstatic inline void call_{name}(const T0& in_ptr0, const T1& out_ptr0,"
               f" int64_t x0_numel, aclrtStream stream_) {{\n"
               f"    uint32_t grid_0 = (x0_numel + 63) / 64; uint32_t grid_1 = 1; uint32_t grid_2 = 1;\n"
               f"    {name} = loadKernel(\"stand-in\", \"{s.kernel}\", 1, std::nullopt);\n{body}}}\n")
        result = run_rendered(version, s, {"cpp": cpp}, data)
        assert result["ok"], result
        # the first launch takes the block, the next ones reuse the thread's kept block
        assert [x["allocator_calls"] for x in result["launches"]] == [1] + [0] * (len(result["launches"]) - 1)
        for launch in result["launches"]:
            assert launch["sync_copies"] == 0 and not launch["regions_overlap"]
        # the header: upstream's, then the helper's include
        wrapper.header = IndentedBuffer()
        wrapper.super_write_header_rewrite = lambda: wrapper.header.splice("// upstream header")  # noqa: B023
        wrapper.device_codegen = types.SimpleNamespace(abi_compatible_header=lambda: "", kernel_driver=lambda: "")
        wrapper.write_header()
        assert f'#include "{Path(sim_build.CSRC, lc.HELPER_HEADER)}"' in wrapper.header.getvalue()
    patcher.rollback()
    assert cw_fix.probe(cw_modules).reason != "already patched"


@pytest.mark.parametrize("version", [NO_FIX, FIXED, NEWEST, LEGACY])
def test_aot_launch_lambda_patch_reads_each_layout(version, tmp_path_factory):
    """aot-npu-launch-lambda applies only where torch's generate goes lazy in aot_mode (2.14.0 on torch 2.14);
    everywhere else it says why the aot_mode launches already are torch_npu's lambda, the older layout's
    class of its own included (it once read that as an unknown layout)."""
    row = rows(harness(version, tmp_path_factory))["aot-npu-launch-lambda"]
    assert row["state"] == ("applied" if version == NEWEST else "upstream-has-fix"), row
