"""The simulation's NPUCachingAllocator.h stand-in, and the torch types it names, offer only what the real headers and
library do (issues 17, 22, 47).

The helper takes every launch's memory on the calling thread from torch_npu's caching allocator: ``get()->allocate``
(``c10::Allocator``'s virtual, a ``c10::DataPtr``), gives a kept block back with ``recordStream`` and the DataPtr's own
deleter, asks the allocator's ``name()``, ``hasCapturesUnderway`` (from 2.7.1.post6) and ``isHistoryEnabled()``
(memory history: a free then takes the GIL) and registers its free-memory
callback in ``FreeNPUMemoryCallbacksRegistry``; the helper of commit b45157f (kept buildable for comparisons) used the
inline ``raw_alloc_with_stream``, ``raw_delete`` and ``hasCapturesUnderway``. The inline functions call through the
exported ``c10_npu::NPUCachingAllocator::allocator`` pointer. For every torch_npu release of test_sim_surface.py's
declared list (fetched with ``tooling/releases/wheels.py`` when missing, into
``~/.cache/torch-npu-inductor-patches/wheels`` or ``$TORCH_NPU_PATCHSET_WHEEL_CACHE``): each inline function the
stand-in defines is an inline function of the wheel's header with the same prototype, each virtual of its
``NPUAllocator`` a virtual of the wheel's, the header declares the allocator pointer, and ``libtorch_npu.so`` exports
it. The stand-ins of torch's ``c10::DataPtr``, ``c10::Allocator`` and ``c10::Device`` (``include/c10/core``; the
simulation is built without torch) declare only members the installed torch's headers declare, and one use of every
member compiles against both. The real-artifact tier compiles and links the helper against the wheels' headers and
libraries as a whole.
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
import test_sim_surface as sim_surface

ROOT = Path(__file__).resolve().parents[1]
STAND_IN = (ROOT / "torch_npu" / "_inductor" / "patchset" / "tooling" / "sim" / "acl_sim" / "include" / "torch_npu" / "csrc"
            / "core" / "npu" / "NPUCachingAllocator.h")
REAL_HEADER = "torch_npu/include/torch_npu/csrc/core/npu/NPUCachingAllocator.h"
ALLOCATOR_SYMBOL = "_ZN7c10_npu19NPUCachingAllocator9allocatorE"
#: ``get()`` gives the allocator object, whose virtuals the helper calls: ``allocate``, ``name`` and
#: ``hasCapturesUnderway`` (from 2.7.1.post6, asked through a detection that falls back where the member is absent).
USED_BY_THE_HELPER = {"get", "recordStream", "FreeNPUMemoryCallbacksRegistry"}
#: Declared by a macro in the real header (C10_DECLARE_REGISTRY), defined inline in the stand-in: its declaration,
#: the callback interface and the export are checked instead of an inline prototype.
REGISTRY = "FreeNPUMemoryCallbacksRegistry"
#: What b45157f's helper (memory inside the launch lambda) uses: the stand-in keeps it so that
#: the benchmark's --baseline-helper still builds that helper.
USED_BY_THE_HELPER_OF_B45157F = {"raw_alloc_with_stream", "raw_delete", "hasCapturesUnderway"}
VIRTUAL = "virtual bool hasCapturesUnderway(c10::DeviceIndex device)"
#: The virtuals of the stand-in's NPUAllocator (c10::Allocator's allocate is checked against torch's header).
VIRTUALS = {"raw_alloc_with_stream", "raw_delete", "recordStream", "hasCapturesUnderway", "name", "isHistoryEnabled"}
HELPER_DIR = ROOT / "torch_npu" / "_inductor" / "patchset" / "csrc"
#: Missing from the oldest releases (2.7.1, 2.7.1.post2); the helper falls back where it is absent, and
#: test_real_artifacts.py builds it against those releases to prove it.
ABSENT_IN_OLD_RELEASES = {"hasCapturesUnderway"}


def wheel_cache() -> Path:
    d = os.environ.get("TORCH_NPU_PATCHSET_WHEEL_CACHE")
    return Path(d).expanduser() if d else Path.home() / ".cache" / "torch-npu-inductor-patches" / "wheels"


VERSIONS = sim_surface.VERSIONS  # declared, not what the cache holds: the same tests on every machine


def wheel(version: str) -> Path:
    from torch_npu._inductor.patchset.tooling.releases import wheels as upstream_wheels

    try:
        return upstream_wheels.wheel_path(version)
    except upstream_wheels.WheelUnavailable as exc:
        if getattr(exc, "index_unreachable", False):
            pytest.skip(f"torch-npu=={version} not cached and the package index is unreachable: {exc}")
        raise

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_INLINE = re.compile(r"\binline\s+([\w:<>*&\s]+?)\s*\b(\w+)\s*\(([^()]*)\)\s*(?:const\s*)?\{")


def _norm(text: str) -> str:
    t = " ".join(text.split())
    return re.sub(r"\s*([(),&*<>:])\s*", r"\1", t)


def inline_functions(text: str) -> dict[str, str]:
    """name -> normalized 'return name(parameters)' of every inline function defined in `text`."""
    out = {}
    for m in _INLINE.finditer(_COMMENT.sub(" ", text)):
        ret = m.group(1).replace("C10_NPU_API", "").strip()
        out[m.group(2)] = _norm(f"{ret} {m.group(2)}({m.group(3)})")
    return out


def exports_of(whl: Path) -> set[str]:
    version = whl.name.split("-")[1]
    cached = wheel_cache().parent / "sim-surface" / version / "libtorch_npu.exports"
    if cached.exists():
        return set(cached.read_text().split())
    with tempfile.TemporaryDirectory() as tmp:
        so = Path(tmp) / "libtorch_npu.so"
        with zipfile.ZipFile(whl) as z, z.open("torch_npu/lib/libtorch_npu.so") as src, open(so, "wb") as dst:
            shutil.copyfileobj(src, dst)
        nm = subprocess.run(["nm", "-D", "--defined-only", str(so)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in nm.stdout.splitlines() if line.strip()}


def test_stand_in_defines_what_the_helpers_use():
    text = STAND_IN.read_text()
    assert set(inline_functions(text)) == USED_BY_THE_HELPER | USED_BY_THE_HELPER_OF_B45157F
    assert _norm(VIRTUAL) in _norm(_COMMENT.sub(" ", text))


def _caching_allocator_calls(text: str) -> set[str]:
    """The functions of ``c10_npu::NPUCachingAllocator`` that `text` calls, also through a namespace alias of it."""
    code = _COMMENT.sub(" ", text)
    names = ["NPUCachingAllocator"] + re.findall(r"namespace\s+(\w+)\s*=\s*(?:::)?c10_npu::NPUCachingAllocator\s*;", code)
    return {f for n in names for f in re.findall(rf"\b{n}::(\w+)\s*\(", code)}


def _virtuals(text: str) -> dict[str, str]:
    """name -> normalized declaration (up to its parameters' close) of every virtual in the NPUAllocator class."""
    body = _COMMENT.sub(" ", text).split("class NPUAllocator", 1)[1].split("\n};", 1)[0]
    return {m.group(2): _norm(m.group(1)) for m in re.finditer(r"(virtual\s+[\w:<>*&\s]+?\b(\w+)\s*\([^()]*\))", body)}


def test_the_helper_calls_only_get_record_stream_and_the_registry():
    text = "".join(p.read_text() for p in sorted(HELPER_DIR.rglob("*.h")))
    assert _caching_allocator_calls(text) == USED_BY_THE_HELPER
    code = _COMMENT.sub(" ", text)
    assert {"allocate", "name", "hasCapturesUnderway", "isHistoryEnabled"} <= set(re.findall(r"->(\w+)\s*\(", code))


def test_the_alias_aware_parser_sees_calls_through_an_alias():
    text = "namespace na = c10_npu::NPUCachingAllocator;\nvoid f() { na::get()->allocate(1); na::recordStream(p, s); }"
    assert _caching_allocator_calls(text) == {"get", "recordStream"}


def test_the_helper_of_b45157f_calls_what_the_stand_in_keeps_for_it():
    try:
        names = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", "b45157f",
                                "torch_npu/_inductor/patchset/csrc"], capture_output=True, text=True,
                               check=True).stdout.split()
    except (OSError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"commit b45157f not available: {exc}")
    text = "".join(subprocess.run(["git", "-C", str(ROOT), "show", f"b45157f:{n}"], capture_output=True, text=True,
                                  check=True).stdout for n in names)
    assert _caching_allocator_calls(text) == USED_BY_THE_HELPER_OF_B45157F


