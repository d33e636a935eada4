"""AOTInductor (aot_mode): the same fix in the launchers an AOT model compiles, portable packages.

* The real-artifact tier in aot_mode (``real_artifacts check --aot``): every sample launcher
  rendered with ``V.graph.aot_mode`` by the wheel's own classes (both launcher layouts), under the
  wheel's real AOT header, compiled against its headers and linked with ``-Wl,--no-undefined``.
* The AOT header carries the helper's text: no include path of this machine; a package laid out
  as torch's ``package_cpp_only`` lays it out builds after being moved elsewhere.
* The aot_mode launchers run on the release's own runtime (``real_runtime.build(aot=True)``: its
  libtorch_npu.so, task queue and caching allocator, over the host ACL library) in processes that never
  imported the patch set, with every TASK_QUEUE_ENABLE value: clean, and each launch gets what the JIT
  launcher gets. Where a release cannot run here (2.14.0), and for what only the simulation can do (an
  injected fault; two libraries from different helper texts in one C++ host), they are built into a
  shared library and run in a C++ host in the host ACL simulation.

Each CI leg covers the wheels of its torch line (rendering needs the wheel's own torch).
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import release_wheels
from test_real_artifacts import MALLOC_WITH_STREAM, needs_matching_torch, scratch_helper, tier

from torch_npu._inductor.patchset import launch_codegen as lc
from torch_npu._inductor.patchset.tooling.releases import aot_artifacts, aot_sim, release_matrix, rendered
from torch_npu._inductor.patchset.tooling.releases import real_artifacts as ra
from torch_npu._inductor.patchset.tooling.releases import real_runtime as rr
from torch_npu._inductor.patchset.tooling.sim.samples import SAMPLES

#: 2.7.1.post6: the older codegen/cpp_wrapper.py layout; post10: NULL pointers; post11: upstream's
#: allocation replaced; 2.14.0 (the 2.14 leg): upstream's allocation, and torch 2.14's lazy-compile
#: launch in aot_mode, both replaced (aot-npu-launch-lambda keeps torch_npu's launch lambda).
AOT_WHEELS = ("2.7.1.post6", "2.7.1.post10", "2.7.1.post11", "2.14.0")
SAMPLE = {s.key: s for s in SAMPLES}


def harness(version: str, aot: bool) -> dict:
    needs_matching_torch(version)
    return ra.harness_json(version, sys.executable, aot=aot)


def aot_tier(version: str, helper: Path | None = None) -> ra.TierResult:
    return tier(version, helper, aot=True)


# ---- the real-artifact tier in aot_mode ----------------------------------------------------------
@pytest.mark.parametrize("version", AOT_WHEELS)
def test_aot_launchers_link_against_the_real_wheel(version):
    r = aot_tier(version)
    assert r.ok, r.message
    assert r.info["aot_mode"] and "rendered in aot_mode" in r.message, r.message
    assert sorted(r.info["launchers"]) == sorted(SAMPLE)
    npu = {pretty for _, pretty, p in r.accounting if p == "libtorch_npu.so"}
    assert "c10_npu::NPUCachingAllocator::allocator" in npu, npu  # the caching allocator, through its exported pointer
    assert "NONE" not in {p for _, _, p in r.accounting}
    assert not any("allocate_workspace" in pretty or "malloc_with_stream" in pretty for _, pretty, _ in r.accounting)


def test_aot_check_command_says_it_rendered_in_aot_mode():
    needs_matching_torch("2.7.1.post10")
    proc = subprocess.run([sys.executable, "-m", "torch_npu._inductor.patchset.tooling.releases.real_artifacts", "check", "--aot",
                           "2.7.1.post10"], capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "torch_npu 2.7.1.post10: rendered in aot_mode; compiled (c++17) and linked with --no-undefined" in proc.stdout


def test_aot_malloc_with_stream_put_back_fails_at_link():
    r = aot_tier("2.7.1.post10", helper=scratch_helper())
    assert not r.ok and r.stage == "link", r.message
    assert "(aot_mode)" in r.message and MALLOC_WITH_STREAM in r.message, r.message
    assert [p for _, p in r.unresolved] == [MALLOC_WITH_STREAM], r.unresolved


def test_the_2_14_line_ships_an_aot_launch_that_does_not_compile():
    """torch_npu 2.14.0 on torch 2.14, as shipped: in aot_mode its generate turns autotune_at_compile_time
    off and torch's generate writes its lazy-compile launch, which does not compile against the wheel."""
    h = harness("2.14.0", aot=True)
    assert h["aot_lazy_compile"] and "lazy-compile launch" in h["aot_lazy_compile"], h.get("aot_lazy_compile")
    shipped = h["upstream"]["both"]["cpp"]
    assert "LazyKernelCompileResult" in shipped and "launch_call" not in shipped
    assert "void* workspace_addr = NULL;" in shipped  # torch_npu's statements, inside torch's kernel_args_[]
    r = ra.build("2.14.0", python=sys.executable, aot=True, upstream=True)
    assert not r.ok and r.stage == "compile", r.message
    assert "LazyKernelCompileResult" in r.message, r.message


