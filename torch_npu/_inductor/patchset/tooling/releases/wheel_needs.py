"""What a torch_npu wheel asks of CANN, read from the wheel itself: the host ACL library's shopping list.

* **imports**: C functions the wheel's shared objects (``torch_npu/lib/*.so``, ``torch_npu/_C*.so``)
  leave undefined after the wheel's own, torch's, Python's and the system's libraries: the dynamic
  loader must find each (Python loads extensions with RTLD_NOW).
* **lookup candidates**: names torch_npu resolves by name at run time. Its ``FunctionLoader``
  (``TORCH_NPU_REGISTER_FUNCTION(libascendcl, aclrtMallocAlign32)`` and the like) keeps each name as a
  string literal, and its op-plugin looks op-api functions up with dlsym in ``libopapi.so``
  (``GetOpApiFuncAddr("aclnnInplaceFillScalar")``), so every identifier string of the objects'
  read-only data in the families of the libraries the double stands for (``acl*`` with op-api's
  ``aclnn*``, ``rt*``, ``Msprof*``, ``Hccl*``) is a candidate; the build keeps the ones a header
  declares (the cross-check: an operator no header declares stays absent, dlsym answers NULL).
* **launcher calls**: what the C++ the wheel's Inductor code generates calls (``aclrtBinaryLoadFromData``,
  ``rtKernelLaunch``...), read from its Python sources: the launcher's shared object resolves them.
* **library names**: the NEEDED names nothing on the machine provides, and the names torch_npu opens
  by name (:data:`DLOPENED`, each provided or not with why).

Pure functions over an extracted wheel and a few library folders; nothing is loaded.
"""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path

from . import elf

__all__ = ["WheelNeeds", "read_needs", "DLOPENED", "SKIPPED_OBJECTS", "system_library_paths"]

#: Shared objects of the wheel left out of the scan, with why.
SKIPPED_OBJECTS = {
    "libop_plugin_atb.so": "torch_npu's ATB operators (torch_npu.op_plugin.atb), loaded only when one runs; "
                           "it NEEDs libatb.so (Ascend Transformer Boost, not CANN's runtime), which is not provided",
}

#: Names torch_npu opens by name (its FunctionLoader adds ".so"), found as strings in the wheel:
#: provided (the double under that name) or not, with why. A name not listed here is reported as
#: unclassified (and not provided), so a new release shows it.
DLOPENED: dict[str, tuple[bool, str]] = {
    "libascendcl": (True, "ACL runtime: the functions torch_npu resolves by name (aclrtMallocAlign32, ...)"),
    "libacl_op_compiler": (True, "ACL operator compiler: aclSetCompileopt at device initialisation"),
    "libhccl": (True, "HCCL: collective functions resolved by name (failing stubs: no collectives here)"),
    "libruntime.so": (True, "CANN runtime: rt* functions of the older launch layout (rtKernelLaunch)"),
    "libopapi": (True, "op-api operators: torch_npu's FunctionLoader opens it (aclnnSilentCheck...: absent)"),
    "libopapi.so": (True, "op-api operators: op-plugin's GetOpApiFuncAddr dlopens it and dlsyms each aclnn* and "
                          "aclCreateTensor...; the double implements aclnnInplaceFillScalar (fill_, torch.npu.graph's "
                          "generator state) and aclnnInplaceZero (zero_), every other operator is absent: op-plugin "
                          "falls back to aclop or stops, loudly either way"),
    "libopapi_": (False, "a prefix of op-api library names, not a library (op-plugin lists libopapi_*.so under "
                         "ASCEND_HOME_PATH/lib64 only; unset here)"),
    "libcust_opapi.so": (False, "custom operators: op-plugin opens it only by full path under ASCEND_CUSTOM_OPP_PATH or "
                                "the vendors folder of ASCEND_OPP_PATH, both unset here"),
    "libnnopbase": (True, "op-api's base: aclCreateTensor, aclCreateScalar and aclDestroy* (acl_meta.h), "
                          "aclDestroyAclOpExecutor (absent: no repeatable executors)"),
    "libaclnn_": (False, "op-plugin's fallback op-api libraries (libaclnn_ops_infer.so...), searched only for a name "
                         "libopapi.so lacks: the double's operators are in libopapi.so"),
    "libasdsip.so": (False, "SiP operator library: outside the double"),
    "libascendsk": (False, "super-kernel optimisation: outside the double"),
    "libms_tools_ext": (False, "mstx markers of the profiling tools: outside the double"),
    "libmsprofiler": (False, "the profiler: outside the double"),
    "libprofapi.so": (False, "the profiler: outside the double"),
    "libmspti": (False, "the profiling tools interface: outside the double"),
    "libmspti.so": (False, "the profiling tools interface: outside the double"),
    "libascend_kernel_hook.so": (False, "kernel hooks of the debugging tools: outside the double"),
    "libascend_dump": (False, "data dump of the debugging tools: outside the double"),
    "libascend_hal": (False, "the driver's device-information interface: outside the double"),
    "libdcmi": (False, "device management (CPU affinity): outside the double"),
    "libascend_ml": (False, "AML fault detection: outside the double"),
    "liblcal": (False, "LCAL collectives: outside the double"),
    "libshmem": (False, "shared-memory collectives: outside the double"),
    "libhcomm": (False, "HCCL's communication layer: outside the double"),
    "libatb.so": (False, "Ascend Transformer Boost (libop_plugin_atb.so only)"),
    "libibverbs.so.1": (False, "RDMA verbs of tensorpipe: outside the double"),
    "libraryFor": (False, "a word of a message, not a library"),
}