def test_prototype_parser_sees_a_difference():
    ours = inline_functions("inline void* raw_alloc_with_stream(size_t nbytes, aclrtStream stream) { }")
    theirs = inline_functions("inline void* raw_alloc_with_stream(size_t nbytes, int stream)\n{\n}")
    assert ours and theirs and ours != theirs


@pytest.mark.skipif(shutil.which("nm") is None, reason="nm is needed for the export table")
@pytest.mark.parametrize("version", VERSIONS)
def test_stand_in_matches_the_wheel(version):
    whl = wheel(version)
    with zipfile.ZipFile(whl) as z:
        if REAL_HEADER not in z.namelist():
            pytest.fail(f"{whl.name} ships no {REAL_HEADER}")
        real_text = z.read(REAL_HEADER).decode("utf-8", "replace")
    real = inline_functions(real_text)
    for name, proto in inline_functions(STAND_IN.read_text()).items():
        if name in ABSENT_IN_OLD_RELEASES and name not in real and name not in real_text:
            continue
        if name == REGISTRY:  # the helper registers its free-memory callback there (docs/design.md)
            assert re.search(r"C10_DECLARE_REGISTRY\(\s*FreeNPUMemoryCallbacksRegistry\s*,\s*FreeMemoryCallback\s*\)",
                             real_text), whl.name
            assert _norm("virtual bool Execute() = 0;") in _norm(_COMMENT.sub(" ", real_text)), whl.name
            assert any(REGISTRY in sym for sym in exports_of(whl)), f"{whl.name}: {REGISTRY} not exported"
            continue
        assert real.get(name) == proto, f"{whl.name}: stand-in `{proto}` vs real `{real.get(name)}`"
    assert re.search(r"extern\s+std::atomic<\s*NPUAllocator\s*\*\s*>\s+allocator\s*;", real_text), whl.name
    if "hasCapturesUnderway" in real_text:  # the allocator's virtual, as the stand-in has it
        assert _norm(VIRTUAL) in _norm(_COMMENT.sub(" ", real_text)), whl.name
    ours, theirs = _virtuals(STAND_IN.read_text()), _virtuals(real_text)
    assert set(ours) == VIRTUALS, ours
    for name, proto in ours.items():
        if name in ABSENT_IN_OLD_RELEASES and name not in theirs:
            continue
        assert theirs.get(name) == proto, f"{whl.name}: stand-in `{proto}` vs real `{theirs.get(name)}`"
    # an allocator of torch's: c10::Allocator, or (2.14) c10::DeviceAllocator, which torch derives from it
    assert re.search(r"class\s+NPUAllocator\s*:\s*public\s+c10::(?:Device)?Allocator\b", real_text), whl.name
    assert re.search(r"class\s+NPUAllocator\s*:\s*public\s+c10::Allocator\b", STAND_IN.read_text())
    assert ALLOCATOR_SYMBOL in exports_of(whl), f"{whl.name}: libtorch_npu.so does not export the allocator pointer"


