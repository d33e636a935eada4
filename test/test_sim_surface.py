"""The host ACL simulation offers exactly the real surface, no more (issue 10, item 2).

``acl_sim/`` is a test double and dry-run tool. Code tested against it must
compile against, and load with, what a real torch_npu install provides. So:

* every function its stand-in ACL headers (``acl_sim/include/acl``) declare is
  an ``ACL_FUNC_VISIBILITY`` function of the real ACL headers shipped in each
  torch_npu wheel (what libascendcl exports), with the same prototype: a
  translation unit that includes the wheel's own ``acl/acl.h`` and then
  re-declares the simulation's prototypes must compile (a different C
  prototype is a hard error), and every constant, enum value and typedef the
  simulation declares must equal the real one (``static_assert``s in the same
  translation unit);
* its torch_npu stand-ins declare only functions the wheel's headers declare,
  with the same prototype (text comparison, whitespace-insensitive), and its
  ``at::Tensor`` only members torch's has;
* the simulation library defines no global symbol outside its own
  ``acl_sim`` namespace that the real libraries do not export: the
  ``ACL_FUNC_VISIBILITY`` names of the wheel's ACL headers and
  ``nm -D --defined-only torch_npu/lib/libtorch_npu.so``.

Wheels come from the wheel cache (``~/.cache/torch-npu-inductor-patches/wheels``
or ``$TORCH_NPU_PATCHSET_WHEEL_CACHE``) through ``tooling/releases/wheels``,
which downloads a missing one: the required releases (2.7.1.post10 and 2.14.0)
are checked on a fresh machine too, and only an unreachable package index
skips them, saying so. So are the other releases the suite fetches anyway
(``RELEASES``: a declared list, never what the cache holds, so that a fresh
machine and a warm one collect the same tests). What is
taken from each (headers, the export table as text) is cached in the wheel
cache's ``sim-surface/<version>/``. Wheels whose ACL headers have aclrtLaunchKernelWithHostArgs
must match the whole surface; the older ones (rtKernelLaunch launchers, where
the helper is not used) lack that call, aclrtGetHardwareSyncAddr and, in
2.7.1, the capture error codes: there only what they declare is compared.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PATCHSET = ROOT / "torch_npu" / "_inductor" / "patchset"
SIM_INCLUDE = PATCHSET / "tooling" / "sim" / "acl_sim" / "include"
SIM_ACL = SIM_INCLUDE / "acl"
SIM_TORCH_NPU = SIM_INCLUDE / "torch_npu"
SIM_TENSOR = SIM_INCLUDE / "ATen" / "core" / "Tensor.h"
CXX = os.environ.get("CXX") or "g++"

#: The two kernel-launch entry points are absent from the ACL headers of the
#: releases whose C++ wrapper launches through rtKernelLaunch (2.8.0.post5,
#: 2.9.1, ...): there the helper is not used at all.
RT_LAUNCH_ONLY = {"aclrtGetHardwareSyncAddr", "aclrtLaunchKernelWithHostArgs"}
REQUIRED = ("2.7.1.post10", "2.14.0")


def _load_sim_build():
    from torch_npu._inductor.patchset.tooling.sim import build as sim_build

    return sim_build


def wheel_cache() -> Path:
    from torch_npu._inductor.patchset.tooling.releases import wheels as upstream_wheels

    return upstream_wheels.cache_dir()


def wheel_file(version: str) -> Path:
    """The cached wheel, downloaded on first use; skips only when the package index cannot be reached."""
    from torch_npu._inductor.patchset.tooling.releases import wheels as upstream_wheels

    try:
        return upstream_wheels.wheel_path(version)
    except upstream_wheels.WheelUnavailable as exc:
        if exc.index_unreachable:
            pytest.skip(f"package index unreachable, torch-npu=={version} not cached: {exc}")
        pytest.fail(f"torch-npu=={version}: {exc}")


#: Every release checked, downloaded in the test when missing: the required two and the others the suite
#: fetches anyway (test_aot.py's and test_real_artifacts.py's wheels, test_upstream_torch_npu.py's older
#: layouts). Declared, not read from the wheel cache: a fresh clone collected 10 tests fewer than a warm
#: one here (and pytest-xdist's workers must collect the same tests).
RELEASES = ("2.7.1", "2.7.1.post2", "2.7.1.post4", "2.7.1.post6", "2.7.1.post10", "2.7.1.post11", "2.8.0.post5",
            "2.9.1", "2.11.0.post3", "2.12.0.post3", "2.14.0")
VERSIONS = sorted(RELEASES)
needs_tools = pytest.mark.skipif(shutil.which(CXX) is None or shutil.which("nm") is None,
                                 reason="a C++ compiler and nm are needed")


# ---- what a wheel provides (cached extraction) ------------------------------------------
class Wheel:
    """Headers and export table of one torch_npu wheel."""

    def __init__(self, version: str):
        self.version = version
        self.dir = self._extract()
        inc = self.dir / "include"
        self.acl_root = inc if (inc / "acl" / "acl.h").exists() else inc / "third_party" / "acl" / "inc"
        assert (self.acl_root / "acl" / "acl.h").exists(), f"{version}: no acl/acl.h in the wheel"
        self.include = inc
        self.exports = set((self.dir / "libtorch_npu.exports").read_text().split())
        self.acl_functions = acl_function_names(self.acl_root / "acl")

    def _extract(self) -> Path:
        # emptied with the wheel cache; "-3": NPUStream.h (issue 39), then NPUFunctions.h joined the headers kept
        final = wheel_cache() / "sim-surface-3" / self.version
        if (final / ".complete").exists():
            return final
        whl = wheel_file(self.version)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{self.version}-", dir=final.parent))
        try:
            with zipfile.ZipFile(whl) as z:
                for name in z.namelist():
                    if name.startswith("torch_npu/include/") and not name.endswith("/"):
                        if "/acl/" in name or name.endswith(("NPUWorkspaceAllocator.h", "OpCommand.h",
                                                             "OpParamMaker.h", "NPUMacros.h", "NPUStream.h",
                                                             "NPUFunctions.h")):
                            dest = tmp / "include" / name[len("torch_npu/include/"):]
                            dest.parent.mkdir(parents=True, exist_ok=True)
                            dest.write_bytes(z.read(name))
                so = tmp / "libtorch_npu.so"
                with z.open("torch_npu/lib/libtorch_npu.so") as src, open(so, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            nm = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True, check=True)
            syms = sorted({line.split()[-1] for line in nm.stdout.splitlines() if line.strip()})
            (tmp / "libtorch_npu.exports").write_text("\n".join(syms) + "\n")
            so.unlink()
            (tmp / ".complete").write_text("")
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / ".complete").exists():
                    raise
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return final


_WHEELS: dict[str, Wheel] = {}


def wheel(version: str) -> Wheel:
    if version not in _WHEELS:
        _WHEELS[version] = Wheel(version)
    return _WHEELS[version]


# ---- parsing ----------------------------------------------------------------------
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_FUNC = re.compile(r"ACL_FUNC_VISIBILITY\s+([^;{]*?)\b(\w+)\s*\(([^;{]*?)\)\s*(?:ACL_DEPRECATED\w*(?:\([^)]*\))?\s*)?;",
                   re.S)


def _text(path: Path) -> str:
    return _COMMENT.sub(" ", path.read_text(errors="replace"))


def acl_function_names(acl_dir: Path) -> set[str]:
    names = set()
    for h in acl_dir.rglob("*.h"):
        names.update(m.group(2) for m in _FUNC.finditer(_text(h)))
    return names


def sim_acl_declarations() -> list[tuple[str, str]]:
    """(name, full declaration without ACL_FUNC_VISIBILITY) of every function the stand-ins declare."""
    out = []
    for h in sorted(SIM_ACL.rglob("*.h")):
        for m in _FUNC.finditer(_text(h)):
            decl = " ".join(f"{m.group(1)} {m.group(2)}({m.group(3)});".split())
            out.append((m.group(2), decl))
    return out


def sim_acl_constants() -> list[tuple[str, str]]:
    """(name, value) of every constant the stand-ins declare: static const ints, #defines, enum members."""
    out = []
    for h in sorted(SIM_ACL.rglob("*.h")):
        t = _text(h)
        out += re.findall(r"static\s+const\s+int\s+(\w+)\s*=\s*([-\w]+)\s*;", t)
        out += [(n, v) for n, v in re.findall(r"#define\s+(ACL_\w+)\s+(-?\d+)\b", t)]
        for body in re.findall(r"typedef\s+enum\s*\w*\s*\{(.*?)\}", t, re.S):
            nxt = 0
            for item in [i.strip() for i in body.split(",") if i.strip()]:
                if "=" in item:
                    n, v = [x.strip() for x in item.split("=", 1)]
                    nxt = int(v, 0)
                else:
                    n = item
                out.append((n, str(nxt)))
                nxt += 1
    return out