#: Identifier strings in these families are lookup candidates (op-api's aclnn* too: libopapi.so is provided).
_FAMILY = re.compile(r"^(acl[a-z]*[A-Z]\w*|rt[A-Z]\w*|Msprof[A-Z]\w*|Hccl[A-Z]\w*)$")
_LAUNCHER_CALL = re.compile(r"\b((?!aclnn)acl[a-z]*[A-Z]\w*|rt[A-Z]\w*)\s*\(")
_LIBNAME = re.compile(r"^lib[A-Za-z0-9_]+(\.so[.0-9]*)?$")


@dataclasses.dataclass(frozen=True)
class WheelNeeds:
    root: Path                      # the extracted wheel (holding torch_npu/)
    objects: list[str]              # the shared objects scanned (relative to root)
    imports: list[str]              # C functions to define
    imports_not_c: list[str]        # unresolved names that are not C functions (reported; cannot be stubbed)
    lookup_candidates: list[str]    # identifier strings of the families (not imports)
    launcher_calls: list[str]       # what the generated launchers call
    needed_libraries: list[str]     # NEEDED names nothing provides
    dlopened: dict                  # name -> {"provided": bool, "why": str}
    unclassified_libraries: list[str]

    @property
    def library_names(self) -> list[str]:
        """File names the double is provided under."""
        names = set(self.needed_libraries)
        for n, d in self.dlopened.items():
            if d["provided"]:
                names.add(n if n.endswith(".so") else n + ".so")
        return sorted(names)


@lru_cache(maxsize=1)
def system_library_paths() -> dict[str, str]:
    """``{soname: path}`` of the dynamic loader's cache (``ldconfig -p``)."""
    out: dict[str, str] = {}
    for cmd in (["ldconfig", "-p"], ["/sbin/ldconfig", "-p"]):
        try:
            text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            continue
        for m in re.finditer(r"^\s*(\S+) \((?:[^)]*x86-64[^)]*|[^)]*)\) => (\S+)$", text, re.M):
            out.setdefault(m.group(1), m.group(2))
        break
    return out


def _python_library() -> Path | None:
    if sysconfig.get_config_var("Py_ENABLE_SHARED"):
        p = Path(sysconfig.get_config_var("LIBDIR") or "") / (sysconfig.get_config_var("LDLIBRARY") or "")
        if p.is_file():
            return p
    return Path(sys.executable).resolve()


def read_needs(root: Path, torch_lib: Path) -> WheelNeeds:
    """What the wheel extracted at ``root`` needs, against the torch whose libraries are in ``torch_lib``."""
    pkg = root / "torch_npu"
    objects = sorted([*pkg.glob("lib/*.so"), *pkg.glob("_C*.so")])
    objects = [o for o in objects if o.name not in SKIPPED_OBJECTS]
    wheel_names = {o.name for o in pkg.glob("lib/*.so")}
    torch_libs = sorted(torch_lib.glob("*.so*"))
    system = system_library_paths()

    defined: set[str] = set()
    undefined: set[str] = set()
    needed: list[str] = []
    for o in objects:
        d, u = elf.dynamic_symbols(o)
        defined |= d
        undefined |= u
        needed += [n for n in elf.needed(o) if n not in needed]
    providers = [*torch_libs, _python_library()]
    torch_names = {p.name for p in torch_libs}
    missing_libs = []
    for n in needed:
        if n in wheel_names or n in torch_names:
            continue
        if n in system:
            providers.append(Path(system[n]))
        else:
            missing_libs.append(n)
    for p in providers:
        if p is not None and p.exists():
            defined |= elf.dynamic_symbols(p)[0]
    unresolved = {u.split("@")[0] for u in undefined} - {d.split("@")[0] for d in defined}
    imports = sorted(n for n in unresolved if not n.startswith("_Z"))
    imports_not_c = sorted(n for n in unresolved if n.startswith("_Z"))

    strings: set[str] = set()
    for o in objects:
        strings |= elf.rodata_strings(o)
    candidates = sorted(s for s in strings if _FAMILY.match(s) and s not in unresolved)
    libnames = sorted(s for s in strings if _LIBNAME.match(s))
    dlopened, unclassified = {}, []
    for n in libnames:
        key = n if n in DLOPENED else next((k for k in DLOPENED if k.endswith("_") and n.startswith(k)), None)
        if key is None:
            if n not in wheel_names and n not in torch_names and n not in system and n not in missing_libs:
                unclassified.append(n)
            continue
        provided, why = DLOPENED[key]
        dlopened[n] = {"provided": provided, "why": why}
    launcher = set()
    for py in (pkg / "_inductor").rglob("*.py"):
        launcher.update(m.group(1) for m in _LAUNCHER_CALL.finditer(py.read_text(errors="replace")))
    return WheelNeeds(root=root, objects=[str(o.relative_to(root)) for o in objects], imports=imports,
                      imports_not_c=imports_not_c, lookup_candidates=candidates, launcher_calls=sorted(launcher),
                      needed_libraries=sorted(missing_libs), dlopened=dlopened, unclassified_libraries=unclassified)