C10_STAND_IN = STAND_IN.parents[4] / "c10" / "core"  # include/c10/core: Device.h, Allocator.h


def torch_include() -> Path:
    spec = importlib.util.find_spec("torch")
    if spec is None or spec.origin is None:
        pytest.skip("torch is not installed")
    return Path(spec.origin).parent / "include"


def _with_included(inc: Path, header: str) -> str:
    """`header` and the torch headers it includes, recursively, comments removed: torch 2.10+ declares
    ``c10::DeviceType`` in ``torch/headeronly/core/DeviceType.h``, which ``c10/core/DeviceType.h`` includes."""
    texts: dict[str, str] = {}
    todo = [header]
    while todo:
        name = todo.pop()
        if name in texts or not (inc / name).is_file():
            continue
        texts[name] = _COMMENT.sub(" ", (inc / name).read_text())
        todo += re.findall(r'#\s*include\s*[<"]((?:c10|torch/headeronly)/[^>"]+)[>"]', texts[name])
    return "\n".join(texts.values())


def _without_bodies(text: str) -> str:
    """`text` with every brace-enclosed body emptied (innermost first) and member initialiser lists dropped."""
    while True:
        shorter = re.sub(r"\{[^{}]*\}", "@", text)
        if shorter == text:
            return re.sub(r"\)\s*(?:noexcept\s*)?:[^@;]*@", ") @", text)
        text = shorter


def test_device_stand_in_is_torchs():
    inc = torch_include()
    device_h = _COMMENT.sub(" ", (inc / "c10" / "core" / "Device.h").read_text())
    device_type_h = _with_included(inc, "c10/core/DeviceType.h")
    ours = _COMMENT.sub(" ", (C10_STAND_IN / "Device.h").read_text())
    assert re.search(r"using\s+DeviceIndex\s*=\s*int8_t\s*;", device_h)
    assert re.search(r"using\s+DeviceIndex\s*=\s*int8_t\s*;", ours)
    torchs = re.search(r"enum\s+class\s+DeviceType\s*:\s*int8_t\s*\{([^}]*)\}", device_type_h)
    assert torchs, "torch declares no `enum class DeviceType : int8_t`"
    enumerators = dict(re.findall(r"\b(\w+)\s*=\s*(\d+)\s*,", ours.split("enum class DeviceType", 1)[1].split("}", 1)[0]))
    assert enumerators == {"CPU": "0", "PrivateUse1": "20"}
    for name, value in enumerators.items():
        assert re.search(rf"\b{name}\s*=\s*{value}\s*,", torchs.group(1)), name
    ctor = _norm("Device(DeviceType type, DeviceIndex index = -1)")
    assert ctor in _norm(device_h) and ctor in _norm(ours)
    public = _without_bodies(ours.split("struct Device final", 1)[1].split("private:", 1)[0])
    assert set(re.findall(r"(\w+)\s*\([^;@]*\)", public)) == {"Device"}, "Device: only its constructor"


