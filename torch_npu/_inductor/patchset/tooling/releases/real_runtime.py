"""The real-runtime tier: torch_npu's own binaries run the generated launchers (no NPU needed).

The host simulation (``sim/``) models torch_npu's allocators and task queue from its source; this tier runs
torch_npu's own instead. A released wheel's ``libtorch_npu.so`` loads unchanged over the host ACL library
(``releases/host_runtime.py``: a TEST DOUBLE of CANN built from the project's ACL simulation, loaded only
into the subprocesses this tier starts, never into a user's process), so that its task queue, caching
allocator, workspace allocator and ``OpCommand`` run the launchers, and only the ACL boundary is ours.

1. **Build** (one piece with the real-artifact tier: ``real_artifacts.build`` with a :class:`Flavour`):
   every launcher rendered by the wheel's own Python codegen after ``patchset.apply()`` (and as shipped),
   compiled against the wheel's headers into one shared object linked against its ``libtorch_npu.so`` and,
   by file name, the host ACL library; plus C entry points (:func:`entries_source`) and a gate that holds
   torch_npu's task queue with a task of its own.
2. **Run** (``real_runtime_child.py``, in ``host_runtime.subprocess_env``): torch and the wheel's torch_npu
   imported, device 0 set, the shared object loaded with ctypes and each launcher called with real ``npu``
   tensors on the default stream. ctypes rather than a Python extension: the shared object stays the plain
   C++ library the link check builds (no Python C API to compile against each torch line), and a ctypes call
   releases the GIL, so several Python threads launch at once as a compiled graph's callers would. Each
   launch is made with the queue held (its lambda runs only after the call returned, as on a busy device):
   what the caching allocator holds then shows where the launch memory goes back. Each run also with
   ``TASK_QUEUE_ENABLE=0`` (the lambda on the calling thread) and ``=2``.
3. **Judge** (``real_runtime_judge.py``): the probe kernel's reports (what each launch received: pointers, regions live, sized,
   disjoint, initialised, lock content) and the host ACL library's call records (which thread launched,
   fills, blocking copies, device synchronisations), with ``memory_allocated`` before, while queued and after.
   What a kernel got is judged by the simulation's own rules (``sim.harness.kernel_problems``); what a launch
   cost and where its memory went by :func:`judge_launch`.

4. **Scenarios** (:data:`SCENARIO_SETUPS`, named as the simulation's where they are the same case): Python
   threads launching on one stream, on two devices, with another thread's ``empty_cache`` (task queue off and
   on) or out-of-memory retry, beside torch_npu's own ``zero_`` / ``fill_`` (their workspace taken on the queue
   thread), and through ``torch.npu.NPUGraph`` capture, ``empty_cache``, growth and replay. The scenarios that
   share a TASK_QUEUE_ENABLE value run in turn in one child (:func:`batches`); each is judged alone
   (``real_runtime_judge.judge_scenario``), then over its values (``combine_runs``). docs/real-runtime-scenarios.md
   gives what torch_npu's own code did in each.

Command line: ``python -m torch_npu._inductor.patchset launcher --samples --real-runtime 2.7.1.post10
[--as-shipped] [--json]``, ``launcher --scenario NAME|list --real-runtime RELEASE [--as-shipped] [--json]``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
import subprocess
from pathlib import Path
from typing import Sequence

from ..sim import harness as sim_harness
from ..sim import launcher_writer as lc
from ..sim.samples import SAMPLES, Sample
from . import mutant_helpers, rendered
from . import real_artifacts as ra
from .real_runtime_judge import (
    child_failure,
    combine_runs,
    expectations,
    first_line,
    judge_launch,
    judge_scenario,
)
from .runtime_build import (  # noqa: F401  (ENTRY, HOST_LIBRARY, entries_source, line_python: for callers)
    ENTRY,
    HOST_LIBRARY,
    RealRuntimeError,
    build_launchers,
    entries_source,
    host_libraries,
    line_python,
)
from .runtime_run import CHILD, CHILD_IMPORT_BOUND_S, LAUNCHES, PARENT_GRACE_S, run_child  # noqa: F401  (for callers)

#: TASK_QUEUE_ENABLE values each run is made with: torch_npu's default (1), off (0), level 2.
QUEUE_MODES = ("1", "0", "2")

#: The scenarios' kernel: 1 MiB of workspace per program, grid 8 (8 MiB per launch).
SCENARIO_SAMPLE = Sample("threads", "1 MiB workspace per program, grid 8",
                         {"name": "triton_red_threads_0 aiv", "mix_mode": "aiv", "parallel_mode": "simd",
                          "force_simt_only": False, "workspace_size": 1 << 20},
                         "*fp32,*fp32,i32", (8, 1, 1))
SCENARIO_THREADS, SCENARIO_LAUNCHES, EMPTY_CACHE_EVERY = 3, 60, 7
#: threads-oom-retry: the device's memory (the host ACL library's ACL_HOST_DEVICE_GIB) and the other thread's
#: allocation, which fits only once torch_npu's allocator has returned what it caches (two of them, one cached per
#: stream, never fit). 640 MiB leaves the launches in flight 384 MiB (48 blocks): at 960 MiB, blocks held until
#: their kernel finished left 64 MiB, and a launch whose own retry lost the race to the other thread's threw
#: torch_npu's out-of-memory error (1 to 7 of 180, post10).
OOM_DEVICE_GIB, OOM_BYTES = 1, 640 << 20
#: memory-back-*: the device's memory, the launches, the tensor asked for afterwards. The scenario kernel x 4 needs
#: 32 MiB (a 34 MiB segment), its first 8 MiB launch a 20 MiB one, the launchers' buffers a 2 MiB one: 48 MiB (50
#: with torch_npu's padding) fits only once the kept block (and a replaced one) went back.
PRESSURE_DEVICE_BYTES, PRESSURE_LAUNCHES, PRESSURE_TENSOR_BYTES = 64 << 20, 4, 48 << 20


@dataclasses.dataclass(frozen=True)
class Scenario:
    """One scenario of this tier: what the child does (``real_runtime_child.run_scenario`` / ``run_capture``),
    with which TASK_QUEUE_ENABLE values (a child each), and what it must show it exercised (the judge's
    ``exercises``: "frees", "refused", "devices", "threads", "operators", "replays")."""
    what: str
    queues: tuple[str, ...] = ("1",)
    mode: str = "scenario"  # or "capture"
    threads: int = SCENARIO_THREADS
    per_thread: int = SCENARIO_LAUNCHES
    devices: tuple[int, ...] = (0,)
    empty_cache_every: int = 0
    empty_cache_thread: bool = False
    operators: bool = False
    oom: bool = False
    pace_s: float = 0  # a launching thread's pause after each launch
    exercises: tuple[str, ...] = ("threads",)
    sample: str = "threads"  # the launcher it calls (a key of RUNTIME_SAMPLES)
    rounds: int = 0  # interleave: rounds, each a window made by construction (the host ACL library's pauses)
    grow: int = 0  # a launch needing a block this many times larger than the first one's (its grid x grow)
    alone: bool = False  # in a child of its own (it stops torch_npu's queue, or holds streams, for the rest)
    variant: str = ""  # pressure: the launching thread "idle" or "ended", or its block "replaced"


#: The scenarios this tier runs (issues 30 and 31), named as the simulation's (``launcher --scenario list``) where
#: they are the same case.
SCENARIO_SETUPS = {
    "threads-empty-cache": Scenario(
        "3 Python threads x 60 launches on the default stream (1 MiB workspace x grid 8, a segment of its own), "
        "each thread calling torch.npu.empty_cache() every 7 launches", empty_cache_every=EMPTY_CACHE_EVERY,
        exercises=("threads", "frees")),
    "threads-oom-retry": Scenario(
        "the same, with a fourth thread whose allocations make torch_npu's caching allocator run its out-of-memory "
        "retry (the host ACL library's device memory limited)", empty_cache_every=EMPTY_CACHE_EVERY, oom=True,
        exercises=("threads", "frees", "refused")),
    "threads-one-stream": Scenario(
        "3 Python threads x 30 launches on the default stream, no empty_cache; with TASK_QUEUE_ENABLE 1, 0 and 2 "
        "(a process each)", queues=QUEUE_MODES, per_thread=30),
    "devices-threads-queue-off": Scenario(
        "4 Python threads, 2 per device on devices 0 and 1 (the host ACL library's ACL_HOST_DEVICES=2), x 20 "
        "launches on their device's default stream; task queue on (each device's queue thread), then off (a "
        "process each)", queues=("1", "0"), threads=4, per_thread=20, devices=(0, 1),
        exercises=("threads", "devices")),
    "empty-cache-other-thread": Scenario(
        "task queue off: 3 Python threads x 60 launches on the default stream while a fourth calls "
        "torch.npu.empty_cache() in a loop (1 ms apart; each launching thread pauses 1 ms after each launch)",
        queues=("0",), empty_cache_thread=True, pace_s=0.001, exercises=("threads", "frees")),
    "empty-cache-while-queued": Scenario(
        "task queue on: 3 Python threads x 60 launches on the default stream, their lambdas in torch_npu's queue, "
        "while a fourth calls torch.npu.empty_cache() in a loop (1 ms apart)", empty_cache_thread=True,
        exercises=("threads", "frees")),
    "torch-npu-op-workspace-concurrent": Scenario(
        "TASK_QUEUE_ENABLE=2: a thread runs torch_npu's own Tensor.zero_() and Tensor.fill_() (op-plugin's "
        "aclnnInplaceZero and aclnnInplaceFillScalar, queued whole: the first phase and torch_npu's workspace "
        "allocator on the device's queue thread) on devices 0 and 1, 1 ms apart, while 2 threads x 30 launches run "
        "on them", queues=("2",), threads=2, per_thread=30, devices=(0, 1), operators=True,
        exercises=("threads", "devices", "operators")),
    "capture-then-empty-cache-grow": Scenario(
        "torch.npu.NPUGraph on a stream of its own (task queue on): a warm-up launch, 4 launches captured, then "
        "eager launches with torch.npu.empty_cache() and growth (2 x 256 MiB allocated) between them, then 3 "
        "replays; the simulation's capture-then-empty-cache and capture-then-grow in one", mode="capture",
        threads=1, per_thread=0, exercises=("frees", "replays")),
    "two-graphs-one-stream": Scenario(
        "two torch.npu.NPUGraph captured one after the other on torch.npu.graph's default capture stream (a "
        "warm-up launch and 4 launches each), then replayed 3 times at the same time on two streams of their own: "
        "each graph's kernels must run on memory of their own; task queue on, then off (TASK_QUEUE_ENABLE 1, 0)",
        queues=("1", "0"), mode="graphs", threads=1, per_thread=0, exercises=("replays", "graphs")),
    "global-capture-other-stream": Scenario(
        "torch.npu.graph on a stream of its own in global mode (its default capture_error_mode) captures 4 launches "
        "while another thread's eager launches with lock content 1 (4 int64 slots, and 1 KiB of workspace per "
        "program) run on a second stream: the capture must stay valid (no event recorded or queried, no page-locked "
        "memory on the device meanwhile) and the eager kernels get their lock content; then 3 replays; "
        "TASK_QUEUE_ENABLE 1, 0", queues=("1", "0"), mode="global-capture", threads=1, per_thread=0, sample="both",
        exercises=("replays", "during-capture")),
    "queue-thread-oom-retry": Scenario(
        "device memory (the host ACL library's 1 GiB) filled with blocks cached for another stream, then 4 launches: "
        "the first one's request fits only once torch_npu's caching allocator has run its out-of-memory retry (the "
        "device synchronised, the cached blocks freed), which must run on the calling thread, never on torch_npu's "
        "queue thread; 3 rounds", mode="oom-fill", threads=1, per_thread=0, oom=True,
        exercises=("caller-retry",)),
    "threads-interleaved-locks": Scenario(
        "TASK_QUEUE_ENABLE=0: 2 Python threads on the default stream, a kernel with 16 legacy lock slots (init 7); "
        "4 rounds in which thread 0's launch is paused by the host ACL library at its ACL launch call, its lock "
        "fills made, while thread 1 makes a whole launch (on the stream: 0's fills, 1's fills and kernel, 0's "
        "kernel; each kernel leaves its lock slots used)", queues=("0",), mode="interleave", threads=2, per_thread=0,
        sample="locks", rounds=4, exercises=("threads", "windows")),
    "threads-interleaved-packed": Scenario(
        "the same with the packed lock layout (2 ordered + 1 unordered lock, init 5, a mix kernel)", queues=("0",),
        mode="interleave", threads=2, per_thread=0, sample="packed-mix", rounds=4, exercises=("threads", "windows")),
    "eager-capture-eager": Scenario(
        "one stream of its own, current throughout: an eager launch (8 MiB; its block kept), 2 launches captured "
        "with torch.npu.graph on that stream, an eager launch needing a block 4 x larger (32 MiB: it replaces the "
        "kept one, which goes back once its kernels finished), torch.npu.empty_cache(), then 2 replays: the "
        "captured kernels run on the graph's own memory; TASK_QUEUE_ENABLE 1, 0", queues=("1", "0"),
        mode="eager-capture", threads=1, per_thread=0, grow=4, exercises=("replays",)),
    "queue-stops-after-failed-lambda": Scenario(
        "TASK_QUEUE_ENABLE=1: 3 launches, then one whose ACL launch fails in its lambda on torch_npu's queue thread "
        "(a fault the host ACL library injects), reported by the next synchronisation; torch_npu's queue then "
        "drops every later task: 8 launches more return and never run, no hang. The kept block stays allocated "
        "(its lambdas never all ran, so it is never freed while it might be written): at most one launch's block "
        "stays, however many launches were dropped", mode="queue-stops", threads=1, per_thread=0, alone=True,
        exercises=("queue-stops",)),
    "larger-block-empty-cache": Scenario(
        "2 rounds, each on a stream of its own: another thread's emptyCache stops as its device synchronisation "
        "returns (a pause of the host ACL library), the stream held (its kernels stay pending), a new thread "
        "launches (8 MiB) and then needs a block 4 x larger, which replaces the first (with the queue on, the "
        "first lambda has run: reading the stream empties torch_npu's queue); the other thread's emptyCache then "
        "frees what torch_npu caches, or stops as it is about to wait for an allocator event (one behind the held "
        "kernels), and only then does the stream run; TASK_QUEUE_ENABLE 0, 1",
        # alone: after a scenario that initialised device 1, emptyCache synchronises a device again after the
        # pause, which waits for the held stream (until the hold's limit): only device 0 may be initialised
        queues=("0", "1"), mode="empty-cache-window", threads=1, per_thread=0, grow=4, rounds=2, alone=True,
        exercises=("windows", "frees")),
    **{f"memory-back-{name}": Scenario(
        f"the device limited to 64 MiB: {what}, the device synchronised, then a 48 MiB tensor that fits only if "
        "the launch memory goes back to torch_npu's caching allocator when it needs it: allocated at the first call "
        "(issue 47); TASK_QUEUE_ENABLE 1, 0", queues=("1", "0"), mode="pressure", threads=1, per_thread=PRESSURE_LAUNCHES,
        grow=4, variant=variant, exercises=("pressure",))
       for name, variant, what in (
           ("thread-idle", "idle", "a thread makes 4 launches needing 32 MiB each, then stays alive and idle"),
           ("thread-ended", "ended", "a thread makes 4 launches needing 32 MiB each, then ends"),
           ("block-replaced", "replaced", "a thread makes a launch needing 8 MiB, then 4 needing 32 MiB (the "
            "first block replaced), then stays alive and idle"))},
    "memory-back-lambda-pending": Scenario(
        "the device limited to 64 MiB, torch_npu's queue held: a thread makes 4 launches needing 32 MiB each, then "
        "stays alive and idle; with their lambdas still queued another thread asks for a 48 MiB tensor, which fits "
        "only if the launch memory goes back at the allocator's cache miss (the queue let go once the allocator's "
        "first device allocation was refused; its out-of-memory retry waits for it): allocated at the first call "
        "(issue 53)", queues=("1",), mode="pressure", threads=1, per_thread=PRESSURE_LAUNCHES, grow=4,
        variant="queued", exercises=("pressure",)),
    "memory-back-capture-after-warm-up": Scenario(
        "the device limited to 64 MiB: a thread makes 4 eager launches needing 32 MiB each (the warm-up), then stays "
        "alive and idle; another captures one such launch with torch.npu.graph on a stream of its own (which "
        "synchronises and empties the cache first; during the capture torch_npu's allocator takes nothing back) and "
        "replays it: the captured launch fits only if the warm-up's launch memory went back at the graph's start "
        "(issue 53); TASK_QUEUE_ENABLE 1, 0", queues=("1", "0"), mode="pressure", threads=1,
        per_thread=PRESSURE_LAUNCHES, grow=4, variant="capture", exercises=("pressure",)),
    "memory-back-history": Scenario(
        "the device limited to 64 MiB, memory history recorded (torch.npu.memory._record_memory_history(): Python "
        "stacks at every free): a thread launching with the GIL released, as a compiled graph does, makes a launch "
        "needing 8 MiB, then one needing 32 MiB whose cache miss stops, holding the allocator's mutex, while another "
        "thread takes a memory snapshot (torch_npu's binding waits for that mutex with the GIL held): both go on (no "
        "free under the mutex takes the GIL), and the other thread's 48 MiB tensor, asked for once the launches were "
        "made, fits at its first call (issue 53); TASK_QUEUE_ENABLE 1, 0", queues=("1", "0"), mode="pressure",
        threads=1, per_thread=1, grow=4, variant="history", exercises=("pressure", "held-miss")),
    "pluggable-allocator-no-memory": Scenario(
        "a pluggable allocator (torch.npu.memory.change_current_allocator, set before torch_npu's first allocation) "
        "whose malloc answers requests of 1 MiB and more with no memory and no error, as a user's may: the 8 MiB "
        "launch is refused on the calling thread with the helper's error, nothing queued, no kernel reached "
        "(issue 47, point 5)", mode="pluggable", threads=1, per_thread=1, alone=True, exercises=()),
}
SCENARIOS = {name: sc.what for name, sc in SCENARIO_SETUPS.items()}
#: capture-then-empty-cache-grow: launches captured, replays, the eager launches ``run_capture`` makes (a warm-up,
#: one after the capture, one per growth step, one after the second empty_cache), the growth per step.
CAPTURED, REPLAYS, CAPTURE_EAGER, GROW_BYTES = 4, 3, 5, 256 << 20
#: two-graphs-one-stream: the graphs (a warm-up launch each). global-capture-other-stream: the other thread's eager
#: launches before, during and after the capture, and the captured launch's warm-up.
GRAPHS, EAGER_BEFORE, EAGER_DURING, EAGER_AFTER = 2, 2, 4, 1
#: queue-thread-oom-retry: rounds of (device filled, launches), launches per round; the fill's requests, largest
#: first, each until torch_npu refuses it: the scenario kernel's 8 MiB (a 20 MiB segment of torch_npu's caching
#: allocator), then 512 KiB (its small blocks' 2 MiB segments; 1 MiB is rounded past them, into 20 MiB ones), so
#: that less than 2 MiB is left: neither the caching allocator's segment nor the workspace allocator's block (10 MiB,
#: the memory-in-lambda mutant's) fits.
OOM_ROUNDS, OOM_LAUNCHES, FILL_BYTES = 3, 4, (64 << 20, 8 << 20, 512 << 10)
#: queue-stops-after-failed-lambda: launches before the faulted one, launches after it (each dropped by torch_npu's
#: queue), and the code the host ACL library's ACL launch returns. eager-capture-eager: launches captured, replays.
FAULT_BEFORE, FAULT_AFTER, FAULT_CODE = 3, 8, sim_harness.FAULT_CODE
EC_CAPTURED, EC_REPLAYS = 2, 2
#: What this tier renders for every release: the samples and the scenarios' kernel, in one rendering and build.
RUNTIME_SAMPLES = (*SAMPLES, SCENARIO_SAMPLE)
RUNTIME_SAMPLE_BY_KEY = {s.key: s for s in RUNTIME_SAMPLES}


# ---- 1. build -------------------------------------------------------------------------------------
@dataclasses.dataclass
class Built:
    release: str
    shared_object: Path
    launchers: list[dict]  # key, tag, kernel, entry, cubin (file name), numel, plan inputs
    harness: dict
    info: dict


def build(release: str, *, helper: Path | None = None, python: str | None = None,
          libraries: dict[str, Path] | None = None, renderings: dict | None = None, aot: bool = False) -> Built:
    """Every launcher of ``release`` in one shared object for the child: :data:`RUNTIME_SAMPLES` rendered by the
    wheel's own codegen after ``patchset.apply()`` ("patched") and as shipped ("upstream"), and each of
    :data:`MUTANTS` of the patched :data:`MUTANT_SAMPLES` (tagged with the mutant's name); ``libraries``: what
    stands for CANN at link time (default: the host ACL library for ``release``). ``renderings``: launchers
    rendered elsewhere (a harness JSON whose "patched" ones an upstream patch's code rendered), built as they
    are, with the wheel's own header, instead of the wheel's renderings and the mutants. ``aot``: the patched
    launchers rendered in aot_mode instead, under the wheel's real AOT header (its own ``loadKernel`` and
    ``launchKernel``, the helper's text inlined), each with a kernels struct of its own as a model holds one."""
    python = python or line_python(release)
    libraries = libraries if libraries is not None else host_libraries(release)
    rendered_json = renderings or ra.harness_json(release, python, samples=RUNTIME_SAMPLES, triton_shim=True, aot=aot)
    if "patched" not in rendered_json:
        raise RealRuntimeError(f"torch_npu {release}: the wheel harness rendered no launchers: "
                               f"{first_line(str(rendered_json.get('error') or rendered_json.get('layout')))}")
    harness = rendered_json if renderings or aot else with_mutants(rendered_json)
    tags = ("patched",) if aot else tuple(t for t in ("patched", *MUTANTS, "upstream") if t in harness)
    result, found = build_launchers(release, "aot-launchers" if aot else "launchers", harness, tags, python=python,
                                    libraries=libraries, helper=helper, aot=aot)
    launchers = []
    for ln in found:
        s = RUNTIME_SAMPLE_BY_KEY[ln["sample"]]
        launchers.append(dict(ln, kernel=f"{s.kernel}_{_ident(ln['tag'])}", xnumel=64 * math.prod(s.grid)))
    return Built(release, Path(result.info["shared_object"]), launchers, harness, result.info)


def _ident(tag: str) -> str:
    return tag.replace("-", "_")


def with_mutants(harness: dict) -> dict:
    """``harness`` with a rendering per mutant: the patched launchers of :data:`MUTANT_SAMPLES`, edited, their
    names (``call_<kernel>_patched``, its kernel handle, its launch name) given the mutant's suffix."""
    out = dict(harness)
    for name, edit in MUTANTS.items():
        out[name] = {}
        for key in (*MUTANT_SAMPLES, *MUTANT_EXTRA_SAMPLES.get(name, ())):
            kernel = RUNTIME_SAMPLE_BY_KEY[key].kernel
            cpp = edit(harness["patched"][key]["cpp"]).replace(f"{kernel}_patched", f"{kernel}_{_ident(name)}")
            out[name][key] = dict(harness["patched"][key], cpp=cpp)
    return out


# ---- mutants of the generated launcher (what the real runtime must catch, as the simulation does) ----------
_RELEASE = "npu_sync_memory.handed();"


def _helper_mutant(name: str):
    """A launcher whose LaunchMemory is :mod:`mutant_helpers`' ``name`` (an earlier or wrong rule)."""
    def edit(cpp: str) -> str:
        return mutant_helpers.definition(name) + mutant_helpers.use(cpp, name)
    edit.__doc__ = mutant_helpers.__doc__.split(f"* ``{name}``: ", 1)[1].split("\n* ", 1)[0].strip()
    return edit


def _release_at_end(cpp: str) -> str:
    """The block is handed over at the end of the wrapper function instead of right after its launch is queued:
    held while the rest of the graph runs, even when its lambda already ran (the task queue off)."""
    if _RELEASE not in cpp:
        return cpp
    cpp = cpp.replace("torch_npu::inductor::LaunchMemory npu_sync_memory(",
                      "auto& npu_sync_memory = *new torch_npu::inductor::LaunchMemory(")
    cpp = cpp.replace(_RELEASE, "npu_patchset_real_runtime::hold_until_wrapper_end(&npu_sync_memory);")
    return "namespace npu_patchset_real_runtime { void hold_until_wrapper_end(torch_npu::inductor::LaunchMemory*); }\n" + cpp


def _quarter_workspace(cpp: str) -> str:
    """The launcher asks for a quarter of the workspace: the kernel's region runs past its block."""
    return re.sub(r"UINT64_C\((\d+)\), npu_sync_locks\)", lambda m: f"UINT64_C({int(m.group(1)) // 4}), npu_sync_locks)",
                  cpp, count=1)


def _aliasing(cpp: str) -> str:
    """The workspace pointer is the lock region's: the two alias, as upstream's two requests do."""
    return cpp.replace("void* workspace_addr = npu_sync_regions.workspace;",
                       "void* workspace_addr = npu_sync_regions.locks;")


def _wrong_lock_content(cpp: str) -> str:
    """After the helper's fills, one more clears the locks: the kernel finds zero where the rule says otherwise."""
    if "npu_sync_locks.legacy_slots" not in cpp:
        return cpp
    return cpp.replace("void* sync_block_lock = npu_sync_regions.locks;",
                       "if (aclrtMemsetAsync(npu_sync_regions.locks, npu_sync_regions.sizes.lock_bytes, 0, "
                       "npu_sync_regions.sizes.lock_bytes, stream_) != ACL_SUCCESS) return 1;\n"
                       "        void* sync_block_lock = npu_sync_regions.locks;")


_MEMORY = re.compile(r"torch_npu::inductor::LaunchMemory npu_sync_memory\((?P<kernel>\"[^\"]*\"), stream_,"
                     r"(?P<sizes>[^;]*)\);\n[^\n]*npu_sync_memory\.regions\(\);[^\n]*\n")


_LAMBDA_OPENS = re.compile(r"auto launch_call\w* = \[=\]\(\) \{\n")  # launch_call_0 on post6


def _memory_in_lambda(cpp: str) -> str:
    """The helper of commit b45157f: the launch's memory taken inside the lambda, on torch_npu's queue thread, from
    torch_npu's workspace allocator (its stream's block, as ``acquire_launch_resources`` took it outside a capture;
    the storage's address, as the releases' own launchers read it: the tensor itself is empty)."""
    found, opens = _MEMORY.search(cpp), _LAMBDA_OPENS.search(cpp)
    if found is None or opens is None:
        return cpp
    cpp = cpp[:found.start()] + cpp[found.end():]
    inside = (
        f"const torch_npu::inductor::LaunchSizes npu_sync_sizes = torch_npu::inductor::launch_sizes("
        f"{found.group('kernel')},{found.group('sizes')});\n"
        "        at::Tensor npu_sync_block = at_npu::native::allocate_workspace(npu_sync_sizes.total_bytes, stream_);\n"
        "        const uintptr_t npu_sync_base = (reinterpret_cast<uintptr_t>(npu_sync_block.storage().data()) + "
        "torch_npu::inductor::kRegionAlignment - 1) & ~(torch_npu::inductor::kRegionAlignment - 1);\n"
        "        torch_npu::inductor::LaunchRegions npu_sync_regions;\n"
        "        npu_sync_regions.layout = npu_sync_locks;\n"
        "        npu_sync_regions.sizes = npu_sync_sizes;\n"
        "        if (npu_sync_sizes.lock_bytes != 0) npu_sync_regions.locks = reinterpret_cast<void*>(npu_sync_base);\n"
        "        if (npu_sync_sizes.workspace_bytes != 0) npu_sync_regions.workspace = "
        "reinterpret_cast<void*>(npu_sync_base + npu_sync_sizes.workspace_offset);\n")
    cpp = _LAMBDA_OPENS.sub(lambda m: m.group(0) + "        " + inside, cpp, count=1)
    return ("#include <torch_npu/csrc/core/npu/NPUWorkspaceAllocator.h>\n"  # at_npu::native::allocate_workspace
            + "\n".join(ln for ln in cpp.splitlines() if _RELEASE not in ln) + "\n")


#: The mutants the real runtime must catch, built into every release's shared object for :data:`MUTANT_SAMPLES`:
#: edits of the generated launcher, then the earlier and wrong launch-memory rules of :mod:`mutant_helpers`. (The
#: lambda owning the LaunchMemory is not among them: only a wrapper keeping its lambdas to its end shows it,
#: test/cpp/test_wrapper_shape.cpp, on the real runtime too.)
MUTANTS = {"release-at-end": _release_at_end,
           "quarter-workspace": _quarter_workspace, "aliasing": _aliasing, "wrong-lock-content": _wrong_lock_content,
           "memory-in-lambda": _memory_in_lambda, **{n: _helper_mutant(n) for n in mutant_helpers.NAMES}}
MUTANT_SAMPLES = ("both", "threads")
#: Samples a mutant is also built for: the lock layouts of the interleaved scenarios, for the rule they catch.
MUTANT_EXTRA_SAMPLES = {"shared-by-threads": ("locks", "packed-mix")}


# ---- 2. run ---------------------------------------------------------------------------------------
def probe_binary(built: Built, sim_time_us: int = 0, samples: dict | None = None, locks_used: bool = False) -> str:
    """The kernel binary every launcher's loadKernel reads (the harness renders one file name for all): the
    host ACL library's probe, told per kernel what it must find (the same for as shipped and patched) and how
    long it runs. ``samples``: the samples ``built`` rendered, by key (default this tier's). ``locks_used``: each
    kernel leaves its lock slots used, as a real kernel's sync counters (the scenarios: a lock region must be
    written again before every kernel, by that kernel's own launch)."""
    samples = RUNTIME_SAMPLE_BY_KEY if samples is None else samples
    lines = ["ACL_HOST_PROBE_BINARY 1"]
    seen = set()
    for ln in built.launchers:
        name = ln["kernel_name"].split()[0]  # what aclrtBinaryGetFunction / rtFunctionRegister look up
        if name in seen:
            continue
        seen.add(name)
        plan, site, args, grid = rendered.sample_setup(built.harness, samples[ln["sample"]], ln["tag"])
        exp = sim_harness.expected(plan, site, grid)
        lines.append(f"kernel {name} has_ffts={int(site.has_ffts)} simt_only={int(site.simt(plan))} "
                     f"lock_bytes={exp['lock_bytes']} workspace_bytes={exp['workspace_bytes']} "
                     f"own_args_bytes={lc.own_args_bytes(args)} sim_time_us={sim_time_us}"
                     + (" locks_used=1" if locks_used else ""))
    return "\n".join(lines) + "\n"


def tag_of(as_shipped: bool = False, mutant: str | None = None) -> str:
    """The rendering a run uses: a mutant's, the release's own ("upstream"), or the patch set's."""
    if mutant is not None and mutant not in MUTANTS:
        raise ValueError(f"unknown mutant {mutant!r}; valid: {', '.join(MUTANTS)}")
    return mutant or ("upstream" if as_shipped else "patched")


def run_samples(release: str, *, as_shipped: bool = False, queues: Sequence[str] = QUEUE_MODES,
                mutant: str | None = None, samples: Sequence[str] | None = None, timeout: float = 300) -> dict:
    """Every sample launcher of ``release`` (patched, or ``as_shipped``), in a child per ``TASK_QUEUE_ENABLE``
    value of ``queues``: the per-launch verdicts, in the fields ``--simulate`` gives."""
    tag = tag_of(as_shipped, mutant)
    return run_tags(release, {tag: tuple(queues)}, samples=samples, timeout=timeout)[tag]


def run_tags(release: str, plan: dict[str, Sequence[str]], *, samples: Sequence[str] | None = None,
             timeout: float = 300, built: Built | None = None, env_extra: dict | None = None) -> dict[str, dict]:
    """:func:`run_samples` for several renderings at once (``plan``: {"patched" | "upstream" | a mutant: queue
    values}): one child per queue value runs the launchers of every rendering that wants it, patched first and
    as shipped last (a fresh child takes over after a launcher that left torch_npu's runtime failed).
    ``built``: launchers already built for ``release`` (default: :func:`build`); ``env_extra``: the children's
    environment beyond the host runtime's."""
    built = built or build(release)
    wanted = list(samples) if samples is not None else [s.key for s in SAMPLES]
    tag_keys = {tag: [k for k in wanted if k in built.harness[tag]] for tag in plan}
    spec = {"so": str(built.shared_object), "host_library": HOST_LIBRARY, "launches": LAUNCHES, "mode": "samples",
            "binary": probe_binary(built)}
    outs = {tag: {"release": release, "as_shipped": tag == "upstream", "mutant": tag if tag in MUTANTS else None,
                  "launch_api": built.harness.get("launch_api"), "queues": list(qs), "runs": {},
                  "samples": []} for tag, qs in plan.items()}
    rows = {(tag, k): {"sample": k, "title": RUNTIME_SAMPLE_BY_KEY[k].title, "runs": {}}
            for tag in plan for k in tag_keys[tag]}
    for q in dict.fromkeys(q for qs in plan.values() for q in qs):
        tags = [t for t in ("patched", *MUTANTS, "upstream") if q in plan.get(t, ())]
        launchers = [ln for t in tags for ln in built.launchers if ln["tag"] == t and ln["sample"] in tag_keys[t]]
        for t in tags:
            for k in tag_keys[t]:
                rows[(t, k)]["runs"][q] = {"launches": [], "ok": False}
        pending, children = list(launchers), []
        while pending:
            res = run_child(release, dict(spec, launchers=pending), queue=q, timeout=timeout, env_extra=env_extra)
            children.append(res)
            for rec in res.get("launches", []):
                ln = next(x for x in launchers if x["key"] == rec["key"])
                rows[(ln["tag"], ln["sample"])]["runs"][q]["launches"].append(
                    judge_launch(expect_of(built, ln), ln, rec, q, res.get("caller_tid")))
            failure = child_failure(res)
            done = {rec["key"] for rec in res.get("launches", [])}
            if failure is not None:  # the launcher it was running fails with it; the rest get a fresh child
                current = next((ln for ln in pending if ln["key"] not in done), None)
                if current is None or not res.get("launches"):
                    for ln in pending:
                        rows[(ln["tag"], ln["sample"])]["runs"][q]["failure"] = failure
                    break
                rows[(current["tag"], current["sample"])]["runs"][q]["failure"] = failure
                done.add(current["key"])
            stop = res.get("stopped_after")
            pending = [ln for ln in pending if ln["key"] not in done] if (stop or failure) else []
        first = children[0]
        for t in tags:
            outs[t]["runs"][q] = {"torch": first.get("torch"), "torch_npu": first.get("torch_npu"),
                                  "import_s": first.get("import_s"), "processes": len(children),
                                  "patchset_imported": any(c.get("patchset_imported") for c in children),
                                  "failure": next((f for f in map(child_failure, children) if f), None)}
            for k in tag_keys[t]:
                run = rows[(t, k)]["runs"][q]
                run["ok"] = ("failure" not in run and len(run["launches"]) == LAUNCHES
                             and all(x["ok"] for x in run["launches"]))
    for tag, out in outs.items():
        for k in tag_keys[tag]:
            row = rows[(tag, k)]
            row["ok"] = all(r["ok"] for r in row["runs"].values())
            out["samples"].append(row)
        out["ok"] = bool(out["samples"]) and all(r["ok"] for r in out["samples"])
    return outs


# ---- scenarios ------------------------------------------------------------------------------------
#: The scenario kernel's run time on the host ACL library's stream (the queue thread runs ahead of it).
SCENARIO_KERNEL_US = 500


def scenario_spec(built: Built, name: str, tag: str, per_thread: int | None = None) -> dict:
    """The child's spec for scenario ``name`` with the launchers of rendering ``tag``."""
    if name not in SCENARIO_SETUPS:
        raise ValueError(f"unknown scenario {name!r}; valid: {', '.join(SCENARIOS)}")
    sc = SCENARIO_SETUPS[name]
    per_thread = sc.per_thread if per_thread is None else per_thread
    launchers = [ln for ln in built.launchers if ln["tag"] == tag and ln["sample"] == sc.sample]
    if not launchers:
        raise ValueError(f"scenario {name!r}: no {tag} launcher of sample {sc.sample!r} in the build")
    spec = {"so": str(built.shared_object), "host_library": HOST_LIBRARY, "launchers": launchers, "mode": sc.mode,
            "threads": sc.threads, "per_thread": per_thread, "empty_cache_every": sc.empty_cache_every,
            "empty_cache_thread": sc.empty_cache_thread, "operators": sc.operators, "devices": list(sc.devices),
            "pace_s": sc.pace_s,
            "binary": probe_binary(built, sim_time_us=SCENARIO_KERNEL_US, locks_used=True), "kernels": sc.threads * per_thread}
    if sc.oom:  # the host ACL library's device memory limited (batches)
        spec["oom_bytes"] = OOM_BYTES
    if sc.mode == "interleave":
        spec.update(rounds=sc.rounds, kernels=sc.rounds * 2)
    elif sc.mode == "empty-cache-window":
        spec.update(rounds=sc.rounds, grow=sc.grow, kernels=sc.rounds * 2)
    elif sc.mode == "queue-stops":
        spec.update(before_fault=FAULT_BEFORE, after_fault=FAULT_AFTER, kernels=FAULT_BEFORE,
                    launch_api=built.harness.get("launch_api") or "aclrtLaunchKernelWithHostArgs",
                    fault_code=FAULT_CODE)
    elif sc.mode == "eager-capture":
        spec.update(captured=EC_CAPTURED, replays=EC_REPLAYS, grow=sc.grow, kernels=2 + EC_CAPTURED * EC_REPLAYS)
    elif sc.mode == "capture":
        spec.update(captured=CAPTURED, replays=REPLAYS, grow_bytes=GROW_BYTES,
                    kernels=CAPTURE_EAGER + CAPTURED * REPLAYS)
    elif sc.mode == "graphs":
        spec.update(captured=CAPTURED, replays=REPLAYS, graphs=GRAPHS, kernels=GRAPHS * (1 + CAPTURED * REPLAYS))
    elif sc.mode == "global-capture":
        spec.update(captured=CAPTURED, replays=REPLAYS, eager_before=EAGER_BEFORE, eager_during=EAGER_DURING,
                    eager_after=EAGER_AFTER, kernels=EAGER_BEFORE + 1 + EAGER_DURING + EAGER_AFTER + CAPTURED * REPLAYS)
    elif sc.mode == "pressure":
        spec.update(variant=sc.variant, grow=sc.grow, device_bytes=PRESSURE_DEVICE_BYTES,
                    tensor_bytes=PRESSURE_TENSOR_BYTES,
                    kernels=per_thread + (sc.variant in ("replaced", "capture", "history")))  # + the 8 MiB one / replay
    elif sc.mode == "pluggable":
        spec.update(pluggable=str(pluggable_allocator()), kernels=0)
    elif sc.mode == "oom-fill":
        spec.update(rounds=OOM_ROUNDS, per_round=OOM_LAUNCHES, fill_bytes=list(FILL_BYTES),
                    kernels=OOM_ROUNDS * OOM_LAUNCHES)
    return spec


def run_scenario(release: str, name: str, *, as_shipped: bool = False, mutant: str | None = None,
                 per_thread: int | None = None, timeout: float = 300, built: Built | None = None) -> dict:
    """Scenario ``name`` of :data:`SCENARIOS` on torch_npu ``release``'s own runtime, a child per
    TASK_QUEUE_ENABLE value of the scenario; ``built``: :func:`build`'s result when the caller has it."""
    return run_scenarios(release, [name], as_shipped=as_shipped, mutant=mutant, per_thread=per_thread,
                         timeout=timeout, built=built)[name]


def batches(names: Sequence[str]) -> list[tuple[str, dict, list[str]]]:
    """(TASK_QUEUE_ENABLE value, the host ACL library's settings, scenarios) per child: the scenarios that
    share both run in one process, in turn (a child's start is most of a scenario's time); those that open
    the device-side window (another thread freeing memory) after the others."""
    out: dict = {}
    for name in sorted(names, key=lambda n: "frees" in SCENARIO_SETUPS[n].exercises):
        sc = SCENARIO_SETUPS[name]
        env = {"ACL_HOST_DEVICES": str(max(2, len(sc.devices)))}
        if sc.oom:
            env["ACL_HOST_DEVICE_GIB"] = str(OOM_DEVICE_GIB)
        if sc.alone:  # a child of its own
            env["NPU_PATCHSET_SCENARIO_ALONE"] = name
        for q in sc.queues:
            out.setdefault((q, tuple(sorted(env.items()))), []).append(name)
    return [(q, dict(env), group) for (q, env), group in out.items()]


def scenario_results(res: dict, names: Sequence[str]) -> list[dict]:
    """Each scenario's part of a batch child's result ``res``; one it did not finish (the child stopped by its
    watchdog, or failed) carries the child's failure."""
    parts = res.get("scenarios") or []
    out = []
    for i, name in enumerate(names):
        part = dict(parts[i]) if i < len(parts) else {"scenario": name, "steps": [], "done": False}
        if not part.get("done"):
            for key in ("timed_out", "error", "exit_code", "stderr_tail", "stacks"):
                if key in res:
                    part[key] = res[key]
            if not part["steps"]:
                part["steps"] = list(res.get("steps") or [])
        part.setdefault("torch_npu", res.get("torch_npu"))
        out.append(part)
    return out


def run_scenarios(release: str, names: Sequence[str], *, as_shipped: bool = False, mutant: str | None = None,
                  per_thread: int | None = None, timeout: float = 300, built: Built | None = None) -> dict[str, dict]:
    """Scenarios ``names`` on torch_npu ``release``'s own runtime, batched into as few children as
    :func:`batches` allows: {name: verdict over its TASK_QUEUE_ENABLE values}."""
    built = built or build(release)
    tag = tag_of(as_shipped, mutant)
    specs = {n: dict(scenario_spec(built, n, tag, per_thread), name=n) for n in names}
    expect = {n: expect_of(built, specs[n]["launchers"][0]) for n in names}
    larger = {n: expect_of(built, specs[n]["launchers"][0], SCENARIO_SETUPS[n].grow) for n in names
              if SCENARIO_SETUPS[n].grow}
    runs: dict[str, dict] = {n: {} for n in names}
    for q, env, group in batches(names):
        launchers = list({ln["key"]: ln for n in group for ln in specs[n]["launchers"]}.values())  # their cubins
        spec = {"so": str(built.shared_object), "host_library": HOST_LIBRARY, "mode": "batch",
                "launchers": launchers, "binary": specs[group[0]]["binary"], "scenarios": [specs[n] for n in group]}
        res = run_child(release, spec, queue=q, timeout=timeout, env_extra=env)
        for n, part in zip(group, scenario_results(res, group)):
            runs[n][q] = judge_scenario(expect[n], specs[n], part, queue=q, exercises=SCENARIO_SETUPS[n].exercises,
                                        larger=larger.get(n))
    return {n: combine_runs({q: runs[n][q] for q in SCENARIO_SETUPS[n].queues}, scenario=n, release=release,
                            as_shipped=as_shipped, mutant=mutant, what=SCENARIOS[n]) for n in names}


#: pluggable-allocator-no-memory's allocator (torch_npu's NPUPluggableAllocator signatures): device memory from the
#: host ACL library for requests below 1 MiB, none (and no error) from 1 MiB on.
_PLUGGABLE_SOURCE = r"""
#include <dlfcn.h>
#include <stddef.h>
static void *acl(const char *name) { return dlsym(dlopen("libascendcl.so", RTLD_LAZY | RTLD_NOLOAD), name); }
void *npu_patchset_pluggable_malloc(size_t size, int device, void *stream) {
  void *p = NULL;
  (void)device, (void)stream;
  if (size >= (1u << 20)) return NULL;
  return ((int (*)(void **, size_t, int))acl("aclrtMalloc"))(&p, size ? size : 1, 0) == 0 ? p : NULL;
}
void npu_patchset_pluggable_free(void *ptr, size_t size, int device, void *stream) {
  (void)size, (void)device, (void)stream;
  if (ptr != NULL) ((int (*)(void *))acl("aclrtFree"))(ptr);
}
"""


def pluggable_allocator() -> Path:
    """The shared object of :data:`_PLUGGABLE_SOURCE`, built once into the build cache."""
    key = hashlib.sha256(_PLUGGABLE_SOURCE.encode()).hexdigest()[:12]
    out = ra.build_cache() / f"pluggable-allocator-{key}.so"
    if not out.exists():
        src = out.with_suffix(".c")
        src.parent.mkdir(parents=True, exist_ok=True)
        src.write_text(_PLUGGABLE_SOURCE)
        tmp = out.with_name(f".{out.name}.{os.getpid()}")
        subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(tmp), str(src), "-ldl"], check=True,
                       capture_output=True, text=True)
        os.replace(tmp, out)
    return out


def expect_of(built: Built, ln: dict, grow: int = 1) -> tuple:
    """What launcher ``ln`` of ``built`` needs (``real_runtime_judge.expectations``); ``grow``: called with a grid that
    many times larger (its numel x ``grow``)."""
    plan, site, _args, grid = rendered.sample_setup(built.harness, RUNTIME_SAMPLE_BY_KEY[ln["sample"]], ln["tag"])
    return expectations(plan, site, (grid[0] * grow, *grid[1:]))