def sim_acl_typedefs() -> list[tuple[str, str]]:
    out = []
    for h in sorted(SIM_ACL.rglob("*.h")):
        out += [(n, t.strip()) for t, n in re.findall(r"typedef\s+((?:void|int|int32_t|uint32_t)\s*\*?)\s*(\w+)\s*;",
                                                     _text(h))]
    return out


def _norm(decl: str) -> str:
    d = " ".join(decl.replace("std::string", "string").split())
    d = re.sub(r"\s*([(),&*])\s*", r"\1", d)
    return d


# ---- symbol check (a function, so that it can be tested on a made-up table) ------------
def demangle(names: list[str]) -> dict[str, str]:
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines()))


def foreign_symbols(defined: list[tuple[str, str]], real: set[str], allowed_missing: set[str] = frozenset()) -> list[str]:
    """Symbols (name, nm type) the simulation defines that the real libraries do not export.

    Ignored: the simulation's own namespace, and weak definitions of inline or
    template code from the standard library and the at::Tensor stand-in (not
    an API the simulation provides). Any symbol in torch_npu's or c10's
    namespaces must be exported by the real library, weak or not.
    """
    dem = demangle([n for n, _ in defined])
    bad = []
    for name, kind in defined:
        d = dem.get(name, name)
        base = re.sub(r"^(typeinfo name for|typeinfo for|vtable for|guard variable for|VTT for) ", "", d)
        if base.startswith(("acl_sim::", "void acl_sim::", "(anonymous namespace)")):
            continue
        if name in real or name in allowed_missing:
            continue
        ours_api = base.startswith(("c10_npu::", "at_npu::", "c10::")) or re.search(r"\b(c10_npu|at_npu)::", d)
        if kind in "WVu" and not ours_api:
            continue  # inline / template instantiations (std::, at::Tensor's inline members)
        bad.append(f"{d}  [{name}, nm type {kind}]")
    return bad