#: The public members of the DataPtr stand-in, each as torch's c10/core/Allocator.h declares it (or, for the
#: deleter type, c10/util/UniqueVoidPtr.h).
DATAPTR_MEMBERS = {
    "DataPtr": r"DataPtr\(\)\s*:\s*device_\(DeviceType::CPU\)",
    "DataPtr(ctx)": r"DataPtr\(void\s*\*\s*data,\s*void\s*\*\s*ctx,\s*DeleterFnPtr\s+ctx_deleter,\s*Device\s+device\)",
    "clear": r"void\s+clear\(\)",
    "get": r"void\s*\*\s*get\(\)\s*const",
    "release_context": r"void\s*\*\s*release_context\(\)",
    "get_deleter": r"DeleterFnPtr\s+get_deleter\(\)\s*const",
    "operator bool": r"operator\s+bool\(\)\s*const",
}
#: One use of every member of the stand-ins of torch's types, compiled against the stand-ins and against torch.
_C10_USE = r"""
#include <c10/core/Allocator.h>
#include <type_traits>
#include <utility>
static void deleter(void *) {}
static_assert(!std::is_copy_constructible<c10::DataPtr>::value && !std::is_copy_assignable<c10::DataPtr>::value,
              "DataPtr is move-only");
static_assert(std::is_nothrow_move_constructible<c10::DataPtr>::value, "DataPtr moves without throwing");
static_assert(std::is_same<c10::DeleterFnPtr, void (*)(void *)>::value, "DeleterFnPtr");
static_assert(std::is_same<c10::DeviceIndex, int8_t>::value, "DeviceIndex");
c10::DataPtr use(c10::Allocator *allocator, int8_t index) {
  c10::DataPtr a = allocator->allocate(64);
  c10::DataPtr b(a.get(), a.get(), &deleter, c10::Device(c10::DeviceType::PrivateUse1, index));
  c10::DataPtr c;
  c = std::move(b);
  c10::DataPtr d(std::move(c));
  if (!d) return c10::DataPtr();
  const c10::DeleterFnPtr del = a.get_deleter();
  del(a.release_context());
  a.clear();
  (void)c10::Device(c10::DeviceType::CPU);
  return d;
}
"""


def test_data_ptr_and_allocator_stand_ins_are_torchs(tmp_path):
    inc = torch_include()
    real = _COMMENT.sub(" ", (inc / "c10" / "core" / "Allocator.h").read_text())
    unique = _COMMENT.sub(" ", (inc / "c10" / "util" / "UniqueVoidPtr.h").read_text())
    ours = _COMMENT.sub(" ", (C10_STAND_IN / "Allocator.h").read_text())
    assert re.search(r"using\s+DeleterFnPtr\s*=\s*void\s*\(\s*\*\s*\)\s*\(\s*void\s*\*\s*\)\s*;", unique)
    assert re.search(r"using\s+DeleterFnPtr\s*=\s*void\s*\(\s*\*\s*\)\s*\(\s*void\s*\*\s*\)\s*;", ours)
    public = _without_bodies(ours.split("class DataPtr", 1)[1].split("private:", 1)[0])
    names = set(re.findall(r"(~?\w+|operator=|operator bool)\s*\([^;@]*\)", public))
    assert names == {"DataPtr", "operator=", "~DataPtr", "clear", "get", "release_context", "get_deleter",
                     "operator bool"}, names
    for what, sig in DATAPTR_MEMBERS.items():
        assert re.search(sig, real), f"torch's DataPtr has no {what}"
        assert re.search(sig, ours), f"the stand-in has no {what}"
    allocate = r"virtual\s+DataPtr\s+allocate\(size_t\s+n\)\s*=\s*0\s*;"
    assert re.search(allocate, real) and re.search(allocate, ours)
    allocator = ours.split("struct Allocator", 1)[1]
    assert set(re.findall(r"(~?\w+)\s*\([^;{]*\)", allocator)) == {"~Allocator", "allocate"}
    src = tmp_path / "c10_use.cpp"
    src.write_text(_C10_USE)
    for root in (STAND_IN.parents[4], inc):  # the stand-ins, then torch's own headers
        proc = subprocess.run([os.environ.get("CXX") or "g++", "-std=c++17", "-fsyntax-only", f"-I{root}", str(src)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"against {root}:\n{proc.stderr[-3000:]}"
