"""The real-artifact tier: the patched launchers must compile against a released torch_npu wheel's
own headers and link, with ``-Wl,--no-undefined``, against its real ``libtorch_npu.so``.

See ``torch_npu/_inductor/patchset/tooling/releases/real_artifacts.py`` for what is built. The simulation
defines whatever the helper calls; only this tier shows whether the real libraries export it. Each
CI leg covers the wheels of its torch line (rendering needs the wheel's own torch).
"""
from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

from torch_npu._inductor.patchset.tooling.releases import elf
from torch_npu._inductor.patchset.tooling.releases import real_artifacts as ra

#: Wheels per torch line: the CI legs.
WHEELS = ("2.7.1.post10", "2.7.1.post11", "2.14.0")  # the wheels of CI's two torch legs
MALLOC_WITH_STREAM = "c10_npu::NPUWorkspaceAllocator::malloc_with_stream(unsigned long, void*)"
_results: dict = {}


def needs_matching_torch(version: str) -> None:
    """torch_npu X.Y.* renders on torch X.Y only (its Inductor code imports torch X.Y's internals)."""
    import importlib.util

    import torch

    line = ra.line_of(version)
    if ra.line_of(torch.__version__) != line:
        pytest.skip(f"torch_npu {version} wheels run on torch {line} only; this interpreter has torch {torch.__version__}")
    if line == "2.14" and importlib.util.find_spec("triton") is None:
        pytest.fail(f"torch_npu {version}'s Inductor code imports triton; test/requirements-torch2.14.1.txt installs it")


def tier(version: str, helper: Path | None = None, aot: bool = False) -> ra.TierResult:
    """The real-artifact tier of ``version`` (JIT, or aot_mode), once per input in this session."""
    needs_matching_torch(version)
    key = (version, str(helper), aot)
    if key not in _results:
        try:
            _results[key] = ra.build(version, python=sys.executable, helper=helper, aot=aot)
        except ra.TierError as exc:
            pytest.fail(str(exc))
    return _results[key]


@pytest.mark.parametrize("version", WHEELS)
def test_launchers_link_against_the_real_wheel(version):
    r = tier(version)
    assert r.ok, r.message
    # Every launcher of every sample kernel went into the one translation unit.
    from torch_npu._inductor.patchset.tooling.sim.samples import SAMPLES

    assert sorted(r.info["launchers"]) == sorted(s.key for s in SAMPLES)
    assert r.info["std"] == ("c++17" if version.startswith("2.7.") else "c++20")


@pytest.mark.parametrize("version", WHEELS)
def test_every_undefined_symbol_is_accounted_for(version):
    r = tier(version)
    assert r.ok, r.message
    providers = {p for _, _, p in r.accounting}
    assert "NONE" not in providers
    npu = {pretty for _, pretty, p in r.accounting if p == "libtorch_npu.so"}
    # The launch path itself: torch_npu's task queue, and its caching allocator reached through the
    # exported allocator pointer (NPUCachingAllocator.h's inline get(), recordStream).
    assert any(s.startswith("at_npu::native::OpCommand::RunOpApiV2(") for s in npu), npu
    assert "c10_npu::NPUCachingAllocator::allocator" in npu, npu
    # ... and nothing of the per-stream workspace allocator (its block is shared by every request).
    assert not any("allocate_workspace" in pretty or "malloc_with_stream" in pretty for _, pretty, _ in r.accounting)
    acl = {pretty for _, pretty, p in r.accounting if p.startswith("libascendcl.so")}
    assert "aclrtLaunchKernelWithHostArgs" in acl and "aclrtMemsetAsync" in acl, acl
    # a kept block goes back with its stream recorded as a use: the events behind its kernels are the caching
    # allocator's own, made in libtorch_npu.so; the helper makes none
    for gone in ("aclrtCreateEvent", "aclrtCreateEventExWithFlag", "aclrtRecordEvent", "aclrtQueryEventStatus"):
        assert gone not in acl, gone
    # whether the launch's stream is captured (CANN's per-stream status) is looked up at run time, never
    # linked: a CANN without graph capture lacks the function (see the test below)
    assert "aclmdlRICaptureGetInfo" not in acl, acl
    # locks are written with byte fills: no copy, no page-locked memory; nothing waits
    for gone in ("aclrtMemcpyAsync", "aclrtMemcpy", "aclrtMallocHost", "aclrtFreeHost", "aclrtSynchronizeStream",
                 "aclrtSynchronizeDevice", "aclrtSynchronizeEvent"):
        assert gone not in acl, gone


