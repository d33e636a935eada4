"""The real-artifact tier: build the patched launchers against what a torch_npu wheel ships.

The host simulation (``acl_sim/``) can only show that the launcher behaves; it
cannot show that the launcher LOADS on a real torch_npu, because a test double
may offer functions the real libraries do not export. This tier checks that
against the real artifacts, without an NPU:

1. **Wheel members.** ``torch_npu/include/**`` and ``torch_npu/lib/libtorch_npu.so``
   are taken out of the cached torch_npu wheel (extracted once).
2. **Matching torch.** The torch whose X.Y matches the wheel's ``Requires-Dist``:
   the interpreter's own torch when it matches, else the headers and shared
   libraries taken out of that torch's wheel (``pip download --no-deps``,
   cached). Nothing is installed.
3. **ACL link stub.** ``libascendcl.so`` defining every function the wheel's
   own ACL headers declare with ``ACL_FUNC_VISIBILITY`` (names are enough to
   link; nothing is ever run).
4. **Rendering.** ``tooling/releases/wheel_harness.py`` renders every sample kernel's
   launcher through the wheel's real ``CppWrapperNpu`` /
   ``DeferredNpuTritonCallWrapper`` after ``patchset.apply()``; this module's
   ``render-header`` command writes the real wrapper header (its include lines
   and the NPU device-op-overrides' kernel driver code, which defines
   ``launchKernel`` over ``at_npu::native::OpCommand::RunOpApiV2``), both in a
   python whose torch matches the wheel.
5. **One translation unit**: that header (the helper include pointed at the
   helper under test, read from disk at run time), every rendered launcher, and
   one exported function per launcher that instantiates it with ``at::Tensor``
   arguments so that every call the launcher makes is emitted. Headers the
   header includes but the wheel does not ship get a minimal stand-in
   (:data:`STAND_IN_HEADERS`), reported in the result.
6. **Compile and link** with the C++ standard of that torch line's Inductor
   ``cpp_builder``, into a shared object with ``-Wl,--no-undefined`` against
   the real ``libtorch_npu.so``, the torch libraries and the ACL stub
   (``--allow-shlib-undefined`` for those libraries' own dependencies, which
   are not here). Any unresolved symbol fails, named demangled, with the wheel.
7. **Accounting**: every undefined dynamic symbol of the result and the
   library that provides it (``nm -D``).

Results are cached by a hash of everything that goes in
(``$TORCH_NPU_PATCHSET_BUILD_CACHE`` or ``~/.cache/torch-npu-inductor-patches/build``).

Command line::

    python -m torch_npu._inductor.patchset.tooling.releases.real_artifacts check 2.7.1.post10 [--helper PATH] [--json]
    python -m torch_npu._inductor.patchset.tooling.releases.real_artifacts render-header VERSION OUT.json  # internal
    python -m torch_npu._inductor.patchset.tooling.releases.release_matrix --out docs/release-matrix.md ...
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Callable, Iterable, Sequence

from . import aot_artifacts, launchers, wheels

PATCHSET_DIR = Path(__file__).resolve().parents[2]
#: What holds this ``torch_npu/`` portion: the checkout, or site-packages when installed (renderers get it
#: first on PYTHONPATH, so they import this copy of the patch set either way).
REPO_ROOT = PATCHSET_DIR.parents[2]  # <root>/torch_npu/_inductor/patchset
DEFAULT_HELPER = PATCHSET_DIR / "csrc" / "npu_launch_resources.h"
HARNESS = Path(__file__).with_name("wheel_harness.py")
#: Every tooling file a rendering runs (the harness and what it imports, transitively): what they do shapes
#: the rendering, so they key its cache (test_tooling_imports checks the list against the harness's imports).
HARNESS_INPUTS = (HARNESS, Path(__file__).with_name("wheels.py"), Path(__file__).parents[1] / "sim" / "samples.py",
                  Path(__file__).parents[1] / "sim" / "cache_root.py")
CACHE_ROOT = wheels.CACHE_ROOT

#: Headers the real wrapper header includes that no wheel ships (they come with
#: CANN), and what stands in for them here: only what the included code uses.
STAND_IN_HEADERS: dict[str, str] = {
    "runtime/runtime/rt.h": """\
// Stand-in for CANN's runtime/runtime/rt.h (not shipped in torch_npu wheels). Declares only
// what torch_npu's wrapper header and launchers use from it: the two profiling types named by
// the kernel driver code and, for the older codegen layout, the rt* binary-registration and
// launch calls. Constant values are placeholders: this tier compiles and links, it never runs.
#pragma once
#include <cstdint>
struct MsprofApi;
struct MsprofCommandHandle {
    uint64_t profSwitch;
    uint32_t type;
};
typedef int32_t rtError_t;
typedef void* rtStream_t;
struct rtSmDesc_t;
struct rtDevBinary_t {
    uint32_t magic;
    uint32_t version;
    const void* data;
    uint64_t length;
};
static const rtError_t RT_ERROR_NONE = 0;
static const uint32_t RT_DEV_BINARY_MAGIC_ELF = 1U;        // placeholder value
static const uint32_t RT_DEV_BINARY_MAGIC_ELF_AIVEC = 2U;  // placeholder value
extern "C" {
rtError_t rtSetDevice(int32_t device);
rtError_t rtDevBinaryRegister(const rtDevBinary_t* bin, void** handle);
rtError_t rtFunctionRegister(void* binHandle, const void* stubFunc, const char* stubName, const void* kernelInfo,
                             uint32_t funcMode);
rtError_t rtKernelLaunch(const void* stubFunc, uint32_t blockDim, void* args, uint32_t argsSize, rtSmDesc_t* smDesc,
                         rtStream_t stream);
rtError_t rtGetC2cCtrlAddr(uint64_t* addr, uint32_t* len);
}
""",
}
#: torch_npu 2.7.1's older-layout header includes the same header from CANN's experiment/ tree.
STAND_IN_HEADERS["experiment/runtime/runtime/rt.h"] = STAND_IN_HEADERS["runtime/runtime/rt.h"]

#: The functions the stand-in rt.h declares: CANN's libruntime.so provides them; here a link stub
#: of that name does (only when the translation unit includes the stand-in).
RUNTIME_STUB_FUNCTIONS = ("rtSetDevice", "rtDevBinaryRegister", "rtFunctionRegister", "rtKernelLaunch",
                          "rtGetC2cCtrlAddr")


#: Bump when the compile / link / accounting recipe changes (part of the build cache key).
BUILD_RECIPE = "real-artifacts build recipe 3"


class TierError(RuntimeError):
    """The tier could not run for a reason other than our code (missing wheel, torch, tool)."""


# ---- small utilities -------------------------------------------------------------------------------
def first_line(text: str, limit: int = 300) -> str:
    """An error's first line (torch_npu appends its C++ frames and log lines to what it throws)."""
    return (text.strip().splitlines() or [""])[0][:limit]


