"""An AOT-compiled launcher library, run in a process that never imported the patch set.

What an AOTInductor model is, reduced to its launches: the aot_mode launchers that a wheel's real
classes rendered after ``patchset.apply()`` (``tooling/releases/wheel_harness.py --aot``), with the helper's
text exactly as the rendered AOT header carries it (no include path, no patch set), compiled into a
shared library against the host ACL simulation's headers only (:func:`library`). A small C++ host
(``sim_harness.harness_source``, without the helper's header) ``dlopen``\\ s one or two such
libraries and runs their launches in the simulation, which the host exports to them
(:func:`run`): no Python, no ``torch_npu._inductor.patchset`` in that process.

Two libraries built from different helper texts (:func:`library` with ``helper_dir``) get
different inline namespaces (``TORCH_NPU_LAUNCH_RESOURCES_ABI``), so the loader never merges their
state: :func:`helper_namespaces` reads them from the libraries' dynamic symbols.
"""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

from ..sim import build as sim_build
from ..sim import harness as sim_harness
from ..sim import launcher_writer as lc
from . import aot_artifacts, rendered

_KERNEL_FIELD = re.compile(r"\bkernels_\.(\w+)")
_ABI_NAMESPACE = re.compile(r"torch_npu::inductor::(v_[0-9a-f]+)::")
ENTRY = "aot_launch_"  # the library's exported launch functions, one per sample


def inlined_helper(harness: dict, version: str) -> str:
    """The helper block exactly as the rendered AOT header carries it."""
    head = aot_artifacts.header_of(harness, version)
    found = list(aot_artifacts._INLINED.finditer(head))
    if len(found) != 1:
        raise aot_artifacts.AotError(f"torch_npu {version}: the aot_mode header carries the helper {len(found)} times")
    return found[0].group(0)


def library_source(version: str, harness: dict, helper_dir: Path | None = None) -> str:
    """The rendered aot_mode launchers of every sample, as one library: the helper block of the
    AOT header (or, with ``helper_dir``, that helper inlined the same way), the simulation glue of
    the release matrix, the kernels struct and one ``extern "C" int aot_launch_<sample>(kernel,
    in, out, numel, stream)`` per sample."""
    helper = "\n".join(lc.helper_inline_lines(helper_dir)) if helper_dir else inlined_helper(harness, version)
    legacy = harness.get("launch_api") == "rtKernelLaunch"
    entries_by_key = {k: e for k, e in harness["patched"].items() if "cpp" in e}
    launchers = "".join(f"\n// ---- sample {k} ----\n{e['cpp']}\n" for k, e in entries_by_key.items())
    kernels = sorted(set(_KERNEL_FIELD.findall(launchers)))
    fields = "".join(f"  void* {k}{{nullptr}};\n" for k in kernels)
    entries = []
    for key, entry in entries_by_key.items():
        name = re.search(r"void\s+(call_\w+)\(", entry["cpp"]).group(1)
        device_idx = "0, " if "int32_t device_idx_," in entry["cpp"] else ""
        entries.append(
            f'extern "C" __attribute__((visibility("default"))) int {ENTRY}{_c_name(key)}(void* kernel, void* in, '
            f"void* out, int64_t numel, aclrtStream stream) {{\n"
            f"  g_matrix_probe = kernel;\n  AotKernels kernels;\n"
            f"  {name}(MatrixTensor{{in}}, MatrixTensor{{out}}, numel, {device_idx}stream, kernels);\n"
            f"  return 0;  // queued (the simulated task queue reports the launch)\n}}\n")
    # launchKernel as torch_npu's kernel driver writes it into the AOT header: the lambda to RunOpApiV2.
    launch_kernel = "\n".join(lc.LAUNCH_KERNEL_LINES)
    return (f"// AOT launcher library: torch_npu {version}, aot_mode launchers rendered by the wheel's classes\n"
            "#include <acl/acl.h>\n#include <torch_npu/csrc/framework/OpCommand.h>\n#include <algorithm>\n"
            "#include <functional>\n#include <optional>\n#include <string>\n"
            f"{helper}\n{launch_kernel}\n{rendered.rendered_source('', legacy)}"
            f"struct AotKernels {{  // what AOTInductorModelKernels holds: one handle per kernel\n{fields}}};\n"
            f"{launchers}{''.join(entries)}")