def test_acl_stub_reads_the_wheels_declarations():
    root = ra.npu_artifacts("2.7.1.post10")
    funcs = ra.acl_functions(ra.acl_header_dir(root))
    for name in ("aclrtMemsetAsync", "aclrtMemcpyAsync", "aclrtMallocHost", "aclrtFreeHost",
                 "aclrtLaunchKernelWithHostArgs", "aclrtGetDevice"):
        assert name in funcs, name
    assert "ACL_FUNC_VISIBILITY" not in funcs and all(re.fullmatch(r"[A-Za-z_]\w*", f) for f in funcs)


MUTATION = """
#include <torch_npu/csrc/core/npu/NPUWorkspaceAllocator.h>
// Mutation (test_real_artifacts.py): the unexported allocator entry point, put back.
void torch_npu_patchset_mutation_workspace(aclrtStream stream) {
    (void)c10_npu::NPUWorkspaceAllocator::malloc_with_stream(64, stream);
}
"""


def scratch_helper() -> Path:
    """A copy of the helper (with its directory) that calls malloc_with_stream again. It lives in
    the build cache under a hash of its content, so that an unchanged helper is not rebuilt."""
    src = ra.DEFAULT_HELPER.parent
    files = sorted(p for p in src.rglob("*") if p.is_file())
    digest = ra._digest([MUTATION, *(str(p.relative_to(src)).encode() + b"\0" + p.read_bytes() for p in files)])
    dst = ra.build_cache() / f"mutation-{digest}" / "csrc"
    helper = dst / ra.DEFAULT_HELPER.name
    if not helper.exists():
        tmp = dst.parent.with_name(dst.parent.name + f".tmp{id(dst)}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp / "csrc")
        (tmp / "csrc" / helper.name).write_text(helper_text(src / helper.name))
        ra._publish(tmp, dst.parent)
    return helper


def helper_text(path: Path) -> str:
    return path.read_text() + MUTATION


@pytest.mark.parametrize("version", WHEELS)
def test_malloc_with_stream_put_back_fails_and_is_named(version):
    r = tier(version, helper=scratch_helper())
    assert not r.ok
    assert r.stage == "link", r.message
    assert MALLOC_WITH_STREAM in r.message and version in r.message, r.message
    assert [p for _, p in r.unresolved] == [MALLOC_WITH_STREAM], r.unresolved


#: The oldest releases of the 2.7.1 line (their headers lack parts of the caching allocator's API that
#: later ones have, e.g. hasCapturesUnderway): the helper builds against them, with its fallback.
OLDEST = ("2.7.1", "2.7.1.post2")


@pytest.mark.parametrize("version", OLDEST)
def test_helper_builds_against_the_oldest_releases(version):
    r = tier(version)
    assert r.ok, r.message
    assert any(pretty == "c10_npu::NPUCachingAllocator::allocator" for _, pretty, _ in r.accounting)
    root = ra.npu_artifacts(version)
    header = root / "torch_npu" / "include" / "torch_npu" / "csrc" / "core" / "npu" / "NPUCachingAllocator.h"
    text = header.read_text()
    assert "inline void* raw_alloc_with_stream(size_t nbytes, aclrtStream stream)" in text
    assert "inline void raw_delete(void* ptr)" in text
    # Without the allocator's hasCapturesUnderway the helper asks CANN whether a stream captures (it always does
    # for the launch's own stream).
    assert "hasCapturesUnderway" not in text
    assert "aclmdlRICaptureGetInfo" not in {pretty for _, pretty, p in r.accounting}


@pytest.mark.parametrize("version", WHEELS + OLDEST)
def test_capture_status_is_looked_up_at_run_time_as_each_wheel_does(version):
    """Every wheel's own libtorch_npu.so names aclmdlRICaptureGetInfo without importing it (its function
    loader resolves it from libascendcl.so at run time: a CANN may lack it); the helper does the same."""
    lib = ra.npu_artifacts(version) / "torch_npu" / "lib" / "libtorch_npu.so"
    assert "aclmdlRICaptureGetInfo" not in elf.dynamic_symbols(lib)[1]
    assert "aclmdlRICaptureGetInfo" in elf.rodata_strings(lib)
    helper = (ra.DEFAULT_HELPER.parent / "npu_launch_resources" / "kept.h").read_text()
    assert 'dlsym(dlopen("libascendcl.so", RTLD_LAZY | RTLD_NOLOAD), "aclmdlRICaptureGetInfo")' in helper


def test_render_cache_key_follows_the_helpers_headers(tmp_path, monkeypatch):
    """An aot_mode rendering carries the helper's text: a cached one must not outlive a helper edit."""
    copy = tmp_path / "patchset"
    shutil.copytree(ra.PATCHSET_DIR, copy, ignore=shutil.ignore_patterns("tooling", "__pycache__"))
    monkeypatch.setattr(ra, "PATCHSET_DIR", copy)
    before = ra._render_key("2.7.1.post10", sys.executable, "harness-aot")
    abi = copy / "csrc" / "npu_launch_resources" / "sizes.h"
    abi.write_text(abi.read_text() + "// one more line\n")
    assert ra._render_key("2.7.1.post10", sys.executable, "harness-aot") != before


def test_render_cache_key_follows_the_settings_a_rendering_reads(monkeypatch):
    """The stand-in device's SoC decides whether SIMT-only kernels are honoured: it keys the cache,
    whether asked for (``soc=``) or set in the environment."""
    base = ra._render_key("2.7.1.post10", sys.executable, "harness")
    assert ra._render_key("2.7.1.post10", sys.executable, "harness", {"TORCH_NPU_PATCHSET_STAND_IN_SOC": 260}) != base
    monkeypatch.setenv("TORCH_NPU_PATCHSET_STAND_IN_SOC", "260")
    assert ra._render_key("2.7.1.post10", sys.executable, "harness") == base  # the default wins unless asked for
    from torch_npu._inductor.patchset.tooling.releases import wheels

    assert set(ra.RENDER_SETTINGS) == {"TORCH_NPU_PATCHSET_STAND_IN_SOC"} and wheels.SOC_VERSION in (220, 260)


def test_installed_files_answer_for_their_version_a_local_build_included(tmp_path):
    """Within ``installed``, a version's torch line comes from the installed distribution's metadata (its torch pin,
    else its own X.Y.Z without a local part), and a local build's version is accepted where a wheel would be
    fetched; outside, neither is served and a malformed site is refused in one line."""
    from torch_npu._inductor.patchset.tooling.releases import host_runtime

    site = tmp_path / "site"
    (site / "torch_npu" / "lib").mkdir(parents=True)
    (site / "torch_npu" / "lib" / "libtorch_npu.so").write_bytes(b"")
    (site / "torch_npu-2.9.0+gitabc.dist-info").mkdir()
    meta = site / "torch_npu-2.9.0+gitabc.dist-info" / "METADATA"
    meta.write_text("Metadata-Version: 2.1\nName: torch_npu\nVersion: 2.9.0+gitabc\nRequires-Dist: pyyaml\n")
    with ra.installed("2.9.0+gitabc", site):
        assert ra.required_torch("2.9.0+gitabc") == "2.9.0"
        assert host_runtime.extracted_wheel("2.9.0+gitabc") == site
        meta.write_text(meta.read_text() + "Requires-Dist: torch==2.9.1+cpu\n")
        assert ra.required_torch("2.9.0+gitabc") == "2.9.1"
    assert ra.installed_site("2.9.0+gitabc") is None
    with pytest.raises(host_runtime.wheels.WheelUnavailable, match=r"'2\.9\.0\+gitabc' is not a torch_npu release"):
        host_runtime.extracted_wheel("2.9.0+gitabc")
    with pytest.raises(ra.TierError, match=r"no torch_npu/lib/libtorch_npu\.so under"):
        with ra.installed("2.9.0", tmp_path):
            pass
