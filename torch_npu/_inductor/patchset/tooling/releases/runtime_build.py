"""Step 3 of a release's way, built for its runtime: launchers rendered by a wheel compiled into one shared object
linked against its ``libtorch_npu.so`` and, by file name, the host ACL library, with the C entry points the children
call (:func:`entries_source`: one per launcher, and the gate that holds torch_npu's task queue).

The way a release goes (``test/test_tooling_imports.py`` keeps it one way): fetched and extracted (``wheels.py``:
also where its files are and which torch they require), its runtime made (``line_python.py``, ``host_runtime.py``:
the interpreter of its torch line, the host ACL library), built against its headers with that interpreter's torch
(``real_artifacts.py``: the interpreter is handed in, never looked up there), launchers built for that runtime (this
module), run there (``runtime_run.py``), judged (``real_runtime_judge.py``). ``real_runtime.py``,
``real_sources.py`` and ``real_runtime_bench.py`` take a release along it.

:func:`build_launchers` is the one build the real-runtime tier, its samples and scenarios, and the benchmark share.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from . import aot_artifacts, host_runtime, wheels
from . import real_artifacts as ra
from .line_python import LineUnavailable
from .real_artifacts import first_line

ENTRY = "npu_patchset_real_runtime_call_"
#: The host ACL library's file (and soname): torch_npu loads it, the launchers link it, the child reaches its
#: control surface in it.
HOST_LIBRARY = "libascendcl.so"


class RealRuntimeError(ra.TierError):
    """The tier could not run (no host ACL library, a wheel that does not import, a build that failed)."""


_LOAD_KERNEL = re.compile(r'loadKernel\(\s*"(?P<path>[^"]+)"\s*,\s*"(?P<name>[^"]+)"')

_GLUE = r"""
// ---- real-runtime tier glue (tooling/releases/real_runtime.py): what the Python child calls --------------
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <sys/syscall.h>
#include <unistd.h>
namespace npu_patchset_real_runtime {
// A launcher's tensor arguments: the wrapper reads only data_ptr() (the memory is a real npu tensor's).
struct Tensor {
  void* p;
  void* data_ptr() const { return p; }
};
std::mutex gate_mu;
std::condition_variable gate_cv;
// Gates are numbered: one reached (its task runs on the queue thread) or released (opened) is never mistaken
// for a later one.
uint64_t gate_count = 0, gate_reached = 0, gate_released = 0, gate_inline = 0;
long long queue_tid = 0;
// What torch_npu said when it refused a gate's task: its queue reports a failed task once, to whichever call
// reaches it first (the next enqueue or a synchronisation).
std::string gate_refusal;
// The end of the compiled graph's wrapper function: what a launcher kept until then goes back (a mutant's).
std::mutex held_mu;
std::vector<torch_npu::inductor::LaunchMemory*> held;
void hold_until_wrapper_end(torch_npu::inductor::LaunchMemory* m) {
  std::lock_guard<std::mutex> g(held_mu);
  held.push_back(m);
}
}  // namespace npu_patchset_real_runtime
namespace nprt = npu_patchset_real_runtime;

