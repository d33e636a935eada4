"""A compiled graph's wrapper function, as launch_codegen writes its launches, and three mutants of it: the header
the helper's C++ test ``test/cpp/test_wrapper_shape.cpp`` runs on a released torch_npu's own runtime
(``cpp_tests.py`` writes it into the build and compiles it against the wheel's headers).

The wrapper makes :data:`LAUNCHES` launches one after the other in ONE function (as a graph's wrapper does when its
launches are inlined), each ``launch_codegen.launcher_source``'s body with its names made unique, so that what one
launch keeps alive lives until the wrapper ends. The mutants are the ways issues 22 and 31 say a launch may keep
or give back its block wrongly:

* ``owner-in-lambda``: the lambda holds the owning object (a ``shared_ptr`` to the ``LaunchMemory``), so the
  wrapper's copy of the lambda keeps the block until the wrapper ends;
* ``release-at-end``: every launch's hand-back moved to the wrapper's end;
* ``release-once-queued`` (issue 31's defect, ``mutant_helpers``): a block per launch, back to the cache once the
  queue call returned, while the lambda may still wait in torch_npu's queue.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

from ...launch_plan import plan_from_metadata
from ..sim import launcher_writer as lc
from . import mutant_helpers

LAUNCHES = 6
KERNEL = "triton_shape"
META = {"name": KERNEL, "workspace_size": 512, "lock_num": 8, "lock_init_val": 3}
SIGNATURE = "*fp32,i32"
VARIANTS = ("generated", "owner-in-lambda", "release-at-end", "release-once-queued")
HEADER = "wrapper_shape.h"


def _body(i: int) -> list[str]:
    """Launch ``i`` of the wrapper: the body of launch_codegen.launcher_source, names made unique."""
    plan = plan_from_metadata(META, kernel=KERNEL)
    src = lc.launcher_source(plan, lc.LaunchSite(prefix=f"npu_sync{i}_"), lc.args_from_signature(SIGNATURE))
    lines = src.splitlines()
    start = next(n for n, ln in enumerate(lines) if ln.endswith(") {")) + 1
    body = [ln for ln in lines[start:-1] if "return;" not in ln]  # the grid check is the wrapper's
    if lines[-1] != "}" or not any("launchKernel(launch_call" in ln for ln in body):
        raise ValueError(f"launch_codegen's launcher has an unexpected shape:\n{src}")
    return [ln.replace("launch_call", f"launch_call_{i}") for ln in body]


def _owner_in_lambda(body: list[str], i: int) -> list[str]:
    p = f"npu_sync{i}_"
    text = "\n".join(body)
    text = text.replace(f"torch_npu::inductor::LaunchMemory {p}memory(",
                        f"auto {p}owner = std::make_shared<torch_npu::inductor::LaunchMemory>(")
    for field in (".write_locks(", ".locks;", ".workspace;", "}"):
        text = text.replace(f"{p}regions{field}", f"{p}owner->regions(){field}")
    out = [ln for ln in text.splitlines() if f"{p}memory.handed();" not in ln and f"{p}regions = " not in ln]
    if f"{p}owner->regions().locks" not in "\n".join(out):
        raise ValueError("the owner-in-lambda edit no longer applies to launch_codegen's launcher")
    return out


def _release_once_queued(body: list[str], i: int) -> list[str]:
    out = mutant_helpers.use("\n".join(body), "release-once-queued").splitlines()
    if out == body:
        raise ValueError("the release-once-queued edit no longer applies to launch_codegen's launcher")
    return out


def function_name(variant: str) -> str:
    return "graph_wrapper_" + variant.replace("-", "_")


def wrapper_source(variant: str) -> str:
    """The wrapper function of :data:`LAUNCHES` launches, in the generated shape or one of the mutants."""
    bodies = [_body(i) for i in range(LAUNCHES)]
    releases: list[str] = []
    if variant == "owner-in-lambda":
        bodies = [_owner_in_lambda(b, i) for i, b in enumerate(bodies)]
    elif variant == "release-once-queued":
        bodies = [_release_once_queued(b, i) for i, b in enumerate(bodies)]
    elif variant == "release-at-end":
        releases = [ln for b in bodies for ln in b if "memory.handed();" in ln]
        bodies = [[ln for ln in b if "memory.handed();" not in ln] for b in bodies]
        if len(releases) != LAUNCHES:
            raise ValueError("the release-at-end edit no longer applies to launch_codegen's launcher")
    elif variant != "generated":
        raise ValueError(f"unknown variant {variant!r}; valid: {', '.join(VARIANTS)}")
    params = ", ".join(["aclrtFuncHandle kernel_handle"] + [f"{a.ctype} {a.value}" for a in
                                                            lc.args_from_signature(SIGNATURE)]
                       + ["uint32_t grid_0", "uint32_t grid_1", "uint32_t grid_2", "aclrtStream stream_"])
    lines = [f"inline void {function_name(variant)}({params}) {{",
             "    if (grid_0 == 0 || grid_1 == 0 || grid_2 == 0) return;"]
    for b in bodies:
        lines += b
    lines += releases + ["}"]
    return "\n".join(lines) + "\n"


def header() -> str:
    """Every variant's wrapper in namespace ``wrapper_shape``, with the ``launchKernel`` the generated code calls
    (torch_npu's ``OpCommand::RunOpApiV2``, as in a compiled graph; with ``sync_after_each`` set, the stream
    synchronised after each call: with the task queue off each kernel has then finished before the next launch)."""
    out = [f"// Generated by tooling/releases/wrapper_shape.py from launch_codegen (do not edit): a wrapper of "
           f"{LAUNCHES} launches and its mutants.",
           "#pragma once", "#include <acl/acl.h>", "#include <npu_launch_resources.h>",
           "#include <torch_npu/csrc/framework/OpCommand.h>", "#include <algorithm>", "#include <functional>",
           "#include <map>", "#include <memory>", "#include <mutex>", "#include <thread>", "#include <utility>",
           "#include <vector>", "",
           "namespace wrapper_shape {",
           f"constexpr int kLaunches = {LAUNCHES};",
           f'constexpr const char* kKernel = "{KERNEL}";',
           f"constexpr uint64_t kLockBytes = {8 * META['lock_num']};",
           f"constexpr uint64_t kWorkspacePerBlock = {META['workspace_size']};",
           f"constexpr int64_t kLockInit = {META['lock_init_val']};",
           "inline aclrtStream sync_after_each = nullptr;",
           "inline void launchKernel(std::function<int()> launch_call, const char* kernel_name) {",
           "  at_npu::native::OpCommand::RunOpApiV2(kernel_name, launch_call);",
           "  if (sync_after_each != nullptr) (void)aclrtSynchronizeStream(sync_after_each);",
           "}", *(mutant_helpers.definition(n) for n in (*mutant_helpers.CLASS_NAMES, "capture-error-read-as-capturing"))]
    for v in VARIANTS:
        out.append(wrapper_source(v))
    out.append("}  // namespace wrapper_shape")
    return "\n".join(out) + "\n"


def write(into: Path) -> Path:
    """:func:`header` as ``into/wrapper_shape.h`` (rewritten only when it changed); its path."""
    into.mkdir(parents=True, exist_ok=True)
    path = into / HEADER
    text = header()
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return path


def digest() -> str:
    return hashlib.sha256(header().encode()).hexdigest()[:16]
