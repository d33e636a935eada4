"""The real-artifact tier in aot_mode: AOTInductor launchers against what a torch_npu wheel ships.

``tooling/releases/wheel_harness.py VERSION OUT --aot`` renders every sample launcher through the wheel's
real classes with ``V.graph.aot_mode`` set, and records the header the real ``write_header`` wrote
in aot_mode (the wheel's AOTI includes, torch's or torch_npu's AOTI ``interface.cpp`` adapted to the
NPU, the kernel driver) with, after ``patchset.apply()``, the helper's text inlined
(:func:`~torch_npu._inductor.patchset.launch_codegen.helper_inline_lines`).

:func:`translation_unit` makes of that one C++ file, as AOTInductor would compile a model:

* the AOT header (checked: it includes nothing by a path of this machine, and carries the helper
  under test);
* every rendered launcher (``template <..., typename kernels_type_> call_<kernel>(...)``);
* the part of a model that only a compiled graph has (``AOTInductorModelKernels`` with one handle
  per kernel, the members of ``AOTInductorModel`` that the wheel's ``model.h`` declares and
  generated code defines, the ``_binary_constants_bin_*`` blob torch links in as an object): a
  stand-in, since no graph is compiled here. Its declarations are
  read from that ``model.h`` so that they match the wheel; bodies are empty (never run);
* one exported function per launcher that instantiates it with ``at::Tensor`` arguments and the
  kernels struct.

:mod:`real_artifacts` compiles and links it exactly as the JIT translation unit
(``-Wl,--no-undefined`` against the wheel's ``libtorch_npu.so``). :func:`package_cpp_only` lays the
same source out the way torch's ``aot_inductor.package_cpp_only`` does (sources beside a
``CMakeLists.txt`` that names them relative to ``CMAKE_CURRENT_SOURCE_DIR``).
"""
from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import Sequence

from ... import launch_codegen as lc
from . import launchers

#: How torch_npu's ``aoti_runtime/model.h`` (every release checked) opens the model class.
_MODEL_CLASS = re.compile(r"class\s+AOTInductorModel\s*:\s*public\s+AOTInductorModelBase\s*<\s*AOTInductorModel\s*>\s*\{")
_COMMENTS = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_ACCESS = re.compile(r"^\s*(?:public|private|protected)\s*:\s*")
_INLINED = re.compile(
    r"^[ \t]*// npu_launch_resources helper, sha256 [0-9a-f]+ \(inlined\)[ \t]*\n.*?^[ \t]*"
    + re.escape(lc.INLINE_END) + r"[ \t]*\n[ \t]*#endif[ \t]*$", re.M | re.S)
_ABSOLUTE_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"(/[^"]*)"', re.M)
_KERNEL_FIELD = re.compile(r"\bkernels_\.(\w+)")


class AotError(RuntimeError):
    """The AOT translation unit could not be made (the message names the release and what)."""


def model_header(include_dirs: Sequence[Path]) -> Path:
    """torch_npu's ``aoti_runtime/model.h`` (the AOTInductorModel an NPU model compiles against)."""
    for d in include_dirs:
        p = Path(d) / "torch_npu" / "csrc" / "inductor" / "aoti_runtime" / "model.h"
        if p.is_file():
            return p
    raise AotError(f"no torch_npu/csrc/inductor/aoti_runtime/model.h under {[str(d) for d in include_dirs]}")


def model_declarations(header_text: str) -> list[str]:
    """The member functions of ``AOTInductorModel`` that the header only declares (one string
    each, comments and default arguments removed); inline-defined and template members left out."""
    m = _MODEL_CLASS.search(header_text)
    if not m:
        raise AotError("model.h does not define class AOTInductorModel : public AOTInductorModelBase<AOTInductorModel>")
    text = _COMMENTS.sub(" ", header_text[m.end():])
    out, cur, depth, defined = [], [], 0, False
    for ch in text:
        if ch == "{":
            depth += 1
            defined = defined or depth == 1
            continue
        if ch == "}":
            if depth == 0:  # the class ends
                break
            depth -= 1
            if depth == 0 and defined:  # an inline-defined member: nothing to define here
                cur, defined = [], False
            continue
        if depth:
            continue
        if ch == ";":
            stmt = _ACCESS.sub("", " ".join("".join(cur).split()))
            cur = []
            if "(" in stmt and not stmt.startswith("template") and "= delete" not in stmt and "= default" not in stmt:
                out.append(stmt)
            continue
        cur.append(ch)
    return out