def _c_name(key: str) -> str:
    return re.sub(r"\W", "_", key)


def library(version: str, harness: dict, helper_dir: Path | None = None, tag: str = "") -> Path:
    """``lib<...>.so`` of :func:`library_source`, built against the simulation's headers only."""
    name = f"aot-{version}{'-' + tag if tag else ''}"
    flags = [f for f in sim_build.CXX_FLAGS if f != "-Werror"]  # upstream's rendered code is not ours to warn about
    return sim_build.compile_shared_library(library_source(version, harness, helper_dir), name, flags)


_HOST_GLUE = r"""
#include <dlfcn.h>
#pragma GCC diagnostic ignored "-Wunused-variable"
// The host: it knows the library's launch functions by name and nothing of the patch set.
typedef int (*AotLaunch)(void*, void*, void*, int64_t, aclrtStream);
static AotLaunch aot_symbol(const char* path, const char* symbol) {
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) { std::fprintf(stderr, "dlopen %s: %s\n", path, dlerror()); std::exit(4); }
  void* fn = dlsym(lib, symbol);
  if (!fn) { std::fprintf(stderr, "dlsym %s: %s\n", symbol, dlerror()); std::exit(4); }
  return reinterpret_cast<AotLaunch>(fn);
}
"""


def host_source(harness: dict, sample, libraries: list[Path], inject_fault: str | None = None) -> str:
    """A simulation host (``sim_harness.harness_source``) whose launches call the libraries' entry
    point for ``sample`` in turn (launch i goes to library i mod n), without the helper's header."""
    plan, site, args, grid = rendered.sample_setup(harness, sample)
    symbol = f"{ENTRY}{_c_name(sample.key)}"
    glue = _HOST_GLUE + "".join(f"static AotLaunch g_aot_{i} = aot_symbol({lc.c_string(str(p))}, \"{symbol}\");\n"
                                for i, p in enumerate(libraries))
    table = ", ".join(f"g_aot_{i}" for i in range(len(libraries)))
    glue += f"static AotLaunch g_aot[] = {{{table}}};\nstatic unsigned g_aot_turn = 0;\n"
    call = (f"g_aot[g_aot_turn++ % {len(libraries)}](kernel_handle, bufs[0], bufs[1], "
            f"static_cast<int64_t>({64 * grid[0]}), stream)")
    src = sim_harness.harness_source(plan, site, args, grid, launcher_cpp=glue, call=call, inject_fault=inject_fault,
                                     settle=len(libraries))
    helper_lines = lc.helper_include_lines(absolute=False)
    kept = [ln for ln in src.splitlines() if ln not in helper_lines]
    if len(kept) != len(src.splitlines()) - len(helper_lines):
        raise RuntimeError("the simulation harness no longer includes the helper the way aot_sim expects")
    return "\n".join(kept) + "\n"


def run(version: str, harness: dict, sample, libraries: list[Path], inject_fault: str | None = None) -> dict:
    """The judge's verdict (``sim_harness.judge``) on ``sample``'s launches through ``libraries``."""
    plan, site, _args, grid = rendered.sample_setup(harness, sample)
    src = host_source(harness, sample, libraries, inject_fault)
    name = f"aot-host-{version}-{sample.key}" + (f"-{inject_fault}" if inject_fault else "")
    exe = sim_build.compile_program(src, name, export_simulation=True)
    return sim_harness.judge(plan, site, grid, sim_harness.run_program(exe), inject_fault=inject_fault,
                             helpers=len(set().union(*(helper_namespaces(lib) for lib in libraries))) or 1)


def helper_namespaces(lib: Path) -> set[str]:
    """The helper's inline namespaces among ``lib``'s defined dynamic symbols."""
    out = subprocess.run(["nm", "-D", "-C", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    return set(_ABI_NAMESPACE.findall(out))