def build_cache() -> Path:
    d = os.environ.get("TORCH_NPU_PATCHSET_BUILD_CACHE")
    p = Path(d).expanduser() if d else CACHE_ROOT / "build"
    p.mkdir(parents=True, exist_ok=True)
    return p


def artifacts_cache() -> Path:
    p = CACHE_ROOT / "real-artifacts"
    p.mkdir(parents=True, exist_ok=True)
    return p


def _digest(parts: Iterable[bytes | str]) -> str:
    h = hashlib.sha256()
    for part in parts:
        b = part.encode() if isinstance(part, str) else part
        h.update(len(b).to_bytes(8, "little"))
        h.update(b)
    return h.hexdigest()[:20]


def _tree_digest(root: Path, suffixes: Sequence[str] | None = None) -> list[bytes]:
    out = []
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts and (suffixes is None or p.suffix in suffixes):
            out.append(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return out


def _run(cmd: Sequence[str], timeout: float = 1800, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)


def _publish(tmp: Path, final: Path) -> None:
    """Atomic rename of a finished directory; a concurrent winner is fine."""
    from ..sim.build import _publish as publish  # one implementation for both caches

    publish(tmp, final)


def small_library(source: str, folder: str, name: str, error: type[Exception], what: str,
                  cflags: Sequence[str] = (), ldlibs: Sequence[str] = ()) -> Path:
    """``source`` compiled into the shared library ``name``, cached by its content in the build cache's
    ``folder-<digest>``; ``error`` naming ``what`` and the compiler's first line when it does not compile."""
    out = build_cache() / f"{folder}-{hashlib.sha256(source.encode()).hexdigest()[:16]}" / name
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        src = out.parent / f"{Path(name).stem}.{os.getpid()}.cpp"
        src.write_text(source)
        tmp = out.parent / f".{name}.{os.getpid()}"
        cxx = os.environ.get("CXX") or "g++"
        proc = subprocess.run([cxx, "-std=c++17", "-O2", "-shared", "-fPIC", *cflags, "-o", str(tmp), str(src),
                               *ldlibs], capture_output=True, text=True)
        src.unlink(missing_ok=True)
        if proc.returncode != 0:
            raise error(f"{what} did not compile: {(proc.stderr.strip().splitlines() or [''])[0][:300]}")
        os.replace(tmp, out)
    return out


def build_in_cache(folder: str, version: str, tu: str, chain, inc_dirs: Sequence[Path], libs: dict, info: dict,
                   by_name: Sequence[str]) -> TierResult:
    """``tu`` compiled and linked (``_compile_and_link``, with ``chain``'s flags) into the build cache's ``folder``,
    published there at once when it built (``info["build_seconds"]``: how long that took)."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{folder}-", dir=build_cache()))
    try:
        started = time.monotonic()
        result = _compile_and_link(version, tmp, tu, list(chain.cflags), inc_dirs, chain.python_include, {}, libs,
                                   info, by_name=tuple(by_name))
        if result.ok:
            info["build_seconds"] = round(time.monotonic() - started, 1)
            (tmp / "result.json").write_text(json.dumps(result.to_json(), indent=1))
            _publish(tmp, build_cache() / folder)
        return result
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _extract_members(wheel: Path, dest: Path, want) -> int:
    """Extract the members of ``wheel`` for which ``want(name)`` holds into ``dest`` (once, atomically)."""
    if (dest / ".complete").exists():
        return -1
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}-", dir=dest.parent))
    try:
        n = 0
        with zipfile.ZipFile(wheel) as zf:
            for info in zf.infolist():
                if not info.is_dir() and want(info.filename):
                    zf.extract(info, tmp)
                    n += 1
        if n == 0:
            raise TierError(f"{wheel.name}: no member matched")
        (tmp / ".complete").write_text(f"{wheel}\n{n} members\n")
        _publish(tmp, dest)
        return n
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def demangle(names: Sequence[str]) -> list[str]:
    if not names:
        return []
    proc = _run(["c++filt"], input="\n".join(names) + "\n")
    out = proc.stdout.splitlines()
    return out if len(out) == len(names) else list(names)


# ---- 1. torch_npu wheel members ----------------------------------------------------------------------
#: Releases served from an installed torch_npu instead of their released wheel (``wheels.INSTALLED``, the fetch
#: step's: the runtime step reads it there; :func:`installed` fills it).
_INSTALLED = wheels.INSTALLED
installed_site = wheels.installed_site


@contextlib.contextmanager
def installed(version: str, site: Path):
    """Within the block, ``version``'s headers, ``libtorch_npu.so``, metadata and the tree a child imports are
    those under ``site`` (an installed torch_npu), not its released wheel's. Builds are keyed by their include
    folders, so they never mix with the wheel's."""
    if not (site / "torch_npu" / "lib" / "libtorch_npu.so").is_file():
        raise TierError(f"torch_npu {version}: no torch_npu/lib/libtorch_npu.so under {site}")
    _INSTALLED[version] = site
    try:
        yield site
    finally:
        _INSTALLED.pop(version, None)


def npu_wheel(version: str) -> Path:
    from torch_npu._inductor.patchset.tooling.releases import wheels as uw

    try:
        return uw.wheel_path(version)
    except uw.WheelUnavailable as exc:
        raise TierError(f"torch_npu {version}: wheel unavailable: {exc}") from exc


def npu_artifacts(version: str) -> Path:
    """Root holding ``torch_npu/include/**`` and ``torch_npu/lib/libtorch_npu.so`` of the wheel (or of the
    installed files, within :func:`installed`)."""
    if version in _INSTALLED:
        return _INSTALLED[version]
    wheel = npu_wheel(version)
    dest = artifacts_cache() / f"torch_npu-{version}"
    _extract_members(wheel, dest, lambda n: n.startswith("torch_npu/include/") or n == "torch_npu/lib/libtorch_npu.so")
    if not (dest / "torch_npu" / "lib" / "libtorch_npu.so").exists():
        raise TierError(f"torch_npu {version}: {wheel.name} has no torch_npu/lib/libtorch_npu.so")
    return dest


def required_torch(version: str) -> str:
    """The torch release the wheel requires (``wheels.required_torch``), a missing wheel said as a :class:`TierError`."""
    try:
        return wheels.required_torch(version)
    except wheels.WheelUnavailable as exc:
        raise TierError(f"torch_npu {version}: wheel unavailable: {exc}") from exc


def line_of(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


# ---- 2. matching torch ------------------------------------------------------------------------------
@dataclasses.dataclass
class TorchArtifacts:
    version: str
    root: Path  # the directory holding include/ and lib/
    source: str  # "installed (<python>)" or "torch-X.Y.Z wheel members"

    @property
    def include_dirs(self) -> list[Path]:
        inc = self.root / "include"
        return [inc, inc / "torch" / "csrc" / "api" / "include"]

    @property
    def lib_dir(self) -> Path:
        return self.root / "lib"


@functools.lru_cache(maxsize=None)
def installed_torch(python: str) -> tuple[str, Path] | None:
    proc = _run([python, "-c", "import os, torch; print(torch.__version__); print(os.path.dirname(torch.__file__))"],
                timeout=300, env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    if proc.returncode != 0:
        return None
    ver, root = proc.stdout.strip().splitlines()[-2:]
    return ver, Path(root)


def torch_wheel_cache() -> Path:
    p = CACHE_ROOT / "torch-wheels"
    p.mkdir(parents=True, exist_ok=True)
    return p


def _cached_torch_wheels(torch_version: str) -> list[Path]:
    """``torch-<version>`` wheels for CPython 3.11 x86_64 in the cache, local builds (``+cpu``) included."""
    return sorted(p for pattern in (f"torch-{torch_version}-cp311-*manylinux*x86_64.whl",
                                    f"torch-{torch_version}+*-cp311-*manylinux*x86_64.whl")
                  for p in torch_wheel_cache().glob(pattern))


def torch_wheel(torch_version: str) -> Path:
    found = _cached_torch_wheels(torch_version)
    if found:
        return found[0]
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-d",
           torch_wheel_cache(), "--only-binary=:all:", "--platform", "manylinux_2_28_x86_64",
           "--python-version", "3.11", f"torch=={torch_version}"]
    proc = _run(cmd, timeout=3600)
    found = _cached_torch_wheels(torch_version)
    if not found:
        tail = " ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
        raise TierError(f"pip download torch=={torch_version} failed: {tail}")
    return found[0]


#: torch libraries the wrapper may link; libtorch_cuda & co are not needed (and huge).
TORCH_LIBS = ("libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so", "libshm.so")


def torch_artifacts(torch_version: str, python: str | None = None) -> TorchArtifacts:
    """Headers and libraries of torch ``torch_version``'s line: the interpreter's own torch when
    its X.Y matches, else members of the torch wheel (downloaded once, never installed)."""
    if python:
        got = installed_torch(python)
        if got and line_of(got[0]) == line_of(torch_version):
            return TorchArtifacts(got[0], got[1], f"installed torch {got[0]} ({python})")
    wheel = torch_wheel(torch_version)
    dest = artifacts_cache() / f"torch-{torch_version}"
    _extract_members(wheel, dest, lambda n: n.startswith("torch/include/")
                     or (n.startswith("torch/lib/") and Path(n).name in TORCH_LIBS)
                     or n == "torch/_inductor/cpp_builder.py")
    return TorchArtifacts(torch_version, dest / "torch", f"members of {wheel.name}")


def cxx_standard(torch_root: Path) -> str:
    """The C++ standard torch's Inductor cpp builder passes (the default of ``_get_cpp_std_cflag``)."""
    src = (torch_root / "_inductor" / "cpp_builder.py").read_text()
    m = re.search(r"def _get_cpp_std_cflag\(\s*std_num\s*:\s*str\s*=\s*\"(c\+\+\d+)\"", src)
    if not m:
        raise TierError(f"cannot find the C++ standard in {torch_root}/_inductor/cpp_builder.py")
    return m.group(1)


# ---- 3. ACL link stub -------------------------------------------------------------------------------
def acl_header_dir(npu_root: Path) -> Path:
    inc = npu_root / "torch_npu" / "include"
    for cand in (inc / "acl", inc / "third_party" / "acl" / "inc" / "acl"):
        if (cand / "acl.h").exists():
            return cand
    raise TierError(f"no acl/acl.h under {inc}")


def include_dirs_of(npu_root: Path) -> list[Path]:
    inc = npu_root / "torch_npu" / "include"
    dirs = [inc]
    if not (inc / "acl" / "acl.h").exists():
        dirs.append(inc / "third_party" / "acl" / "inc")
    return dirs


_COMMENTS = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_ACL_DECL = re.compile(r"\bACL_FUNC_VISIBILITY\b([^;{}()]*?)\b([A-Za-z_]\w*)\s*\(")


def acl_functions(header_dir: Path) -> dict[str, str]:
    """``{function: header}`` for every ``ACL_FUNC_VISIBILITY`` declaration under ``header_dir``."""
    found: dict[str, str] = {}
    for h in sorted(header_dir.rglob("*.h")):
        text = _COMMENTS.sub(" ", h.read_text(errors="replace"))
        text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        for m in _ACL_DECL.finditer(text):
            found.setdefault(m.group(2), str(h.relative_to(header_dir.parent)))
    return found


def acl_stub(npu_root: Path) -> tuple[Path, dict[str, str]]:
    funcs = acl_functions(acl_header_dir(npu_root))
    if not funcs:
        raise TierError(f"no ACL_FUNC_VISIBILITY declarations under {acl_header_dir(npu_root)}")
    return link_stub("ascendcl", funcs, "ACL_FUNC_VISIBILITY declarations of the wheel's ACL headers"), funcs


def link_stub(name: str, functions: Iterable[str], origin: str) -> Path:
    """``lib<name>.so`` defining each of ``functions`` (names are enough to link; never run)."""
    src = f"/* Link stub generated from {origin}; never run. */\n" + "".join(
        f"void {fn}(void) {{}}\n" for fn in sorted(functions))
    final = build_cache() / f"{name}-stub-{_digest([src])}"
    lib = final / f"lib{name}.so"
    if not lib.exists():
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}-stub-", dir=build_cache()))
        try:
            (tmp / f"{name}_stub.c").write_text(src)
            proc = _run(["gcc", "-shared", "-fPIC", "-o", tmp / f"lib{name}.so", tmp / f"{name}_stub.c"])
            if proc.returncode != 0:
                raise TierError(f"compiling the {name} link stub failed: {proc.stderr[-2000:]}")
            _publish(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return lib


# ---- 4. rendering (in a python whose torch matches the wheel) --------------------------------------
#: The environment a rendering reads, with its default: part of the render cache key (``releases.wheels``).
RENDER_SETTINGS = {"TORCH_NPU_PATCHSET_STAND_IN_SOC": "220"}


#: A rendering setting (part of its cache key): put :func:`_triton_shim` on the rendering's path.
TRITON_SHIM = "TORCH_NPU_PATCHSET_RENDER_TRITON_SHIM"


def _render_env(settings: dict | None = None, python: str | None = None) -> dict:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env.update({k: str(v) for k, v in {**RENDER_SETTINGS, **(settings or {})}.items()})
    shim = python is not None and (settings or {}).get(TRITON_SHIM)
    paths = [str(REPO_ROOT), *(_triton_shim(python) if shim else [])]
    env["PYTHONPATH"] = os.pathsep.join([*paths, *filter(None, [env.get("PYTHONPATH")])])
    return env


@functools.lru_cache(maxsize=None)
def _triton_shim(python: str) -> list[str]:
    """Where the rendering interpreter has no triton (a CPU build of torch brings none: the real-runtime tier's
    torch 2.13.0+cpu, whose torch_npu imports triton at module level) and this one has it, for the same Python:
    a folder holding only a link to this interpreter's triton, put on the rendering's path. Rendering imports
    triton's Python API and runs none of it; torch's own modules stay the rendering interpreter's."""
    import importlib.util

    if os.path.abspath(python) == os.path.abspath(sys.executable) or _run([python, "-c", "import triton"]).returncode == 0:
        return []
    spec = importlib.util.find_spec("triton")
    same_python = _run([python, "-c", "import sys; print(sys.version_info[:2])"]).stdout.strip() == str(sys.version_info[:2])
    if spec is None or not spec.submodule_search_locations or not same_python:
        return []
    target = Path(list(spec.submodule_search_locations)[0])
    shim = build_cache() / f"triton-shim-{_digest([str(target)])}"
    if not (shim / "triton").exists():
        tmp = Path(tempfile.mkdtemp(prefix=".triton-shim-", dir=build_cache()))
        (tmp / "triton").symlink_to(target, target_is_directory=True)
        _publish(tmp, shim)
    return [str(shim)]


def _render_key(version: str, python: str, what: str, settings: dict | None = None) -> str:
    import inspect

    from torch_npu_patchset_autoload import declarations_dir

    # The runtime's Python and the helper's headers: an aot_mode rendering carries the helper's text.
    ours = [b for b in _tree_digest(PATCHSET_DIR, (".py", ".toml", ".h")) if not b.startswith(b"tooling")]
    env = _render_env(settings)
    return _digest([what, version, python, *(p.read_bytes() for p in HARNESS_INPUTS), inspect.getsource(_render_header_main),
                    *(f"{k}={env[k]}" for k in sorted({**RENDER_SETTINGS, **(settings or {})})),
                    *ours, *_tree_digest(declarations_dir())])  # patches/, or _declarations/ when installed


def _cached_json(kind: str, version: str, python: str, cmd: list, timeout: float, tail: Sequence[str] = (),
                 settings: dict | None = None) -> dict:
    final = build_cache() / f"render-{kind}-{version}-{_render_key(version, python, kind, settings)}.json"
    if final.exists():
        return json.loads(final.read_text())
    fd, tmp = tempfile.mkstemp(prefix=f".render-{kind}-", suffix=".json", dir=build_cache())
    os.close(fd)
    os.unlink(tmp)
    try:
        proc = _run([python, *cmd, version, tmp, *tail], timeout=timeout, env=_render_env(settings, python),
                    cwd=str(REPO_ROOT))
        if not Path(tmp).exists():
            raise TierError(f"torch_npu {version}: {kind} rendering crashed (exit {proc.returncode}): "
                            f"{proc.stderr.strip()[-3000:]}")
        data = json.loads(Path(tmp).read_text())
        os.replace(tmp, final)
        return data
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def harness_json(version: str, python: str, timeout: float = 1200, aot: bool = False, soc: int | None = None,
                 samples=None, triton_shim: bool = False) -> dict:
    """``tooling/releases/wheel_harness.py VERSION OUT [--aot]`` run in ``python`` (cached per input hash);
    ``soc``: the stand-in device's SoC (220: Ascend 910B1, the default; 260: Ascend 950); ``samples``:
    kernels to render instead of ``sim.samples.SAMPLES``."""
    from ..sim import samples as sample_list

    settings = {"TORCH_NPU_PATCHSET_STAND_IN_SOC": soc} if soc is not None else {}
    if samples is not None:
        settings[sample_list.SAMPLES_ENV] = sample_list.to_json(samples)
    if triton_shim:
        settings[TRITON_SHIM] = "1"
    settings = settings or None
    if aot:
        return _cached_json("harness-aot", version, python, [str(HARNESS)], timeout, tail=["--aot"], settings=settings)
    return _cached_json("harness", version, python, [str(HARNESS)], timeout, settings=settings)


def header_json(version: str, python: str, timeout: float = 1200, triton_shim: bool = False) -> dict:
    return _cached_json("header", version, python, ["-m", "torch_npu._inductor.patchset.tooling.releases.real_artifacts",
                                                    "render-header"], timeout,
                        settings={TRITON_SHIM: "1"} if triton_shim else None)


def _render_header_main(version: str, out: str) -> int:
    """In a fresh interpreter: the wheel's real wrapper header, after ``patchset.apply()``."""
    result: dict = {"version": version}

    def finish() -> int:
        Path(out).write_text(json.dumps(result, indent=1, default=str))
        return 0

    from torch_npu._inductor.patchset.tooling.releases import wheels as uw

    try:
        loaded = uw.load(version)
    except uw.WheelUnavailable as exc:
        result["error"] = str(exc)
        return finish()
    result["layout"] = loaded["layout"]
    cw = loaded["modules"].get("torch_npu._inductor.codegen.cpp_wrapper_npu")
    if cw is None:
        result["error"] = f"no CppWrapperNpu in this layout ({loaded['layout']}): {loaded['import_errors']}"
        return finish()
    import importlib

    importlib.import_module("torch_npu._inductor.codegen.npu.device_op_overrides")
    from torch._inductor.codegen.common import get_device_op_overrides
    from torch._inductor.utils import IndentedBuffer
    from torch._inductor.virtualized import V

    import torch_npu._inductor.patchset as patchset

    patchset.apply()

    class Graph:  # what write_header reads of the graph: a JIT (not AOT) graph on one NPU
        aot_mode = False
        is_const_graph = False
        is_dual_wrapper_mode = False
        device_types = {"npu"}

    overrides = get_device_op_overrides("npu")
    result["kernel_driver"] = overrides.kernel_driver()
    wrapper = cw.CppWrapperNpu.__new__(cw.CppWrapperNpu)
    wrapper.device = "npu"
    wrapper.device_codegen = overrides
    wrapper.header = IndentedBuffer()
    wrapper.included_devices = set()
    try:
        with V.set_graph_handler(Graph()):
            wrapper.write_header()
        result["header"] = wrapper.header.getvalue()
    except Exception as exc:  # reported: the caller says which way the header was made
        import traceback

        result["write_header_error"] = f"{type(exc).__name__}: {exc}"
        result["write_header_traceback"] = traceback.format_exc()[-3000:]
    return finish()


# ---- 5. the translation unit -------------------------------------------------------------------------
_HELPER_INCLUDE = re.compile(r'^\s*#include\s+"[^"]*npu_launch_resources\.h"\s*$', re.M)
def cpp_part_of_header(header: str) -> str:
    """The C++ of a JIT wrapper header: torch writes it inside a Python string literal."""
    # (What a JIT header writes before that literal, CppWrapperNpu's aoti_runtime includes among it,
    # is Python, so comments there, not C++.) Opened with ''', r''' or r""" depending on the release.
    m = re.search(r"""cpp_wrapper_src\s*=\s*\(\s*r?(?:'''|\"\"\")[ \t]*\n""", header)
    return header[m.end():] if m else header


def translation_unit(version: str, harness: dict, header: dict, helper: Path, tags: Sequence[str] = ("patched",),
                     entries=None) -> tuple[str, dict]:
    """The TU text and a description of how it was made. ``tags``: the renderings it holds ("patched",
    after apply; "upstream", as shipped; more in the real-runtime tier); ``entries(calls, keys)``: the
    exported functions instead of one ``launchers.entry_point`` per launcher (the real-runtime tier calls
    them from Python)."""
    info: dict = {}
    if "header" in header:
        head = cpp_part_of_header(header["header"])
        info["header_from"] = "CppWrapperNpu.write_header() (real, JIT mode, after apply)"
    elif harness.get("layout") == "legacy":  # the harness renders that layout's whole header as "include"
        any_entry = next(iter(harness["patched"].values()))
        head = cpp_part_of_header(any_entry.get("include", ""))
        info["header_from"] = ("CppWrapperNpu.write_header() of codegen/cpp_wrapper.py (real, after apply), "
                               "as tooling/releases/wheel_harness.py rendered it")
    else:  # the include lines the harness saw, then the kernel driver, as write_header splices them
        any_entry = next(iter(harness["patched"].values()))
        head = any_entry.get("include", "") + "\n" + header.get("kernel_driver", "")
        info["header_from"] = ("include lines from the harness + kernel_driver(); write_header failed: "
                               f"{header.get('write_header_error')}")
    if not _HELPER_INCLUDE.search(head):
        raise TierError(f"torch_npu {version}: the patched wrapper header does not include npu_launch_resources.h")
    # The patched header is upstream's plus the helper include; an as-shipped launcher never reaches the helper.
    head = _HELPER_INCLUDE.sub(lambda m: f'#include "{helper}"', head)
    parts = [f"// Real-artifact tier: torch_npu {version}, sample launchers rendered by the wheel's own\n"
             f"// CppWrapperNpu ({', '.join(tags)}), with the helper {helper}.\n",
             "#include <ATen/ATen.h>\n", head]
    keys = []
    for tag in tags:
        samples, tag_keys = launchers.sample_parts(harness, version, TierError, tag)
        parts += samples
        keys += [f"{tag}/{k}" if len(tags) > 1 else k for k in tag_keys]
    calls = list(launchers.CALL_FN.finditer("\n".join(parts)))
    if len(calls) != len(keys):
        raise TierError(f"torch_npu {version}: found {len(calls)} call_* functions for {len(keys)} launchers")
    parts.append("\n// ---- exported entry points: instantiate every launcher ----\n")
    if entries is None:
        parts.extend(launchers.entry_point(fn, i) for i, fn in enumerate(calls))
    else:
        parts.append(entries(calls, keys))
    info["launchers"] = keys
    info["calls"] = [fn.group("name") for fn in calls]
    return "".join(parts), info


# ---- 6. compile and link -----------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _compiler_id() -> str:
    return _run(["g++", "--version"]).stdout


@functools.lru_cache(maxsize=None)
def _python_library(python: str) -> Path | None:
    """The interpreter's shared libpython: where a wrapper that includes pybind11 (the older layout's
    header does) finds the Python C API when the interpreter loads it. None for a static build."""
    out = _run([python, "-c", "import sysconfig as s; print(s.get_config_var('LIBDIR')); "
                "print(s.get_config_var('LDLIBRARY'))"]).stdout.split()
    lib = Path(*out[:2]) if len(out) == 2 else None
    return lib if lib is not None and lib.suffix == ".so" and lib.exists() else None


@functools.lru_cache(maxsize=None)
def _python_include(python: str) -> str:
    return _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"]).stdout.strip()


def _needed_stand_ins(tu: str, include_dirs: Sequence[Path]) -> dict[str, str]:
    out = {}
    for inc in re.findall(r'^\s*#include\s*[<"]([^>"]+)[>"]', tu, re.M):
        if inc in STAND_IN_HEADERS and not any((d / inc).exists() for d in include_dirs):
            out[inc] = STAND_IN_HEADERS[inc]
    return out


def _cxx11_abi(lib_dir: Path) -> int:
    proc = _run(["nm", "-D", "--defined-only", lib_dir / "libc10.so"])
    return 1 if "__cxx11" in proc.stdout else 0


_UNDEF_REF = re.compile(r"undefined reference to `([^']+)'")


@dataclasses.dataclass
class TierResult:
    version: str
    ok: bool
    stage: str  # "compile", "link", "done"
    message: str = ""
    unresolved: list = dataclasses.field(default_factory=list)  # [(mangled, demangled)]
    accounting: list = dataclasses.field(default_factory=list)  # [(mangled, demangled, provider)]
    info: dict = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def _export_table(lib: Path) -> set[str]:
    proc = _run(["nm", "-D", "--defined-only", lib])
    names = set()
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] not in ("U", "w", "v"):
            names.add(parts[2].split("@")[0])
    return names


@functools.lru_cache(maxsize=None)
def _system_lib(name: str) -> Path | None:
    proc = _run(["g++", f"-print-file-name={name}"])
    p = Path(proc.stdout.strip())
    if p.is_absolute() and p.exists():
        return p.resolve()
    for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"):
        if (Path(d) / name).exists():
            return (Path(d) / name).resolve()
    return None


def account(shared_object: Path, libraries: dict[str, Path]) -> list:
    """``[(symbol, demangled, provider)]`` for every undefined dynamic symbol of ``shared_object``."""
    proc = _run(["nm", "-D", "-u", shared_object])
    undefined = []
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2:
            undefined.append((parts[0], parts[1]))  # (kind, name@version)
    # The C and C++ runtimes first: a std:: or libc symbol that a library also re-exports (a
    # template instance, say) is still the runtime's; then the wheel's and torch's libraries.
    tables = {}
    for sysname in ("libstdc++.so.6", "libm.so.6", "libgcc_s.so.1", "libc.so.6", "ld-linux-x86-64.so.2"):
        p = _system_lib(sysname)
        if p is not None:
            tables[sysname] = _export_table(p)
    tables.update({label: _export_table(path) for label, path in libraries.items()})
    rows = []
    names = [n.split("@")[0] for _, n in undefined]
    for (kind, full), name, pretty in zip(undefined, names, demangle(names)):
        providers = [label for label, table in tables.items() if name in table]
        if providers:
            provider = providers[0]
        elif kind == "w":
            provider = "weak, optional (none here)"
        else:
            provider = "NONE"
        rows.append((full, pretty, provider))
    return rows


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """How code is built against a wheel: its headers and torch's, the flags of that torch line's Inductor,
    the libraries linked (the wheel's libtorch_npu.so, torch's); shared by the link check, the real-runtime
    tier and the helper's C++ unit tests (``cpp_tests.py``)."""
    npu_root: Path
    torch_version: str
    torch: TorchArtifacts
    std: str
    include_dirs: list
    python_include: str
    cxx11_abi: int
    cflags: tuple
    libraries: dict  # {label: path}


def toolchain(version: str, python: str | None = None) -> Toolchain:
    python = python or sys.executable
    npu_root = npu_artifacts(version)
    torch_version = required_torch(version)
    torch_art = torch_artifacts(torch_version, python)
    std = cxx_standard(torch_art.root)
    abi = _cxx11_abi(torch_art.lib_dir)
    cflags = (f"-std={std}", "-O1", "-fPIC", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}", "-DUSE_NPU",
              "-DBUILD_LIBTORCH=ON", "-DTORCH_INDUCTOR_CPP_WRAPPER")
    torch_libs = {name: torch_art.lib_dir / name for name in TORCH_LIBS if (torch_art.lib_dir / name).exists()}
    libs = {"libtorch_npu.so": npu_root / "torch_npu" / "lib" / "libtorch_npu.so", **torch_libs}
    return Toolchain(npu_root, torch_version, torch_art, std, [*include_dirs_of(npu_root), *torch_art.include_dirs],
                     _python_include(python), abi, cflags, libs)