def _strip_defaults(params: str) -> str:
    out, depth, i = [], 0, 0
    while i < len(params):
        ch = params[i]
        if ch in "(<":
            depth += 1
        elif ch in ")>":
            depth -= 1
        if ch == "=" and depth == 0:  # skip the default up to the next top-level comma
            while i < len(params) and not (params[i] == "," and depth == 0):
                depth += params[i] in "(<{"
                depth -= params[i] in ")>}"
                i += 1
            continue
        out.append(ch)
        i += 1
    return "".join(out).strip()


def _definition(decl: str) -> str:
    """An out-of-class definition, empty body, of a declaration :func:`model_declarations` found."""
    name_m = re.search(r"(~?\w+)\s*\(", decl)
    open_at = name_m.end() - 1
    depth, close_at = 0, None
    for i in range(open_at, len(decl)):
        depth += decl[i] == "("
        depth -= decl[i] == ")"
        if depth == 0:
            close_at = i
            break
    params = _strip_defaults(decl[open_at + 1:close_at])
    tail = re.sub(r"\b(override|final)\b", "", decl[close_at + 1:]).strip()
    ret = re.sub(r"\b(static|virtual|inline|explicit)\b", "", decl[:name_m.start()]).strip()
    name = name_m.group(1)
    if name == "AOTInductorModel":  # the constructor: a model with no inputs, outputs or constants
        names = [re.findall(r"\w+", p)[-1] for p in params.split(",") if p.strip()]
        if "device_str" not in names or "cubin_dir" not in names:
            raise AotError(f"AOTInductorModel's constructor has no device_str / cubin_dir parameter: {decl}")
        return (f"AOTInductorModel::AOTInductorModel({params})\n"
                "    : AOTInductorModelBase(0, 0, 0, device_str, std::move(cubin_dir)) {\n"
                "  kernels_ = std::make_unique<AOTInductorModelKernels>();\n}\n")
    body = "{}" if ret == "void" else "{ return {}; }"
    return f"{ret} AOTInductorModel::{name}({params}) {tail} {body}\n"


def model_stand_in(header_text: str, kernel_type: str, kernels: Sequence[str]) -> str:
    """The kernels struct and the model members generated code would define (stand-ins, never run)."""
    fields = "".join(f"  {kernel_type} {k}{{nullptr}};\n" for k in kernels)
    defs = "".join(_definition(d) for d in model_declarations(header_text))
    return (
        "\n// ---- stand-in for what a compiled graph's code defines (members declared by the wheel's\n"
        "// aoti_runtime/model.h; empty bodies: this tier compiles and links, it never runs) ----\n"
        "// The constants blob, which torch links in as an object made from constants.bin: empty here.\n"
        "alignas(64) uint8_t _binary_constants_bin_start[16] = {};\n"
        "uint8_t _binary_constants_bin_end[1] = {};\n"
        "namespace torch::aot_inductor {\n"
        "class AOTInductorModelKernels : public AOTInductorModelKernelsBase {\n public:\n"
        f"{fields}}};\n{defs}}}  // namespace torch::aot_inductor\n"
    )


def header_of(harness: dict, version: str) -> str:
    """The AOT header the real write_header wrote (every sample's is the same)."""
    heads = {e.get("include", "") for e in harness.get("patched", {}).values() if "cpp" in e}
    if len(heads) != 1:
        raise AotError(f"torch_npu {version}: {len(heads)} different aot_mode headers rendered (expected one)")
    return heads.pop()


def portable_header(head: str, version: str, helper_dir: Path) -> str:
    """``head`` checked to be portable, with the inlined helper swapped for the one under test."""
    bad = _ABSOLUTE_INCLUDE.findall(head)
    if bad:
        raise AotError(f"torch_npu {version}: the aot_mode header includes by an absolute path: {bad}")
    if re.search(r'^[ \t]*#[ \t]*include[ \t]*["<][^">]*' + re.escape(lc.HELPER_HEADER), head, re.M):
        raise AotError(f"torch_npu {version}: the aot_mode header includes {lc.HELPER_HEADER} instead of carrying it")
    found = _INLINED.findall(head)
    if len(found) != 1:
        raise AotError(f"torch_npu {version}: the aot_mode header carries the inlined helper {len(found)} times, not once")
    return _INLINED.sub(lambda m: "\n".join(lc.helper_inline_lines(helper_dir)), head, count=1)


#: The kernels struct an aot_mode launcher takes (``kernels_``): the model's, one handle per kernel.
KERNELS_TYPE = "torch::aot_inductor::AOTInductorModelKernels"
#: What torch's lazy-compile launch writes (torch 2.14's ``generate_lazy``), never torch_npu's lambda.
LAZY_LAUNCH = re.compile(r"\bLazyKernelCompileResult\b|\brunTritonKernelWithAutotune\(")


