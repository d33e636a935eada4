"""Compile C++ against the host ACL simulation with g++ directly (no CMake).

The simulation (``acl_sim/``) is a test double and dry-run tool: a host-only
stand-in for the subset of the ACL runtime (:data:`CORE_SOURCES`) and of torch_npu
(its caching and workspace allocators, its task queue: :data:`STANDIN_SOURCES`)
that the launch helper (``csrc/npu_launch_resources.h``) and the code around it
use. This module builds both into a static library once and compiles small
programs against it,
caching every result by a hash of its inputs so repeated and concurrent test
runs (several pytest processes) share work safely: outputs are produced in a
private temporary directory and published with an atomic rename.

API:
    build_dir() -> Path
    sim_library() -> Path
    compile_program(source, name, extra_include_dirs=(), export_simulation=False) -> Path
    compile_shared_library(source, name) -> Path
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

from . import cache_root

__all__ = ["build_dir", "sim_library", "compile_program", "compile_shared_library", "CXX_FLAGS", "include_dirs",
           "CORE_SOURCES", "STANDIN_SOURCES"]

_HERE = Path(__file__).resolve().parent
SIM_ROOT = _HERE / "acl_sim"
SIM_INCLUDE = SIM_ROOT / "include"
SIM_SOURCES = SIM_ROOT / "src"
#: The ACL core: the simulation and the host ACL library (host_library.py) are both built from it.
CORE_SOURCES: tuple[Path, ...] = (SIM_SOURCES / "acl_runtime.cpp", SIM_SOURCES / "probe.cpp")
#: torch_npu's stand-ins, over the core: the simulation only (acl_sim/README.md lists who uses them).
STANDIN_SOURCES: tuple[Path, ...] = (SIM_SOURCES / "torch_npu_standins.cpp",)
CSRC = _HERE.parents[1] / "csrc"  # the runtime helper

CXX_FLAGS: tuple[str, ...] = ("-std=c++17", "-O2", "-g", "-pthread", "-Wall", "-Wextra", "-Werror")



def build_dir() -> Path:
    """Where build outputs are cached (env TORCH_NPU_PATCHSET_BUILD_CACHE)."""
    d = os.environ.get("TORCH_NPU_PATCHSET_BUILD_CACHE")
    p = Path(d).expanduser() if d else cache_root.root() / "build"
    p.mkdir(parents=True, exist_ok=True)
    return p


def include_dirs() -> list[Path]:
    """Include roots for code built against the simulation: sim root, then csrc/."""
    return [SIM_INCLUDE, CSRC]


def _cxx() -> str:
    return os.environ.get("CXX") or "g++"


def _tree_files(*roots: Path) -> list[Path]:
    out: list[Path] = []
    for root in roots:
        out.extend(sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in {".h", ".hpp", ".cpp", ".cc"}))
    return out


def _digest(parts: Iterable[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:20]


def _compiler_id() -> bytes:
    try:
        out = subprocess.run([_cxx(), "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:  # pragma: no cover - environment problem
        raise RuntimeError(f"C++ compiler {_cxx()!r} is not usable: {e}") from e
    return out.encode()


def _run(cmd: Sequence[str], what: str) -> None:
    proc = subprocess.run(list(cmd), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(
            f"{what} failed (exit {proc.returncode})\ncommand: {' '.join(map(str, cmd))}\n{proc.stdout}{proc.stderr}"
        )


def _publish(tmp: Path, final: Path) -> None:
    """Atomically move a finished directory into place; a concurrent winner is fine."""
    try:
        os.rename(tmp, final)
    except OSError:
        if not final.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def sim_library() -> Path:
    """Compile the simulation sources (the core and the stand-ins) once into ``libacl_sim.a`` (cached)."""
    sources = [*CORE_SOURCES, *STANDIN_SOURCES]
    files = _tree_files(SIM_ROOT)
    key = _digest(
        [_compiler_id(), " ".join(CXX_FLAGS).encode()]
        + [str(f.relative_to(SIM_ROOT)).encode() + b"\0" + f.read_bytes() for f in files]
    )
    final = build_dir() / f"acl_sim-{key}"
    lib = final / "libacl_sim.a"
    if lib.exists():
        return lib
    tmp = Path(tempfile.mkdtemp(prefix=f".acl_sim-{key}-", dir=build_dir()))
    try:
        objs = []
        for src in sources:
            obj = tmp / (src.stem + ".o")
            _run([_cxx(), *CXX_FLAGS, f"-I{SIM_INCLUDE}", "-c", str(src), "-o", str(obj)], f"compiling {src.name}")
            objs.append(str(obj))
        _run(["ar", "rcs", str(tmp / "libacl_sim.a"), *objs], "archiving libacl_sim.a")
        _publish(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return lib


_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


def compile_program(source: str, name: str, extra_include_dirs: Sequence[os.PathLike | str] = (),
                    export_simulation: bool = False) -> Path:
    """Compile one C++ translation unit against the simulation and the helper.

    ``export_simulation``: the whole simulation is linked in and exported (``-rdynamic``), and
    ``dlopen`` is available, so that a shared library the program loads (one built by
    :func:`compile_shared_library`) finds its ACL and torch_npu symbols in the program, as a
    model library finds them in the process that loads it.

    Returns the path of the (cached) executable. Raises RuntimeError with the
    compiler output when compilation or linking fails.
    """
    if not _NAME_RE.match(name):
        raise ValueError(f"program name must match {_NAME_RE.pattern}: {name!r}")
    lib = sim_library()
    incs = [*include_dirs(), *(Path(d).resolve() for d in extra_include_dirs)]
    headers = _tree_files(CSRC, SIM_INCLUDE)
    key = _digest(
        [_compiler_id(), " ".join(CXX_FLAGS).encode(), source.encode(), str(lib).encode(),
         b"export" if export_simulation else b""]
        + [str(d).encode() for d in incs]
        + [str(f).encode() + b"\0" + f.read_bytes() for f in headers]
        + [str(f).encode() + b"\0" + f.read_bytes() for d in extra_include_dirs for f in _tree_files(Path(d))]
    )
    final = build_dir() / f"prog-{name}-{key}"
    exe = final / name
    if exe.exists():
        return exe
    tmp = Path(tempfile.mkdtemp(prefix=f".prog-{name}-{key}-", dir=build_dir()))
    try:
        src = tmp / f"{name}.cpp"
        src.write_text(source)
        linked = ["-Wl,--whole-archive", str(lib), "-Wl,--no-whole-archive", "-rdynamic", "-ldl"] if export_simulation \
            else [str(lib)]
        cmd = [_cxx(), *CXX_FLAGS, *(f"-I{d}" for d in incs), str(src), *linked, "-pthread", "-o", str(tmp / name)]
        _run(cmd, f"compiling {name}")
        _publish(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return exe


def compile_shared_library(source: str, name: str, cxx_flags: Sequence[str] = CXX_FLAGS) -> Path:
    """Compile one C++ translation unit into ``lib<name>.so`` against the simulation's headers only
    (not the helper's directory: what the source needs of the helper, it carries). Its ACL and
    torch_npu symbols stay undefined, for the loading program to provide
    (:func:`compile_program` with ``export_simulation``). Cached like the programs."""
    if not _NAME_RE.match(name):
        raise ValueError(f"library name must match {_NAME_RE.pattern}: {name!r}")
    flags = [*cxx_flags, "-fPIC", "-shared"]
    key = _digest([_compiler_id(), " ".join(flags).encode(), source.encode()]
                  + [str(f).encode() + b"\0" + f.read_bytes() for f in _tree_files(SIM_INCLUDE)])
    final = build_dir() / f"lib-{name}-{key}"
    lib = final / f"lib{name}.so"
    if lib.exists():
        return lib
    tmp = Path(tempfile.mkdtemp(prefix=f".lib-{name}-{key}-", dir=build_dir()))
    try:
        (tmp / f"{name}.cpp").write_text(source)
        _run([_cxx(), *flags, f"-I{SIM_INCLUDE}", str(tmp / f"{name}.cpp"), "-o", str(tmp / lib.name)],
             f"compiling lib{name}.so")
        _publish(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return lib