@dataclasses.dataclass(frozen=True)
class Flavour:
    """A JIT build for the real-runtime tier (``real_runtime.py``) instead of the link check: which renderings
    go in, the exported functions it calls, a mutant's edit, and the libraries that stand for CANN's at run
    time, linked by file name (DT_NEEDED names the file, found on LD_LIBRARY_PATH), not the link stubs."""

    name: str  # in the cache folder's name
    tags: tuple = ("patched",)
    entries: Callable | None = None  # (calls, keys) -> C++ of the exported functions
    acl_libraries: dict = dataclasses.field(default_factory=dict)  # {file name: path}
    harness: dict | None = None  # renderings of other kernels than the samples, or more of them
    triton_shim: bool = False  # render with this interpreter's triton where the rendering one has none


def build(version: str, *, python: str | None = None, helper: Path | None = None, aot: bool = False,
          upstream: bool = False, flavour: Flavour | None = None) -> TierResult:
    """Run the tier for torch_npu ``version``; renders with ``python`` (default: this interpreter).
    ``aot``: render in aot_mode and build the AOT translation unit (``tooling/releases/aot_artifacts.py``);
    with ``upstream``, of the launchers as the release ships them (what a user gets without the patch set).
    ``flavour``: the real-runtime tier's build of the launchers (``info["shared_object"]``), JIT or aot_mode."""
    if upstream and not aot:
        raise ValueError("real_artifacts.build: upstream=True builds the aot_mode launchers only")
    python = python or sys.executable
    helper = Path(helper or DEFAULT_HELPER).resolve()
    chain = toolchain(version, python)
    npu_root, torch_version, torch_art, std = chain.npu_root, chain.torch_version, chain.torch, chain.std
    stub, acl_funcs = acl_stub(npu_root)
    harness = flavour.harness if flavour is not None and flavour.harness else harness_json(version, python, aot=aot)
    if not harness.get("loaded"):
        raise TierError(f"torch_npu {version}: the harness could not load the wheel: {harness.get('error')}")
    if harness.get("error"):
        raise TierError(f"torch_npu {version}: harness: {harness['error']}")
    if "patched" not in harness:
        raise TierError(f"torch_npu {version}: layout {harness.get('layout')!r}: the harness rendered no launchers")
    inc_dirs = chain.include_dirs
    if aot:

        try:
            tu, info = aot_artifacts.translation_unit(version, harness, helper, inc_dirs,
                                                      "upstream" if upstream else "patched",
                                                      flavour.entries if flavour is not None else None)
        except aot_artifacts.AotError as exc:
            raise TierError(str(exc)) from exc
    else:
        header = header_json(version, python, triton_shim=flavour is not None and flavour.triton_shim)
        if header.get("error") and harness.get("layout") != "legacy":
            raise TierError(f"torch_npu {version}: header: {header['error']}")
        if flavour is None:
            tu, info = translation_unit(version, harness, header, helper)
        else:
            tu, info = translation_unit(version, harness, header, helper, flavour.tags, flavour.entries)
    stand_ins = _needed_stand_ins(tu, inc_dirs)
    py_inc, abi, cflags, libs = chain.python_include, chain.cxx11_abi, list(chain.cflags), dict(chain.libraries)
    if flavour is not None:
        libs.update({name: Path(path) for name, path in flavour.acl_libraries.items()})
    else:
        libs["libascendcl.so (stub)"] = stub
    pylib = _python_library(python)
    if pylib is not None and re.search(r"#include\s*[<\"](pybind11/|Python\.h)", tu):
        libs[f"{pylib.name} (the loading interpreter's)"] = pylib
    if flavour is None and any(inc.endswith("runtime/runtime/rt.h") for inc in stand_ins):
        libs["libruntime.so (stub for the stand-in rt.h)"] = link_stub(
            "runtime", RUNTIME_STUB_FUNCTIONS, "the stand-in runtime/runtime/rt.h")
    helper_files = _tree_digest(helper.parent, (".h", ".hpp"))
    key = _digest([_compiler_id(), BUILD_RECIPE, tu, " ".join(cflags), *[str(d) for d in inc_dirs], py_inc,
                   json.dumps(stand_ins, sort_keys=True), *helper_files,
                   *[f"{k}={p}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for k, p in libs.items()]])
    info.update(torch=torch_art.source, torch_required=torch_version, std=std, cxx11_abi=abi,
                include_dirs=[str(d) for d in inc_dirs], stand_in_headers=sorted(stand_ins), helper=str(helper),
                acl_stub_functions=len(acl_funcs), acl_headers=str(acl_header_dir(npu_root)), build_key=key,
                libraries={k: str(v) for k, v in libs.items()})
    kind = f"real-runtime-{flavour.name}" if flavour is not None else "real-artifacts"
    final = build_cache() / f"{kind}-{version}{'-aot' if aot else ''}{'-upstream' if upstream else ''}-{key}"
    if (final / "result.json").exists():
        data = json.loads((final / "result.json").read_text())
        data["info"].update(cached=str(final), shared_object=str(final / "launchers.so"))
        return TierResult(**data)
    tmp = Path(tempfile.mkdtemp(prefix=f".{kind}-{version}-", dir=build_cache()))
    try:
        by_name = tuple(flavour.acl_libraries) if flavour is not None else ()
        result = _compile_and_link(version, tmp, tu, cflags, inc_dirs, py_inc, stand_ins, libs, info, by_name)
        (tmp / "result.json").write_text(json.dumps(result.to_json(), indent=1))
        _publish(tmp, final)
        result.info.update(built_in=str(final), shared_object=str(final / "launchers.so"))
        return result
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _compile_and_link(version, tmp: Path, tu, cflags, inc_dirs, py_inc, stand_ins, libs, info,
                      by_name: Sequence[str] = ()) -> TierResult:
    """``by_name``: the labels of ``libs`` linked as ``-l:<file name>`` (DT_NEEDED is then that name)."""
    (tmp / "launchers.cpp").write_text(tu)
    label = f"torch_npu {version}" + (" (aot_mode)" if info.get("aot_mode") else "")
    stand_in_root = tmp / "stand_in_include"
    for rel, text in stand_ins.items():
        (stand_in_root / rel).parent.mkdir(parents=True, exist_ok=True)
        (stand_in_root / rel).write_text(text)
    incs = [f"-I{d}" for d in inc_dirs] + [f"-I{py_inc}"] + ([f"-I{stand_in_root}"] if stand_ins else [])
    obj = tmp / "launchers.o"
    proc = _run(["g++", *cflags, *incs, "-c", tmp / "launchers.cpp", "-o", obj], timeout=1800)
    if proc.returncode != 0:
        errs = [ln for ln in proc.stderr.splitlines() if "error" in ln][:12]
        return TierResult(version, False, "compile", f"{label}: compiling the launchers failed:\n"
                          + "\n".join(errs), info=info)
    lib_dirs = sorted({str(p.parent) for p in libs.values()})
    link = ["g++", "-shared", "-o", tmp / "launchers.so", obj, "-Wl,--no-undefined", "-Wl,--allow-shlib-undefined",
            "-Wl,--no-demangle", "-Wl,--as-needed", *[f"-L{d}" for d in lib_dirs],
            *[f"-Wl,-rpath-link,{d}" for d in lib_dirs],
            *[f"-l:{p.name}" if label in by_name else str(p) for label, p in libs.items()]]
    proc = _run(link, timeout=900)
    if proc.returncode != 0:
        mangled = sorted(set(_UNDEF_REF.findall(proc.stderr)))
        pretty = demangle(mangled)
        unresolved = list(zip(mangled, pretty))
        if unresolved:
            msg = (f"{label}: {len(unresolved)} symbol(s) unresolved against the wheel's exports "
                   "(libtorch_npu.so, torch, ACL stub):\n" + "\n".join(f"  {p}   [{m}]" for m, p in unresolved))
        else:
            msg = f"{label}: linking failed:\n{proc.stderr[-3000:]}"
        return TierResult(version, False, "link", msg, unresolved=unresolved, info=info)
    rows = account(tmp / "launchers.so", libs)
    missing = [r for r in rows if r[2] == "NONE"]
    if missing:
        return TierResult(version, False, "account", f"{label}: no provider for "
                          + ", ".join(r[1] for r in missing), accounting=rows, info=info)
    mode = "rendered in aot_mode; " if info.get("aot_mode") else ""
    return TierResult(version, True, "done", f"torch_npu {version}: {mode}compiled ({info['std']}) and linked with "
                      f"--no-undefined; {len(rows)} undefined dynamic symbols, all accounted for",
                      accounting=rows, info=info)


def format_accounting(rows) -> str:
    by = {}
    for _full, pretty, provider in rows:
        by.setdefault(provider, []).append(pretty)
    out = []
    for provider in sorted(by):
        out.append(f"  {provider} ({len(by[provider])}):")
        out.extend(f"    {p}" for p in sorted(by[provider]))
    return "\n".join(out)


# ---- command line ------------------------------------------------------------------------------------
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_npu._inductor.patchset.tooling.releases.real_artifacts")
    sub = parser.add_subparsers(dest="cmd", required=True)
    chk = sub.add_parser("check", help="run the tier for torch_npu wheels (render with this interpreter)")
    chk.add_argument("versions", nargs="+")
    chk.add_argument("--helper", type=Path, default=None, help="helper header to build (default: the repository's)")
    chk.add_argument("--python", default=None, help="interpreter that renders (torch of the wheel's line)")
    chk.add_argument("--json", action="store_true")
    chk.add_argument("--aot", action="store_true", help="render in aot_mode (AOTInductor) and build that")
    rh = sub.add_parser("render-header", help=argparse.SUPPRESS)
    rh.add_argument("version")
    rh.add_argument("out")
    args = parser.parse_args(argv)
    if args.cmd == "render-header":
        return _render_header_main(args.version, args.out)
    rc = 0
    for v in args.versions:
        try:
            r = build(v, python=args.python, helper=args.helper, aot=args.aot)
        except TierError as exc:
            r = TierResult(v, False, "setup", str(exc))
        rc |= 0 if r.ok else 1
        if args.json:
            print(json.dumps(r.to_json()))
            continue
        print(r.message)
        for k in ("torch", "std", "header_from", "model_stand_in", "stand_in_headers", "acl_headers",
                  "acl_stub_functions"):
            if k in r.info:
                print(f"  {k}: {r.info[k]}")
        if r.accounting:
            print(format_accounting(r.accounting))
    return rc


if __name__ == "__main__":
    sys.exit(main())