def translation_unit(version: str, harness: dict, helper: Path, include_dirs: Sequence[Path],
                     tag: str = "patched", entries=None) -> tuple[str, dict]:
    """The AOT TU and a description of how it was made. ``tag`` "upstream": the launchers as the release
    ships them (to show what they are), else patched. ``entries(calls, keys)``: the exported functions
    instead of one ``launchers.entry_point`` per launcher (the real-runtime tier calls them from Python)."""
    if not harness.get("aot_mode"):
        raise AotError(f"torch_npu {version}: the harness did not render in aot_mode")
    head = portable_header(header_of(harness, version), version, helper.parent)
    when = "after patchset.apply()" if tag == "patched" else "as the release ships them (patch set off)"
    parts = [f"// Real-artifact tier, aot_mode: torch_npu {version}, every sample launcher rendered by the wheel's\n"
             f"// own classes with V.graph.aot_mode set, {when}, under its real AOT header.\n",
             "#include <ATen/ATen.h>\n", head]
    samples, keys = launchers.sample_parts(harness, version, AotError, tag)
    parts += samples
    body = "".join(parts)
    if tag == "patched" and LAZY_LAUNCH.search(body):
        raise AotError(f"torch_npu {version}: the patched aot_mode launchers are torch's lazy-compile launch, not "
                       f"torch_npu's launch lambda (aot-npu-launch-lambda did not apply: {harness.get('aot_lazy_compile')})")
    kernels = sorted(set(_KERNEL_FIELD.findall(body)))
    if not kernels:
        raise AotError(f"torch_npu {version}: no launcher reaches its kernel through kernels_.<name> (not aot_mode code)")
    model_h = model_header(include_dirs)
    parts.append(model_stand_in(model_h.read_text(), harness.get("cpp_kernel_type") or "void*", kernels))
    calls = list(launchers.CALL_FN.finditer(body))
    if len(calls) != len(keys):
        raise AotError(f"torch_npu {version}: found {len(calls)} call_* functions for {len(keys)} launchers")
    parts.append("\n// ---- exported entry points: instantiate every launcher ----\n")
    if entries is None:
        kernels_type = {"kernels_type_": KERNELS_TYPE}
        parts.extend(launchers.entry_point(fn, i, kernels_type) for i, fn in enumerate(calls))
    else:
        parts.append(entries(calls, keys))
    info = {"aot_mode": True, "launchers": keys, "calls": [fn.group("name") for fn in calls],
            "header_from": "CppWrapperNpu.write_header() in aot_mode (real, after apply), as tooling/releases/wheel_harness.py "
                           "--aot rendered it; helper inlined, no absolute include",
            "model_stand_in": f"AOTInductorModelKernels ({len(kernels)} handles) and the AOTInductorModel members "
                              f"declared in {model_h.relative_to(model_h.parents[5])}"}
    return "".join(parts), info


# ---- a package_cpp_only package --------------------------------------------------------------------
def cmake_lists(source_name: str, cxx_standard: str, definitions: Sequence[str], cflags: Sequence[str]) -> str:
    """A CMakeLists.txt in the shape torch's ``CppBuilder.save_compile_cmd_to_cmake`` /
    ``save_src_to_cmake`` write for ``package_cpp_only`` (``add_library(aoti_model SHARED)``, sources
    relative to ``CMAKE_CURRENT_SOURCE_DIR``). Include directories of the building machine come in as
    ``-DAOTI_INCLUDE_DIRS=...`` (torch's ``find_package(Torch)``; here without CUDA)."""
    std = cxx_standard.replace("c++", "")
    return textwrap.dedent(f"""\
        cmake_minimum_required(VERSION 3.18 FATAL_ERROR)
        project(aoti_model LANGUAGES CXX)
        set(CMAKE_CXX_STANDARD {std})
        set(AOTI_INCLUDE_DIRS "" CACHE STRING "include directories of this machine's torch / torch_npu")
        add_library(aoti_model SHARED)
        target_compile_definitions(aoti_model PRIVATE {' '.join(definitions)})
        target_compile_options(aoti_model PRIVATE {' '.join(cflags)})
        target_include_directories(aoti_model PRIVATE ${{AOTI_INCLUDE_DIRS}})
        target_sources(aoti_model PRIVATE ${{CMAKE_CURRENT_SOURCE_DIR}}/{source_name})
        """)