// Holds torch_npu's task queue: a task of its own waits in it until the gate opens, so the launches queued
// meanwhile run only after their calls returned. 1: the queue thread waits there; 0: the queue is off
// (RunOpApiV2 ran the task on this thread); -1: the queue thread did not reach it within timeout_ms; -2:
// torch_npu's queue refused it (stopped by an earlier failed task).
extern "C" __attribute__((visibility("default"))) int npu_patchset_real_runtime_gate_close(int timeout_ms) {
  uint64_t gate;
  {
    std::lock_guard<std::mutex> g(nprt::gate_mu);
    gate = ++nprt::gate_count;
  }
  const std::thread::id caller = std::this_thread::get_id();
  try {
    // A device queue's first task is waited for (enCurrentNPUStream: status INIT, MakeSureQueueEmpty): a
    // task that does nothing goes first, so that the gate never waits for itself.
    static std::once_flag started;
    std::call_once(started, [] { at_npu::native::OpCommand::RunOpApiV2("npu_patchset_real_runtime_start", [] { return 0; }); });
    at_npu::native::OpCommand::RunOpApiV2("npu_patchset_real_runtime_gate", [caller, gate]() -> int {
      std::unique_lock<std::mutex> lk(nprt::gate_mu);
      nprt::queue_tid = static_cast<long long>(syscall(SYS_gettid));
      nprt::gate_reached = std::max(nprt::gate_reached, gate);
      if (std::this_thread::get_id() == caller) nprt::gate_inline = gate;  // the queue is off: nothing to hold
      nprt::gate_cv.notify_all();
      nprt::gate_cv.wait(lk, [gate] { return nprt::gate_released >= gate || nprt::gate_inline == gate; });
      return 0;
    });
  } catch (const std::exception& e) {  // torch_npu's queue stopped after a failed task: it takes nothing more
    std::lock_guard<std::mutex> g(nprt::gate_mu);
    nprt::gate_released = std::max(nprt::gate_released, gate);
    nprt::gate_refusal = e.what();
    return -2;
  }
  std::unique_lock<std::mutex> lk(nprt::gate_mu);
  if (!nprt::gate_cv.wait_for(lk, std::chrono::milliseconds(timeout_ms), [gate] { return nprt::gate_reached >= gate; }))
    return -1;
  return nprt::gate_inline == gate ? 0 : 1;
}
// What torch_npu said when it last refused a gate's task ("" if it never did), cut to fit `out`.
extern "C" __attribute__((visibility("default"))) void npu_patchset_real_runtime_gate_refusal(char* out, size_t n) {
  std::lock_guard<std::mutex> g(nprt::gate_mu);
  std::snprintf(out, n, "%s", nprt::gate_refusal.c_str());
}
// Lets every gate closed so far go.
extern "C" __attribute__((visibility("default"))) void npu_patchset_real_runtime_gate_open() {
  std::lock_guard<std::mutex> g(nprt::gate_mu);
  nprt::gate_released = nprt::gate_count;
  nprt::gate_cv.notify_all();
}
// The thread that ran the gate's task last: torch_npu's queue thread, or the caller with the queue off.
extern "C" __attribute__((visibility("default"))) long long npu_patchset_real_runtime_queue_tid() {
  std::lock_guard<std::mutex> g(nprt::gate_mu);
  return nprt::queue_tid;
}
// What torch_npu's allocator's free-memory callback does at a cache miss: every idle or retired kept block of this
// device goes back to the allocator, its stream recorded as a use; how many.
extern "C" __attribute__((visibility("default"))) int npu_patchset_real_runtime_give_back() {
  return static_cast<int>(torch_npu::inductor::KeptBlocks::all().give_back(true));
}
// What torch.npu.empty_cache() does with the patch set applied (npu-empty-cache-launch-memory: the kept blocks go
// back, then torch_npu's caching allocator's emptyCache), from a ctypes call, which releases the GIL: torch_npu's own
// Python binding keeps it during the device synchronisation, so a pause of the host ACL library inside it would
// stop every Python thread. 0, or 1 with the exception's text in `error`.
extern "C" __attribute__((visibility("default"))) int npu_patchset_real_runtime_empty_cache(char* error, size_t n) {
  try {
    torch_npu_launch_resources_give_back();
    c10_npu::NPUCachingAllocator::emptyCache(true);
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, n, "%s", e.what());
  }
  return 1;
}
// The end of the wrapper function; how many blocks a launcher had kept until then.
extern "C" __attribute__((visibility("default"))) int npu_patchset_real_runtime_wrapper_end() {
  std::lock_guard<std::mutex> g(nprt::held_mu);
  const int n = static_cast<int>(nprt::held.size());
  for (auto* m : nprt::held) delete m;
  nprt::held.clear();
  return n;
}
"""


def _call_arguments(fn: re.Match) -> str:
    """The rendered launcher's call from the entry point's C arguments (the launcher's parameters by name)."""
    tparams = {t.strip().split()[-1] for t in (fn.group("tparams") or "").split(",") if t.strip()}
    args = []
    for raw in [p.strip() for p in fn.group("params").split(",") if p.strip()]:
        name = re.findall(r"\w+", raw.split("=")[0])[-1]
        if "=" in raw:
            args.append("std::optional<std::string>(cubin_dir)")  # cubin_dir_: the probe binaries written here
        elif name == "kernels_":  # aot_mode: the model's kernels struct, loaded on first use and kept
            args.append("kernels")
        elif any(re.search(rf"\b{t}\b", raw) for t in tparams):
            args.append(f"npu_patchset_real_runtime::Tensor{{{'in_ptr' if 'in_ptr' in name else 'out_ptr'}}}")
        elif name.endswith("numel"):
            args.append("numel")
        elif name == "device_idx_":
            args.append("device")
        elif name == "stream_":
            args.append("static_cast<aclrtStream>(stream)")
        else:
            raise ra.TierError(f"{fn.group('name')}: parameter {raw!r} has no argument in the real-runtime entry")
    return ", ".join(args)


def entries_source(calls: Sequence[re.Match], keys: Sequence[str]) -> str:
    """The glue and one C entry per launcher: ``int ENTRY<i>(in, out, numel, device, stream, cubin_dir, error,
    error_size)``, 0 once the launch is queued, 1 with the exception's text when the call threw."""
    out = [_GLUE]
    for i, (fn, key) in enumerate(zip(calls, keys)):
        out.append(
            f"// {key}\n"
            f'extern "C" __attribute__((visibility("default"))) int {ENTRY}{i}(void* in_ptr, void* out_ptr, '
            f"int64_t numel, int32_t device, void* stream, const char* cubin_dir, char* error, size_t error_size) {{\n"
            f"  (void)device;\n"
            + (f"  static {aot_artifacts.KERNELS_TYPE} kernels;  // the model's: one per launcher here\n"
               if re.search(r"\bkernels_\b", fn.group("params")) else "") +
            f"  try {{\n    {fn.group('name')}({_call_arguments(fn)});\n    return 0;\n"
            f"  }} catch (const std::exception& e) {{\n    std::snprintf(error, error_size, \"%s\", e.what());\n"
            f"  }} catch (...) {{\n    std::snprintf(error, error_size, \"a non-standard exception\");\n  }}\n"
            f"  return 1;\n}}\n")
    return "\n".join(out)


def host_libraries(release: str) -> dict[str, Path]:
    """``{file name: path}`` of the host ACL library for ``release``: what the launchers link by name (every
    file name the wheel needs is that one library, soname libascendcl.so; it defines the rt* calls too)."""
    try:
        root = Path(host_runtime.runtime_dir(release))
    except Exception as exc:  # said in one line: the release cannot run here
        raise RealRuntimeError(f"torch_npu {release}: the host ACL library could not be built for it: "
                               f"{first_line(str(exc)) or type(exc).__name__}") from exc
    if not (root / HOST_LIBRARY).is_file():
        raise RealRuntimeError(f"torch_npu {release}: no {HOST_LIBRARY} in the host ACL library's folder {root}")
    return {HOST_LIBRARY: root / HOST_LIBRARY}


def line_python(release: str) -> str:
    """The interpreter of ``release``'s own torch line (``host_runtime.python_for``), or why there is none."""
    try:
        return host_runtime.python_for(release)
    except LineUnavailable as exc:
        raise RealRuntimeError(str(exc)) from exc
    except wheels.WheelUnavailable as exc:  # the wheel says which torch it requires
        raise RealRuntimeError(f"torch_npu {release}: wheel unavailable: {first_line(str(exc))}") from exc


def build_launchers(release: str, name: str, harness: dict, tags: Sequence[str], *, python: str,
                    libraries: dict[str, Path], helper: Path | None = None, aot: bool = False,
                    error: type[Exception] | None = None) -> tuple[ra.TierResult, list[dict]]:
    """The ``tags`` renderings of ``harness`` in one shared object for the children (``real_artifacts.build`` with a
    ``Flavour`` named ``name``, cached), linked by file name against ``libraries`` (what stands for CANN): the build's
    result and per launcher ``key``, ``tag``, ``sample``, ``entry``, ``cubin`` (file name) and ``kernel_name``.
    Raises ``error`` (default :class:`RealRuntimeError`), one line first, when it cannot be built."""
    error = error or RealRuntimeError
    flavour = ra.Flavour(name=name, tags=tuple(tags), entries=entries_source, acl_libraries=libraries,
                         harness=harness, triton_shim=True)
    try:
        result = ra.build(release, python=python, helper=helper, flavour=flavour, aot=aot)
    except ra.TierError as exc:
        raise error(str(exc)) from exc
    if not result.ok:
        raise error(result.message)
    launchers = []
    for i, key in enumerate(result.info["launchers"]):
        tag, sample_key = key.split("/", 1) if len(tags) > 1 else (tags[0], key)  # one rendering: bare keys
        found = _LOAD_KERNEL.search(harness[tag][sample_key]["cpp"])
        if not found:
            raise error(f"torch_npu {release}: no loadKernel(...) in the rendered {key} launcher")
        launchers.append({"key": key, "tag": tag, "sample": sample_key, "entry": f"{ENTRY}{i}",
                          "cubin": Path(found.group("path")).name, "kernel_name": found.group("name")})
    return result, launchers
