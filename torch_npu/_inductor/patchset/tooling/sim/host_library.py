"""Build the host ACL library: a TEST DOUBLE of CANN's runtime libraries that a released torch_npu
wheel loads unchanged, in a test's subprocess only (never in a user's process).

It is acl_sim's ACL core (``build.CORE_SOURCES``: device memory, streams, events, copies, launches,
capture, the probe; not its torch_npu stand-ins, whose place torch_npu's own code takes here) plus
``acl_sim/host/host_acl.cpp`` and ``opapi.cpp`` (what torch_npu's own binaries call beyond that), compiled against
the wheel's OWN CANN headers (a definition whose prototype differs from the wheel's declaration is a
compile error: every definition sits in an ``extern "C"`` block), plus one generated translation unit:

* an entry point per implemented function, which counts the call (by thread) and forwards to the
  implementation (renamed in the objects with ``objcopy``);
* a stated no-op per entry of :data:`STATED_NOOPS` the wheel needs (each with why; never one that has an
  out value to write);
* a failing stub per other function the wheel needs: it returns the failure value of its return type
  (:func:`failure_value`), logs its name once (stderr) and is counted (``acl_host_report_json``).

Prototypes come from the wheel's headers (its CANN headers, and the op-api calls its op-plugin makes
through function-pointer types: :func:`opapi_prototypes`); what they lack from
``acl_sim/host/supplement.h`` (the newest public CANN headers, as shipped in later wheels, and CANN's
public op-api headers). One file, ``libascendcl.so``, is linked; every other library name the wheel
needs is a symbolic link to it (the dynamic loader maps one object).

API:
    declarations(preprocessed_text) -> dict[name, Decl]       pure
    opapi_prototypes(op_api_common_base_h_text) -> str | None  pure
    failure_value(ret) -> (expression or None, can_fail)       pure
    build(npu_include, imports, lookups, library_names) -> HostLibrary   cached by a hash of the inputs
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable

from . import build as sim_build

__all__ = ["Decl", "HostLibrary", "STATED_NOOPS", "declarations", "failure_value", "status_kind", "build", "HOST_DIR",
           "opapi_prototypes", "OPAPI_HEADER"]

HOST_DIR = sim_build.SIM_ROOT / "host"
LIBRARY = "libascendcl.so"

#: Functions a wheel needs that the double answers with success and nothing else: each has no out
#: value (checked at build time) and why doing nothing is what CANN's caller needs here.
STATED_NOOPS: dict[str, str] = {
    "aclFinalize": "process teardown; the double keeps its state so that a later touch is still reported",
    "aclrtResetDevice": "device teardown; device memory is kept so that a later touch of a freed range is reported",
    "MsprofRegisterCallback": "a profiler registration: no profiler runs in the double, nothing will call back",
}

#: Return types whose value says success (0) or failure: the failure value a stub returns.
_STATUS_FAILURE = {
    "aclError": "ACL_ERROR_RT_FEATURE_NOT_SUPPORT",
    "rtError_t": "static_cast<rtError_t>(ACL_ERROR_RT_FEATURE_NOT_SUPPORT)",
    "HcclResult": "HCCL_E_NOT_SUPPORT",
    "int32_t": "-1",  # Msprof*: MSPROF_ERROR_NONE is 0
    "int": "-1",
    "aclnnStatus": "561000",  # op-api: ACLNN_ERR_INNER (ACLNN_SUCCESS is 0)
}
_STATUS_SUCCESS = {"aclError": "ACL_SUCCESS", "rtError_t": "RT_ERROR_NONE", "HcclResult": "HCCL_SUCCESS",
                   "int32_t": "0", "int": "0", "aclnnStatus": "0"}
#: Return types with a documented "invalid" value (their headers say so).
_INVALID_VALUE = {"aclDataType": "ACL_DT_UNDEFINED", "aclFormat": "ACL_FORMAT_UNDEFINED"}

#: The control surface's calls for the helper's C++ unit tests (acl_sim/host/host_acl.h), exported beside the ACL
#: surface and the report.
CONTROL_FOR_TESTS = ("acl_host_last_launch_id", "acl_host_probe_record_json", "acl_host_counters_json",
                     "acl_host_error_count_of", "acl_host_app_log", "acl_host_inject_fault", "acl_host_set_device_base_offset",
                     "acl_host_set_device_memory", "acl_host_set_event_id_limit", "acl_host_event_ids_in_use",
                     "acl_host_stream_hold", "acl_host_stream_release",
                     "acl_host_pause_arm", "acl_host_pause_reached", "acl_host_pause_release",
                     "acl_host_set_executor")  # the end-to-end tier's kernel executor (tooling/e2e/executor.py)

#: Kinds in the generated table (host_acl.cpp reads them).
IMPLEMENTED, NOOP, MISSING = 0, 1, 2

_EXTRA_FLAGS = ("-fPIC", "-DACL_SIM_HOST_LIBRARY", "-Wno-switch")  # the wheels' enums have more values


@dataclasses.dataclass(frozen=True)
class Decl:
    name: str
    ret: str
    params: str
    c_linkage: bool

    def param_names(self) -> list[str] | None:
        """The parameter names, or None when one cannot be forwarded (unnamed, variadic, array)."""
        p = self.params.strip()
        if p in ("", "void"):
            return []
        names = []
        for part in _split_top(p):
            part = part.strip()
            if part == "..." or "[" in part or "(" in part:
                return None
            m = re.search(r"([A-Za-z_]\w*)\s*$", part)
            if not m or m.group(1) in _TYPE_WORDS or len(part.split()) < 2 and "*" not in part:
                return None
            names.append(m.group(1))
        return names

    def out_params(self) -> list[str]:
        """Parameters through which the function writes (pointers to non-const)."""
        p = self.params.strip()
        if p in ("", "void"):
            return []
        return [x.strip() for x in _split_top(p) if "*" in x and not x.strip().startswith("const")]


_TYPE_WORDS = {"int", "char", "void", "long", "short", "unsigned", "signed", "float", "double", "const", "size_t",
               "bool", "int32_t", "uint32_t", "int64_t", "uint64_t", "uint8_t", "int8_t", "uint16_t", "int16_t"}


def _split_top(params: str) -> list[str]:
    out, depth, cur = [], 0, []
    for ch in params:
        if ch in "([<":
            depth += 1
        elif ch in ")]>":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


# ---- reading declarations out of preprocessed headers -----------------------------------------------
_ATTR = re.compile(r"__attribute__\s*\(\(")
_STRING = re.compile(r'"(?:\\.|[^"\\])*"')


def _strip_attributes(text: str) -> str:
    out, i = [], 0
    while True:
        m = _ATTR.search(text, i)
        if not m:
            out.append(text[i:])
            break
        out.append(text[i:m.start()])
        j, depth = m.end(), 2
        while depth and j < len(text):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        i = j
    text = "".join(out)
    text = re.sub(r"\[\[.*?\]\]", "", text)
    return re.sub(r"__declspec\s*\([^)]*\)", "", text)


_DECL = re.compile(r"^(.*?)\b([A-Za-z_]\w*)\s*\((.*)\)\s*(?:noexcept|throw\s*\(\s*\))?\s*$", re.S)


def _statement(stmt: str, c_linkage: bool, out: dict) -> None:
    s = " ".join(stmt.split())
    s = re.sub(r'^extern\s+"C"\s*', "", s)
    if not s or s.startswith(("typedef", "using", "template", "static_assert", "friend")):
        return
    m = _DECL.match(s)
    if not m:
        return
    ret, name, params = m.group(1).strip(), m.group(2), m.group(3).strip()
    if not ret or any(c in ret for c in "=()") or ret in ("return", "else"):
        return
    ret = " ".join(re.sub(r"\b(extern|static|inline|__extension__)\b", "", ret).split())
    depth = 0
    for ch in params:
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            return
    if depth == 0 and ret:
        out.setdefault(name, Decl(name, ret, params, c_linkage))


def declarations(text: str) -> dict[str, Decl]:
    """Function declarations at global scope (inside ``extern "C"`` or not) of preprocessed C/C++ text;
    bodies of structs, enums, classes, namespaces and functions are skipped."""
    text = _strip_attributes(text)
    text = _STRING.sub(lambda m: m.group(0) if m.group(0) == '"C"' else '""', text)
    out: dict[str, Decl] = {}
    stack: list[str] = []
    i, n, start = 0, len(text), 0
    while i < n:
        c = text[i]
        if c == "{":
            head = text[start:i]
            if re.search(r'extern\s+"C"\s*$', head):
                stack.append("C")
            elif re.search(r"\bnamespace\b[^;]*$", head):
                stack.append("ns")
            else:  # a body: skip it whole
                depth, j = 1, i + 1
                while depth and j < n:
                    depth += {"{": 1, "}": -1}.get(text[j], 0)
                    j += 1
                if re.search(r"\)\s*(const|noexcept|override)?\s*$", head):  # a function's body ends its statement
                    start = j
                i = j
                continue
            i += 1
            start = i
            continue
        if c == "}":
            if stack:
                stack.pop()
            i += 1
            start = i
            continue
        if c == ";":
            if all(k == "C" for k in stack):
                _statement(text[start:i], "C" in stack, out)
            i += 1
            start = i
            continue
        i += 1
    return out


def failure_value(ret: str) -> tuple[str | None, bool]:
    """What a failing stub of return type ``ret`` returns: (C++ expression or None for void, whether
    that value says failure to the caller)."""
    r = " ".join(ret.split())
    if r == "void":
        return None, False
    if r.endswith("*"):
        return "nullptr", True
    if r in _STATUS_FAILURE:
        return _STATUS_FAILURE[r], True
    if r in _INVALID_VALUE:
        return _INVALID_VALUE[r], True
    return f"{r}{{}}", False


def status_kind(ret: str) -> str:
    """void, pointer, status (0 is success) or value."""
    r = " ".join(ret.split())
    if r == "void":
        return "void"
    if r.endswith("*"):
        return "pointer"
    return "status" if r in _STATUS_FAILURE else "value"


# ---- the wheel's headers, staged for the build --------------------------------------------------------
def _cann_root(npu_include: Path) -> Path:
    for cand in (npu_include, npu_include / "third_party" / "acl" / "inc"):
        if (cand / "acl" / "acl.h").exists():
            # 2.7.1.post8 on ship the headers themselves at include/acl; earlier wheels under third_party
            if cand == npu_include or not (npu_include / "acl" / "acl.h").exists():
                return cand
    raise FileNotFoundError(f"no acl/acl.h under {npu_include}")


_CANN_DIRS = ("acl", "ge", "graph", "profiling", "aml")

#: Where a wheel's op-plugin declares the op-api calls it makes (as function-pointer types).
OPAPI_HEADER = Path("third_party/op-plugin/op_plugin/utils/op_api_common_base.h")
_OPAPI_STRUCT = re.compile(r"\btypedef\s+struct\s+(acl\w+)\s+\1\s*;")
_OPAPI_POINTER = re.compile(r"\btypedef\s+([A-Za-z_][\w\s]*?\s*\**)\s*\(\s*\*\s*_(acl[A-Za-z]\w*)\s*\)\s*\(([^;]*?)\)\s*;")
_OPAPI_FUNC = re.compile(r"\busing\s+OpApiFunc\s*=\s*([^;]+);")


def opapi_prototypes(text: str) -> str | None:
    """The op-api calls a wheel's op-plugin makes, from its ``op_api_common_base.h`` (``typedef R
    (*_aclCreateTensor)(...)`` and the like, resolved with dlsym in libopapi.so), as a header of C
    declarations, plus its type of an operator's second phase (``OpApiFunc``) as
    ``acl_host_wheel_OpApiFunc``: the double's definitions are then compiled against the wheel's own
    prototypes. None when the text declares none."""
    text = re.sub(r"//[^\n]*", "", text)
    structs = list(dict.fromkeys(_OPAPI_STRUCT.findall(text)))
    funcs = [(" ".join(r.split()), n, " ".join(p.split())) for r, n, p in _OPAPI_POINTER.findall(text)]
    if not funcs:
        return None
    out = [f"// Generated by tooling/sim/host_library.py from the wheel's {OPAPI_HEADER}: the op-api calls\n"
           "// op-plugin makes through function-pointer types, as declarations.\n#pragma once\n"]
    out += [f"typedef struct {s} {s};\n" for s in structs]
    out.append('#ifdef __cplusplus\nextern "C" {\n#endif\n')
    out += [f"{r} {n}({p});\n" for r, n, p in funcs]
    out.append("#ifdef __cplusplus\n}\n#endif\n")
    m = _OPAPI_FUNC.search(text)
    if m:
        out.append(f"#ifdef __cplusplus\nusing acl_host_wheel_OpApiFunc = {' '.join(m.group(1).split())};\n"
                   "#define ACL_HOST_WHEEL_OPAPI_FUNC 1\n#endif\n")
    return "".join(out)


def stage_headers(npu_include: Path, dest: Path) -> list[str]:
    """Copy the wheel's CANN headers into ``dest`` (acl/, profiling/, hccl/, hacl_rt.h) and write its
    op-plugin's op-api prototypes there (acl_host_opapi.h); returns the headers the prelude includes,
    in order."""
    root = _cann_root(npu_include)
    for sub in _CANN_DIRS:  # what the ACL headers include of each other (acl_base.h: "../ge/...")
        if (root / sub).is_dir():
            shutil.copytree(root / sub, dest / sub)
    headers = [f"acl/{h.name}" for h in sorted((root / "acl").glob("*.h"))]
    headers += [f"profiling/{h.name}" for h in sorted((root / "profiling").glob("*.h"))]
    hccl = npu_include / "third_party" / "hccl"
    if (hccl / "inc" / "hccl" / "hccl.h").exists():
        # hccl.h includes "third_party/hccl/inc/..." and "third_party/acl/inc/acl/acl.h"
        shutil.copytree(hccl, dest / "third_party" / "hccl")
        if (npu_include / "third_party" / "acl" / "inc").is_dir():
            shutil.copytree(npu_include / "third_party" / "acl" / "inc", dest / "third_party" / "acl" / "inc")
        headers.append("hccl/hccl.h")
    hacl = npu_include / "torch_npu" / "csrc" / "inductor" / "mlir" / "hacl_rt.h"
    if hacl.exists():  # the rt* functions of the older launch layout, declared by the wheel itself
        shutil.copy2(hacl, dest / "hacl_rt.h")
        headers.append("hacl_rt.h")
    opapi = npu_include / OPAPI_HEADER
    generated = opapi_prototypes(opapi.read_text(errors="replace")) if opapi.exists() else None
    if generated:  # after acl/*.h: it names aclDataType, aclFormat, aclrtStream
        (dest / "acl_host_opapi.h").write_text(generated)
        headers.append("acl_host_opapi.h")
    return headers


def _include_flags(inc: Path) -> list[str]:
    flags = [f"-I{inc}"]
    if (inc / "third_party" / "hccl" / "inc").is_dir():
        flags.append(f"-I{inc / 'third_party' / 'hccl' / 'inc'}")
    return flags + [f"-I{HOST_DIR}", f"-I{sim_build.SIM_INCLUDE}", f"-I{sim_build.SIM_SOURCES}"]


def _preprocess(header: Path, flags: list[str]) -> str:
    proc = subprocess.run([sim_build._cxx(), "-std=c++17", "-E", "-P", "-x", "c++", *flags, str(header)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"preprocessing {header.name} failed:\n{proc.stderr[-3000:]}")
    return proc.stdout


_GUARD = re.compile(r"#ifndef\s+ACL_HOST_HAS_(\w+)")


# ---- generating the entry points ------------------------------------------------------------------------
def _entry_point(index: int, d: Decl, kind: int, why: str = "") -> str:
    sig = f"{d.ret} {d.name}({d.params})"
    kindname = {IMPLEMENTED: "implemented", NOOP: "stated no-op", MISSING: "missing"}[kind]
    if kind == IMPLEMENTED:
        args = ", ".join(d.param_names() or [])
        call = f"acl_host_impl_{d.name}({args})"
        sk = status_kind(d.ret)
        if sk == "void":
            return f"{sig} {{\n  {call};\n  acl_host_note_call({index}, 0);\n}}\n"
        rc = {"status": "static_cast<long long>(r)", "pointer": "(r == nullptr ? -1LL : 0LL)", "value": "0LL"}[sk]
        return f"{sig} {{\n  auto r = {call};\n  acl_host_note_call({index}, {rc});\n  return r;\n}}\n"
    if kind == NOOP:
        ok = None if d.ret == "void" else _STATUS_SUCCESS.get(d.ret)
        body = f"  acl_host_note_call({index}, 0);\n" + (f"  return {ok};\n" if ok else "")
        return f"// {kindname}: {why}\n{sig} {{\n{body}}}\n"
    value, _ = failure_value(d.ret)
    rc = "-1LL" if value is None else ("-1LL" if value == "nullptr" else f"static_cast<long long>({value})")
    body = f"  acl_host_note_missing({index});\n  acl_host_note_call({index}, {rc});\n"
    return f"// {kindname}\n{sig} {{\n{body}" + (f"  return {value};\n" if value is not None else "") + "}\n"


def _untyped_stub(index: int, name: str) -> str:
    return (f"// missing, and no header declares it: no prototype known\nlong long {name}() {{\n"
            f"  acl_host_note_missing({index});\n  acl_host_note_call({index}, -1LL);\n  return -1;\n}}\n")


@dataclasses.dataclass(frozen=True)
class HostLibrary:
    folder: Path
    manifest: dict

    @property
    def library(self) -> Path:
        return self.folder / LIBRARY


def _nm_defined(obj: Path) -> set[str]:
    proc = subprocess.run(["nm", "-g", "--defined-only", "-P", str(obj)], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in proc.stdout.splitlines() if line.strip()}


def _sources() -> list[Path]:
    return [*sim_build.CORE_SOURCES, HOST_DIR / "host_acl.cpp", HOST_DIR / "opapi.cpp"]


def _key(npu_include: Path, imports, lookups, library_names) -> str:
    root = _cann_root(npu_include)
    parts = [sim_build._compiler_id(), " ".join(sim_build.CXX_FLAGS + _EXTRA_FLAGS).encode(),
             Path(__file__).read_bytes(), json.dumps([sorted(imports), sorted(lookups), sorted(library_names),
                                                      STATED_NOOPS]).encode()]
    d = sim_build.SIM_ROOT  # every source and header but the stand-ins' sources, which this library leaves out
    parts += [str(f.relative_to(d)).encode() + b"\0" + f.read_bytes() for f in sim_build._tree_files(d)
              if f not in sim_build.STANDIN_SOURCES]
    for d in (*(root / sub for sub in _CANN_DIRS), npu_include / "third_party" / "hccl"):
        if d.is_dir():
            parts += [str(f.relative_to(d)).encode() + b"\0" + f.read_bytes() for f in sorted(d.rglob("*.h"))]
    for extra in (npu_include / "torch_npu" / "csrc" / "inductor" / "mlir" / "hacl_rt.h", npu_include / OPAPI_HEADER):
        if extra.exists():
            parts.append(extra.read_bytes())
    return sim_build._digest(parts)


def build(npu_include: os.PathLike | str, imports: Iterable[str], lookups: Iterable[str],
          library_names: Iterable[str]) -> HostLibrary:
    """The host ACL library for one wheel (``npu_include``: its ``torch_npu/include``): a folder holding
    ``libascendcl.so`` under every name of ``library_names`` and ``manifest.json``. ``imports``: the C
    functions its binaries import (each must be defined to load); ``lookups``: names it may resolve at
    run time (defined when a header declares them). Cached by a hash of every input."""
    npu_include = Path(npu_include)
    imports, lookups, library_names = sorted(set(imports)), sorted(set(lookups) - set(imports)), sorted(
        set(library_names) | {LIBRARY})
    key = _key(npu_include, imports, lookups, library_names)
    final = sim_build.build_dir() / f"host_acl-{key}"
    if (final / "manifest.json").exists():
        return HostLibrary(final, json.loads((final / "manifest.json").read_text()))
    tmp = Path(tempfile.mkdtemp(prefix=f".host_acl-{key}-", dir=sim_build.build_dir()))
    try:
        manifest = _build_into(tmp, npu_include, imports, lookups, library_names)
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        sim_build._publish(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return HostLibrary(final, json.loads((final / "manifest.json").read_text()))


def _build_into(tmp: Path, npu_include: Path, imports: list[str], lookups: list[str],
                library_names: list[str]) -> dict:
    inc = tmp / "inc"
    headers = stage_headers(npu_include, inc)
    flags = _include_flags(inc)
    (inc / "acl_host_wheel.h").write_text("#ifndef ACL_HOST_WHEEL_H\n#define ACL_HOST_WHEEL_H\n" + "".join(
        f'#include "{h}"\n' for h in headers) + "#endif\n")
    wheel_text = _preprocess(inc / "acl_host_wheel.h", flags)
    wheel_decls = declarations(wheel_text)
    identifiers = set(re.findall(r"[A-Za-z_]\w*", wheel_text))
    guards = set(_GUARD.findall((HOST_DIR / "supplement.h").read_text()))
    has = sorted(set(wheel_decls) | (guards & identifiers))
    (inc / "acl_host_has.h").write_text("#pragma once\n" + "".join(f"#define ACL_HOST_HAS_{n} 1\n" for n in has))
    (inc / "acl_host_prelude.h").write_text(
        "// The wheel's CANN headers, then what they lack (supplement.h). Generated.\n#pragma once\n"
        '#include "acl_host_has.h"\n#include "acl_host_wheel.h"\n#include "supplement.h"\n')
    decls = declarations(_preprocess(inc / "acl_host_prelude.h", flags))
    opapi = inc / "acl_host_opapi.h"
    from_opapi = set(re.findall(r"\b(acl[A-Za-z]\w*)\(", opapi.read_text())) if opapi.exists() else set()
    source = {n: ("wheel header (op-plugin's function-pointer types)" if n in from_opapi else
                  "wheel header" if n in wheel_decls else "supplement.h") for n in decls}

    # 1. the implementation, against the wheel's headers
    cxx = [sim_build._cxx(), *sim_build.CXX_FLAGS, *_EXTRA_FLAGS, *flags, "-include", str(inc / "acl_host_prelude.h")]
    objs = []
    for src in _sources():
        obj = tmp / f"{src.stem}.o"
        sim_build._run([*cxx, "-c", str(src), "-o", str(obj)], f"compiling {src.name} against the wheel's headers")
        objs.append(obj)
    defined = set().union(*(_nm_defined(o) for o in objs))
    implemented = sorted(n for n in defined if n in decls and decls[n].c_linkage)
    forwarded = [n for n in implemented if decls[n].param_names() is not None]
    if forwarded:
        renames = tmp / "renames.txt"
        renames.write_text("".join(f"{n} acl_host_impl_{n}\n" for n in forwarded))
        for o in objs:
            sim_build._run(["objcopy", f"--redefine-syms={renames}", str(o)], f"renaming in {o.name}")

    # 2. entry points: implemented (counted), stated no-ops, failing stubs
    needed = [*imports, *lookups]
    noops = {n: STATED_NOOPS[n] for n in needed if n in STATED_NOOPS and n not in implemented}
    for n in noops:
        if n not in decls:
            raise RuntimeError(f"stated no-op {n}: no header declares it")
        if decls[n].out_params():
            raise RuntimeError(f"stated no-op {n} has out values ({decls[n].out_params()}): implement it instead")
    missing = [n for n in needed if n not in implemented and n not in noops and n in decls]
    untyped = [n for n in imports if n not in implemented and n not in noops and n not in decls]
    undeclared_lookups = [n for n in lookups if n not in decls and n not in implemented]
    table = [*forwarded, *noops, *missing, *untyped]
    kinds = [IMPLEMENTED] * len(forwarded) + [NOOP] * len(noops) + [MISSING] * (len(missing) + len(untyped))
    parts = ['// Generated by tooling/sim/host_library.py: entry points of the host ACL library (a test double\n'
             '// of CANN, never in a user\'s process). Each definition has the prototype of the header named in\n'
             '// manifest.json ("prototype_source"): a mismatch is a compile error.\n'
             '#include "acl_host_prelude.h"\n#include "host_acl.h"\n\nextern "C" {\n']
    parts.append("extern const char *const acl_host_function_names[] = {" + ", ".join(f'"{n}"' for n in table) + "};\n")
    parts.append("extern const int acl_host_function_kinds[] = {" + ", ".join(map(str, kinds)) + "};\n")
    parts.append(f"extern const int acl_host_function_count = {len(table)};\n\n")
    for n in forwarded:
        d = decls[n]
        parts.append(f"{d.ret} acl_host_impl_{n}({d.params});\n")
    parts.append("\n")
    for i, n in enumerate(table):
        if kinds[i] == IMPLEMENTED:
            parts.append(_entry_point(i, decls[n], IMPLEMENTED))
        elif kinds[i] == NOOP:
            parts.append(_entry_point(i, decls[n], NOOP, noops[n]))
        elif n in decls:
            parts.append(_entry_point(i, decls[n], MISSING))
        else:
            parts.append(_untyped_stub(i, n))
    parts.append("}  // extern \"C\"\n")
    entry = tmp / "acl_host_entry.cpp"
    entry.write_text("".join(parts))
    sim_build._run([*cxx, "-Wno-unused-parameter", "-c", str(entry), "-o", str(tmp / "acl_host_entry.o")],
                   "compiling the generated entry points against the wheel's headers")
    objs.append(tmp / "acl_host_entry.o")

    # 3. one library; only the ACL surface and the control functions are exported
    exported = sorted(set(table) | set(implemented) - set(forwarded) | {
        "acl_host_report_json", "acl_host_reset", "acl_host_error_count", "acl_host_missing_count", *CONTROL_FOR_TESTS})
    (tmp / "exports.map").write_text("{\n  global:\n" + "".join(f"    {n};\n" for n in exported) + "  local: *;\n};\n")
    sim_build._run([sim_build._cxx(), "-shared", "-o", str(tmp / LIBRARY), *map(str, objs), f"-Wl,-soname,{LIBRARY}",
                    f"-Wl,--version-script={tmp / 'exports.map'}", "-Wl,-z,defs", "-pthread"],
                   f"linking {LIBRARY}")
    for name in library_names:
        if name != LIBRARY:
            os.symlink(LIBRARY, tmp / name)
    for o in objs:
        o.unlink()
    needed_set = set(needed)
    return {
        "library": LIBRARY,
        "library_names": library_names,
        "implemented": sorted(n for n in implemented if n in needed_set),
        "implemented_beyond_needs": sorted(n for n in implemented if n not in needed_set),
        "uncounted": sorted(set(implemented) - set(forwarded)),
        "stated_noops": noops,
        "missing": sorted(missing + untyped),
        "missing_without_prototype": sorted(untyped),
        "missing_cannot_fail": sorted(n for n in missing if not failure_value(decls[n].ret)[1]),
        "undeclared_lookups": sorted(undeclared_lookups),
        "prototype_source": {n: source[n] for n in sorted(set(table) | set(implemented)) if n in source},
        "returns": {n: decls[n].ret for n in sorted(set(table) | set(implemented)) if n in decls},
        "exported": exported,
    }