def sim_defined_symbols() -> list[tuple[str, str]]:
    lib = _load_sim_build().sim_library()
    out = subprocess.run(["nm", "-g", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3:
            syms.append((parts[2], parts[1]))
    return syms


# ---- tests ------------------------------------------------------------------------
@pytest.mark.parametrize("version", REQUIRED)
def test_required_wheels_available(version):
    """On a fresh machine the required wheels are downloaded here, not skipped."""
    whl = wheel_file(version)
    assert whl.name.startswith(f"torch_npu-{version}-") and whl.stat().st_size > 0


def test_stand_ins_drop_what_no_wheel_exports():
    text = "".join(p.read_text() for p in SIM_INCLUDE.rglob("*.h"))
    assert "malloc_with_stream" not in _COMMENT.sub(" ", text)
    # the workspace allocator's one exported entry point returns a tensor: no DataPtr there (its unexported
    # malloc_with_stream returned one); the DataPtr stand-in is torch's (c10/core/Allocator.h, held to torch's own)
    workspace = _COMMENT.sub(" ", (SIM_TORCH_NPU / "csrc" / "core" / "npu" / "NPUWorkspaceAllocator.h").read_text())
    assert "DataPtr" not in workspace


def test_foreign_symbol_check_catches_malloc_with_stream():
    real = {"_ZN6at_npu6native18allocate_workspaceEmPv", "aclrtMalloc"}
    defined = [("_ZN6at_npu6native18allocate_workspaceEmPv", "T"), ("aclrtMalloc", "T"),
               ("_ZN7c10_npu21NPUWorkspaceAllocator18malloc_with_streamEmPv", "T"),
               ("_ZN7acl_sim8countersEv", "T"), ("aclrtNotReal", "T"),
               ("_ZNSt6vectorIiSaIiEE9push_backERKi", "W")]
    bad = foreign_symbols(defined, real)
    assert len(bad) == 2, bad
    assert any("c10_npu::NPUWorkspaceAllocator::malloc_with_stream" in b for b in bad)
    assert any("aclrtNotReal" in b for b in bad)


def host_args_release(w: "Wheel") -> bool:
    """Its ACL headers have the launch entry point the helper's launchers use (all of the surface must match)."""
    return "aclrtLaunchKernelWithHostArgs" in w.acl_functions


@needs_tools
@pytest.mark.parametrize("version", VERSIONS)
def test_sim_acl_functions_are_real(version):
    w = wheel(version)
    declared = {n for n, _ in sim_acl_declarations()}
    missing = declared - w.acl_functions
    if version in REQUIRED or host_args_release(w):
        assert not missing, f"{version}: the simulation declares ACL functions the wheel's headers lack: {missing}"
    assert missing <= RT_LAUNCH_ONLY, f"{version}: not in the wheel's ACL headers: {sorted(missing)}"


@needs_tools
@pytest.mark.parametrize("version", VERSIONS)
def test_sim_acl_prototypes_and_values_match(version, tmp_path):
    w = wheel(version)
    real_text = " ".join(_text(p) for p in (w.acl_root / "acl").rglob("*.h"))
    full = version in REQUIRED or host_args_release(w)

    def present(name: str) -> bool:
        return bool(re.search(rf"\b{name}\b", real_text))

    absent = [n for n, _ in sim_acl_constants() + sim_acl_typedefs() if not present(n)]
    assert not (full and absent), f"{version}: the simulation declares names the wheel's ACL headers lack: {absent}"
    lines = ['#include "acl/acl.h"', "#include <cstddef>", "#include <type_traits>", 'extern "C" {']
    for name, decl in sim_acl_declarations():
        if name in w.acl_functions:
            lines.append(decl)
    lines.append("}")
    for name, value in sim_acl_constants():
        if present(name):
            lines.append(f'static_assert(static_cast<long long>({name}) == {value}LL, "{name} != {value}");')
    for name, typ in sim_acl_typedefs():
        if present(name):
            lines.append(f'static_assert(std::is_same<{name}, {typ}>::value, "typedef {name} is not {typ}");')
    if present("aclrtPlaceHolderInfo"):
        lines.append('static_assert(sizeof(aclrtPlaceHolderInfo) == 8 && offsetof(aclrtPlaceHolderInfo, dataOffset) '
                     '== 4, "aclrtPlaceHolderInfo layout");')
    lines.append("int main() { return 0; }")
    src = tmp_path / "surface.cpp"
    src.write_text("\n".join(lines) + "\n")
    proc = subprocess.run([CXX, "-std=c++17", "-fsyntax-only", f"-I{w.acl_root}", str(src)],
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"{version}: the simulation's ACL surface differs from the wheel's:\n{proc.stderr[-4000:]}"


#: A function declaration (not a definition), with torch_npu's export macros.
_DECLARATION = r"((?!return\b)(?:TORCH_NPU_API\s+|C10_NPU_API\s+|static\s+)?[\w:<>]+\s+\w+\s*\([^;{]*\))\s*;"
#: What the stand-ins declare (defined in the simulation library, exported by every libtorch_npu.so): RunOpApiV2 the
#: generated launcher's launchKernel; allocate_workspace torch_npu's own V2/DVM operators in the simulation, and the
#: helper of commit b45157f (comparisons); the streams the helper and the simulation's users launch on.
DECLARED = {"allocate_workspace", "RunOpApiV2", "getNPUStreamFromPool", "getStreamFromPool", "getCurrentNPUStream",
            "setCurrentNPUStream"}


def _sim_torch_npu_declarations() -> list[tuple[str, str]]:
    """(header path relative to include/, normalized declaration) of functions the stand-ins declare."""
    out = []
    for h in sorted(SIM_TORCH_NPU.rglob("*.h")):
        for m in re.finditer(r"^\s*" + _DECLARATION, _text(h), re.M):
            out.append((str(h.relative_to(SIM_INCLUDE)), _norm(m.group(1))))
    return out


def _public_members(text: str, cls: str) -> set[str]:
    """Names of the members declared or defined in the public part of `class cls` (the first public: section)."""
    public = text.split(f"class {cls}", 1)[1].split("public:", 1)[1].split("private:", 1)[0]
    names = set(re.findall(r"(operator\s*[^\s(]+|\w+)\s*\([^;{]*\)\s*(?:const\s*)?(?:noexcept\s*)?[;{]", public))
    return names - {"if", "while", "for", "return"}


@needs_tools
@pytest.mark.parametrize("version", VERSIONS)
def test_sim_torch_npu_prototypes_match(version):
    w = wheel(version)
    decls = _sim_torch_npu_declarations()
    assert {d.split("(")[0].split()[-1] for _, d in decls} == DECLARED, decls
    for rel, decl in decls:
        real_h = w.include / rel
        assert real_h.exists(), f"{version}: the wheel has no {rel}"
        real = {_norm(m.group(1)) for m in re.finditer(_DECLARATION, _text(real_h))}
        assert decl in real, f"{version}: {rel} does not declare `{decl}`"
    opm = _text(w.include / "torch_npu/csrc/framework/OpParamMaker.h")
    assert re.search(r"using\s+PROC_FUNC\s*=\s*std::function<int\(\)>\s*;", opm), version
    # NPUStream: the stand-in's public members are the real class's, with the real prototypes (stream(need_empty) is
    # defined in the simulation library, as libtorch_npu.so exports it; the others inline, as the real header has them)
    stream_text = _text(w.include / "torch_npu/csrc/core/npu/NPUStream.h")
    stream_h = _norm(stream_text)
    ours = _text(SIM_TORCH_NPU / "csrc/core/npu/NPUStream.h")
    assert _public_members(ours, "C10_NPU_API NPUStream") == {"operator==", "operator!=", "device_index", "id", "stream"}
    assert re.search(r"class\s+C10_NPU_API\s+NPUStream\b", stream_text), version
    for proto in ("aclrtStream stream(const bool need_empty) const;", "c10::DeviceIndex device_index() const",
                  "c10::StreamId id() const",
                  "bool operator==(const NPUStream& other) const noexcept",
                  "bool operator!=(const NPUStream& other) const noexcept"):
        assert _norm(proto) in stream_h, (version, proto)
        assert _norm(proto) in _norm(ours), proto
    # the device the allocator's hasCapturesUnderway is asked about (the NPUFunctions.h stand-in, inline)
    functions_h = _norm(_text(w.include / "torch_npu/csrc/core/npu/NPUFunctions.h"))
    assert _norm("C10_NPU_API c10::DeviceIndex current_device();") in functions_h, version
    assert re.search(r"class\s+TORCH_NPU_API\s+OpCommand\b", _text(w.include / "torch_npu/csrc/framework/OpCommand.h"))


def test_tensor_stand_in_has_only_real_members():
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        pytest.skip("torch is not installed")
    core = Path(spec.origin).parent / "include" / "ATen" / "core"
    real = _text(core / "TensorBody.h") + _text(core / "TensorBase.h")
    ours = _text(SIM_TENSOR)
    public = ours.split("class Tensor", 1)[1].split("public:", 1)[1].split("private:", 1)[0]
    storage = ours.split("class Storage", 1)[1].split("public:", 1)[1].split("private:", 1)[0]
    storage_members = set(re.findall(r"(\w+)\s*\([^;{]*\)\s*(?:const\s*)?(?:noexcept\s*)?[:{]", storage))
    assert storage_members <= {"Storage", "data"}, f"c10::Storage stand-in members beyond data(): {storage_members}"
    assert re.search(r"const\s+void\s*\*\s*data\(\)\s*const", _text(core.parent.parent / "c10" / "core" / "Storage.h"))
    names = set(re.findall(r"^\s*(?:[\w:*&<> ]+\s)?(\w+)\s*\([^;{]*\)\s*(?:const\s*)?(?:&\s*)?(?:noexcept\s*)?[:{=]",
                           public, re.M))
    names -= {"if", "while", "for", "return", "swap_"}
    assert names <= {"Tensor", "operator", "data_ptr", "defined", "reset", "storage"}, \
        f"public members beyond torch's: {names}"
    for sig in (r"void\s*\*\s*data_ptr\(\)\s*const", r"bool\s+defined\(\)\s*const", r"void\s+reset\(\)",
                r"Storage\s*&?\s*storage\(\)\s*const",
                r"Tensor\(\)\s*=\s*default", r"Tensor\s*&\s*operator=\(const\s+Tensor\s*&\s*\w*\)\s*&",
                r"Tensor\s*&\s*operator=\(Tensor\s*&&\s*\w*\)\s*&"):
        assert re.search(sig, ours), f"stand-in lacks {sig}"
        assert re.search(sig, real), f"torch's at::Tensor has no {sig}"


@needs_tools
def test_sim_library_defines_only_real_exports():
    defined = sim_defined_symbols()
    names = {n for n, _ in defined}
    assert "_ZN6at_npu6native18allocate_workspaceEmPv" in names
    assert any("RunOpApiV2" in n for n in names)
    problems = {}
    for version in VERSIONS:
        w = wheel(version)
        allowed = RT_LAUNCH_ONLY if not (version in REQUIRED or host_args_release(w)) else set()
        bad = foreign_symbols(defined, w.exports | w.acl_functions, allowed)
        if bad:
            problems[version] = bad
    assert not problems, "the simulation defines symbols no real library exports:\n" + "\n".join(
        f"{v}:\n  " + "\n  ".join(b) for v, b in problems.items())