def test_the_2_14_line_aot_launches_are_torch_npus_lambda_with_the_fix():
    h = harness("2.14.0", aot=True)
    rows = {r["id"]: r for r in h["status"]}
    assert rows["aot-npu-launch-lambda"]["state"] == "applied", rows["aot-npu-launch-lambda"]
    for key, entry in h["patched"].items():
        cpp = entry["cpp"]
        assert "LazyKernelCompileResult" not in cpp and "kernel_args_[]" not in cpp, key
        assert "kernels_type_& kernels_" in cpp and "launchKernel(launch_call" in cpp, key
        assert "= NULL;" not in cpp.replace("ffts_addr = NULL;", "") and "allocate_workspace" not in cpp, key
    assert "LaunchMemory npu_sync_memory(" in h["patched"]["both"]["cpp"]


def _function_source(path_text: str, cls: str, fn: str) -> str | None:
    import ast

    tree = ast.parse(path_text)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == fn:
                    return ast.get_source_segment(path_text, item)
    return None


def _torch_generate_source(torch_version: str) -> str:
    """torch's DeferredTritonCallWrapper.generate: from the installed torch of that line, else its wheel."""
    import zipfile

    import torch

    member = "torch/_inductor/codegen/cpp_wrapper_gpu.py"
    if ra.line_of(torch.__version__) == ra.line_of(torch_version):
        text = (Path(torch.__file__).parent / "_inductor" / "codegen" / "cpp_wrapper_gpu.py").read_text()
    else:
        with zipfile.ZipFile(ra.torch_wheel(torch_version)) as zf:
            text = zf.read(member).decode()
    src = _function_source(text, "DeferredTritonCallWrapper", "generate")
    assert src, f"torch {torch_version}: no DeferredTritonCallWrapper.generate in {member}"
    return src


@pytest.mark.parametrize("torch_version,npu_version,want", [
    ("2.13.0", "2.13.0", "no-lazy-in-aot"),  # torch 2.13 goes lazy only outside aot_mode
    ("2.7.1", "2.7.1.post10", "no-lazy-in-aot"),  # no lazy-compile path at all
    ("2.14.1", "2.14.0", "lazy-in-aot"),  # torch 2.14: no aot_mode guard
])
def test_the_aot_lazy_path_is_read_from_the_released_sources(torch_version, npu_version, want):
    """The probe's reading of torch's lazy-compile guard, on the released sources themselves (the tooling
    once took torch 2.13's guard for 2.14's)."""
    import torch

    from torch_npu._inductor.patchset.fixes import aot_npu_launch_lambda as aot_fix
    from torch_npu._inductor.patchset.tooling.releases import wheels as uw

    if torch_version != "2.13.0" and ra.line_of(torch.__version__) != ra.line_of(torch_version):
        # torch 2.13's CPU wheel is small (and on this kind of machine's disk); the others are read on their leg
        pytest.skip(f"torch {torch_version}'s source is read on its own CI leg (its wheel is a multi-GB CUDA build)")
    npu_src = (uw.extracted_tree(npu_version) / "torch_npu" / "_inductor" / "codegen" / "cpp_wrapper_npu.py").read_text()
    found, why = aot_fix.classify(_torch_generate_source(torch_version),
                                  _function_source(npu_src, "DeferredNpuTritonCallWrapper", "generate"))
    assert found == want, why


# ---- portability --------------------------------------------------------------------------------
@pytest.mark.parametrize("version", AOT_WHEELS)
def test_aot_header_carries_the_helper_and_no_path_of_this_machine(version):
    aot = harness(version, aot=True)
    head = aot_artifacts.header_of(aot, version)
    assert not re.search(r'^\s*#\s*include\s*"/', head, re.M), "absolute include in the AOT header"
    assert str(lc.HELPER_DIR) not in head and str(ra.REPO_ROOT) not in head
    assert head.count(lc.INLINE_BEGIN) == 1 and head.count(lc.INLINE_END) == 1
    assert f"#define TORCH_NPU_LAUNCH_RESOURCES_ABI {lc.helper_abi()}" in head
    # Every file of the helper is in it, once; JIT mode keeps its absolute include.
    for part in lc.helper_sources()[1:]:
        assert head.count(f"// ---- {part.relative_to(lc.HELPER_DIR).as_posix()} ----") == 1, part
    jit = harness(version, aot=False)
    jit_text = next(iter(jit["patched"].values()))["include"]
    assert f'#include "{(lc.HELPER_DIR / lc.HELPER_HEADER).as_posix()}"' in jit_text


def test_inlining_a_missing_part_names_it(tmp_path):
    shutil.copytree(lc.HELPER_DIR, tmp_path / "csrc")
    first_part = lc.helper_sources(tmp_path / "csrc")[1]
    first_part.unlink()
    with pytest.raises(FileNotFoundError, match=re.escape(first_part.name)):
        lc.helper_inlined_text(tmp_path / "csrc")


def test_package_cpp_only_sources_build_after_being_moved(tmp_path):
    """The AOT translation unit, laid out as torch's package_cpp_only does (sources beside a
    CMakeLists.txt naming them relative to CMAKE_CURRENT_SOURCE_DIR), builds from another directory."""
    if shutil.which("cmake") is None:
        pytest.skip("cmake is not installed (test/requirements-test.txt installs it)")
    r = aot_tier("2.7.1.post10")
    assert r.ok, r.message
    built = Path(r.info.get("built_in") or r.info["cached"])
    source = (built / "launchers.cpp").read_text()
    assert str(ra.REPO_ROOT) not in source and not re.search(r'^\s*#\s*include\s*"/', source, re.M)
    package = tmp_path / "written" / "model"
    package.mkdir(parents=True)
    (package / "model.wrapper.cpp").write_text(source)
    definitions = [f"_GLIBCXX_USE_CXX11_ABI={r.info['cxx11_abi']}", "USE_NPU", "TORCH_INDUCTOR_CPP_WRAPPER"]
    (package / "CMakeLists.txt").write_text(aot_artifacts.cmake_lists("model.wrapper.cpp", r.info["std"], definitions,
                                                                      ["-w", "-O1"]))
    moved = tmp_path / "elsewhere" / "model"
    moved.parent.mkdir()
    shutil.move(str(package), str(moved))
    assert not package.exists()
    # This machine's include directories: the wheel's, torch's, and CANN's rt.h (a stand-in here).
    incs = [*r.info["include_dirs"], str(built / "stand_in_include")]
    build = moved / "build"
    proc = subprocess.run(["cmake", "-S", str(moved), "-B", str(build), f"-DAOTI_INCLUDE_DIRS={';'.join(incs)}"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    proc = subprocess.run(["cmake", "--build", str(build)], capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (build / "libaoti_model.so").exists()


# ---- the aot_mode launchers on torch_npu's own runtime ------------------------------------------------
#: The releases whose own runtime runs here, per leg (as in test_real_runtime.py). 2.14.0 cannot (no CPU build of
#: torch 2.14.0 here, and the CUDA build aborts torch_npu's import): its library runs in the simulation below.
ON_RUNTIME = release_wheels.RUNTIME_RELEASES.get(release_wheels.LEG, ())
#: What each launch got, compared between the aot_mode and the JIT launcher of a sample.
LAUNCH_FACTS = ("lock_content", "lock_bytes", "workspace_bytes", "block_num", "caching_allocator_calls", "thread",
                "regions_overlap", "call_threw")


@pytest.mark.parametrize("release", ON_RUNTIME)
def test_aot_launchers_run_on_the_releases_own_runtime_like_jit(release):
    """The aot_mode launchers, rendered by the wheel's own classes and compiled under its real AOT header (its own
    ``loadKernel`` and ``launchKernel``, the helper's text inlined), each with a kernels struct as a model holds
    one, on the release's own libtorch_npu.so in processes that never imported the patch set, with every
    TASK_QUEUE_ENABLE value: every sample clean, and each launch got what the JIT launcher gets there."""
    release = release_wheels.fetched(release)
    built = rr.build(release, aot=True)
    assert built.info["aot_mode"] and set(SAMPLE) <= {ln["sample"] for ln in built.launchers}
    aot = rr.run_tags(release, {"patched": rr.QUEUE_MODES}, built=built,
                      env_extra={"TORCH_NPU_PATCHSET_DISABLE": "1"})["patched"]
    jit = rr.run_tags(release, {"patched": ("1",)})["patched"]
    assert not any(run["patchset_imported"] for run in aot["runs"].values())  # the AOT host: switched off
    assert [r["sample"] for r in aot["samples"]] == [r["sample"] for r in jit["samples"]] == list(SAMPLE)
    for row, twin in zip(aot["samples"], jit["samples"]):
        assert row["ok"], (row["sample"], [x["problems"] for run in row["runs"].values() for x in run["launches"]])
        got = [{k: x[k] for k in LAUNCH_FACTS} for x in row["runs"]["1"]["launches"]]
        assert got == [{k: x[k] for k in LAUNCH_FACTS} for x in twin["runs"]["1"]["launches"]], row["sample"]


# ---- the library runs without the patch set ---------------------------------------------------------
def _launch_facts(verdict: dict) -> list:
    return [(x["acl_code"], x["call_threw"], x["lock_content"], x["lock_bytes"], x["workspace_bytes"], x["block_num"],
             x["live_allocations_after"]) for x in verdict["launches"]]


#: Per release, the samples compared (every one for post10; the lock layouts for the others).
COMPARED = {"2.7.1.post10": tuple(SAMPLE), "2.7.1.post11": ("locks", "packed-mix", "ordered-only", "unordered-only"),
            "2.7.1.post6": ("both", "packed-mix", "unordered-only", "ffts"),
            "2.14.0": ("both", "packed-mix", "ordered-only", "unordered-only", "simt-only")}


@pytest.mark.parametrize("version", [v for v in AOT_WHEELS if v not in release_wheels.RUNS_HERE])
def test_aot_library_runs_without_the_patch_set_like_jit(version):
    """Where a release cannot run here: its aot_mode library, run by a C++ host in the simulation, gets what its
    JIT launchers get there."""
    aot, jit = harness(version, aot=True), harness(version, aot=False)
    lib = aot_sim.library(version, aot)
    undefined = subprocess.run(["nm", "-D", "-u", "-C", str(lib)], capture_output=True, text=True, check=True).stdout
    # the host process provides the launch memory and the current stream, as torch_npu's process does
    assert "acl_sim::detail::caching_allocate(" in undefined and "c10_npu::getCurrentNPUStream(" in undefined
    assert aot_sim.helper_namespaces(lib) == {lc.helper_abi()}
    for key in COMPARED[version]:
        got = aot_sim.run(version, aot, SAMPLE[key], [lib])
        assert got["ok"], (key, got)
        want = rendered.simulate_sample(version, jit, SAMPLE[key])
        assert want["ok"], (key, want)
        assert _launch_facts(got) == _launch_facts(want), key


@pytest.mark.parametrize("fault", ["alloc", "fill", "launch"])
def test_aot_error_codes_are_jit_error_codes(fault):
    version, sample = "2.7.1.post10", SAMPLE["both"]
    aot, jit = harness(version, aot=True), harness(version, aot=False)
    got = aot_sim.run(version, aot, sample, [aot_sim.library(version, aot)], inject_fault=fault)
    want = rendered.simulate_sample(version, jit, sample, inject_fault=fault)
    assert got["ok"] and want["ok"], (got, want)
    first = got["launches"][0]
    if fault == "alloc":  # the allocator's error, thrown on the calling thread: nothing queued, nothing held
        assert first["call_threw"] and first["acl_code"] == 0 and first["live_allocations_after"] == 0, first
        assert "kernel 'triton_tem_fused_flex_bwd_3_patched'" in first["call_error"], first["call_error"]
        assert "NPU out of memory" in first["call_error"], first["call_error"]
        assert first["call_error"] == want["launches"][0]["call_error"]
    else:  # a fill or the launch itself fails inside the lambda: its ACL code, from the queue
        assert not first["call_threw"] and first["acl_code"] != 0, first
    assert _launch_facts(got) == _launch_facts(want)


def test_two_helper_versions_keep_apart_in_one_process(tmp_path):
    """Two AOT models built with different helper texts, loaded into one host: different inline
    namespaces (no state merged by the loader), launches of both correct, interleaved on one stream."""
    version = "2.7.1.post10"
    aot = harness(version, aot=True)
    other = tmp_path / "csrc"
    shutil.copytree(lc.HELPER_DIR, other)
    main = other / lc.HELPER_HEADER
    main.write_text(main.read_text() + "\n// another helper version: one changed comment\n")
    assert lc.helper_abi(other) != lc.helper_abi()
    lib_a = aot_sim.library(version, aot)
    lib_b = aot_sim.library(version, aot, helper_dir=other, tag="other-helper")
    ns_a, ns_b = aot_sim.helper_namespaces(lib_a), aot_sim.helper_namespaces(lib_b)
    assert ns_a == {lc.helper_abi()} and ns_b == {lc.helper_abi(other)}, (ns_a, ns_b)
    for key in ("both", "packed-mix", "unordered-only"):
        verdict = aot_sim.run(version, aot, SAMPLE[key], [lib_a, lib_b])  # launch 1 by A, launch 2 by B
        assert verdict["ok"], (key, verdict)
        assert len(verdict["launches"]) == 2


# ---- the release matrix's AOT column ------------------------------------------------------------------
def test_matrix_aot_column_says_ok_failed_or_why_not():
    ok_tier = {"ok": True, "stage": "done", "message": "", "unresolved": [], "info": {"std": "c++17"},
               "accounting": [("a", "a", "libc.so.6")] * 3}
    failed = dict(ok_tier, ok=False, stage="link", unresolved=[("m", "c10_npu::f()")])
    assert release_matrix._aot_cell({"tier": ok_tier, "simulation": "10/10 launchers ok"}) == (
        "ok: rendered in aot_mode, compiled (c++17), linked: 3 undefined symbols, all provided; "
        "library without the patch set: 10/10 launchers ok")
    assert release_matrix._aot_cell({"tier": failed}) == "**FAILED** (link): `c10_npu::f()`"
    assert release_matrix._aot_cell({"tier": ok_tier, "launch_patch": "applied (kept on the lambda)"}).endswith(
        "<br>aot-npu-launch-lambda: applied (kept on the lambda)")
    assert release_matrix._aot_cell({"skip": "torch_npu 2.14.0: no NPU launcher in aot_mode: why"}).startswith(
        "not built: torch_npu 2.14.0: no NPU launcher in aot_mode: why")
    row = {"release": "2.7.1.post10", "skip": "no python with torch 2.7"}
    text = release_matrix.render_markdown([dict(row, aot={})], "cmd", "src")
    assert "| AOT |" in text.splitlines()[next(i for i, ln in enumerate(text.splitlines()) if ln.startswith("| release"))]
