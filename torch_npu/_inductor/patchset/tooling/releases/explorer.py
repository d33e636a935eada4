"""The schedule explorer (issue 53, points 1 and 2): the patch set's launch memory against torch_npu's own operators'
rule, over schedules generated from a seed, on a released torch_npu's own runtime over the host ACL library.

The promise of the launch memory is two-sided: a launch never uses memory after it was freed, and a job that fits
without the patch set fits with it. A list of scenarios keeps missing the next schedule; this module checks the patch
set against a *reference* over many schedules instead.

**The reference launcher** (:data:`REFERENCE_CLASS`, the rendering tagged ``reference``) takes a launch's workspace and
locks exactly as torch_npu's own operators take their workspace: op-plugin's ``EXEC_NPU_CMD_V1`` asks
``at_npu::native::OpPreparation::unsafe_empty_workspace(workspace_size)`` for a byte tensor of torch_npu's caching
allocator (``NPUCachingAllocator::get()->allocate(size)``: the calling thread's current stream), passes its address to
the lambda it queues with ``OpCommand::RunOpApiV2``, and drops the tensor as the macro's scope ends, once the lambda is
queued: the block is free in the allocator's cache for that stream while the lambda may still wait in the queue.
torch's own ``WorkspaceArg`` does the same for a compiled graph. Users accept that rule; it is the bar.

**The schedule model** (:func:`schedule`: a seed in, plain data out, printed by :func:`describe`). A seed's family
(``seed % 5``: ``pending``, ``capture``, ``window``, ``interleave``, ``threads``) sets which ingredients its steps lean
on (operation weights, sizes, the device's memory) and its TASK_QUEUE_ENABLE value (the values a family can use, in
turn: lambdas pending need the queue on, torch_npu refuses a capture at level 2, a launch stopped inside its lambda
needs the queue off), so that 15 consecutive seeds hold every family with every value it can use. A schedule has a
``TASK_QUEUE_ENABLE`` value (0, 1 or 2), a device of ``device_mib`` MiB (the host ACL library's
``acl_host_set_device_memory``, on top of what is in use when the schedule starts), 1 to 3 threads ``T0..T2`` (each a
Python thread, started at its first step) and 1 or 2 streams (``S0``, the default stream, and ``S1``, a stream of the
schedule's own), and a list of steps, each run by its thread with that stream current:

* ``launch``: the launcher under test with 2 to 32 MiB of workspace (the ``threads`` sample, 1 MiB per program, its
  grid changed), or the ``locks`` kernel (the ``both`` sample: 4 lock slots of init 1 and a little workspace); with
  ``park`` (TASK_QUEUE_ENABLE=0) the launch stops at its ACL launch call, its lock fills made, until ``resume``;
* ``alloc`` / ``free``: a user tensor of 8 to 48 MiB from torch_npu's caching allocator on the thread's stream (a hit,
  a miss, or one that needs the allocator's out-of-memory retry), and its release;
* ``sync`` (``torch.npu.synchronize()``), ``empty_cache`` (``torch.npu.empty_cache()`` as the patch set makes it: the
  build's ``npu_patchset_real_runtime_empty_cache``, which hands the kept launch memory back first where the patch set
  does, a mutant of the helper its own; with ``park`` it stops as its device synchronisation returns, before it frees
  anything, every stream held meanwhile, until ``resume``: the window of torch_npu's allocator);
* ``end``: the thread ends (its kept blocks retire);
* ``gate``: torch_npu's task queue held (a task of the tier's own waits in it: the launches' lambdas stay queued) or
  let go; ``hold`` / ``release``: a stream held (a kernel of the host ACL library waits on it: later kernels pending);
* ``capture``: ``torch.npu.graph`` on ``S1`` (after an eager warm-up launch of the same thread there, as
  ``torch.npu.graph`` wants) capturing 1 or 2 launches; ``replay`` replays a graph.

Execution (``explorer_child.py``): one child per (variant, TASK_QUEUE_ENABLE value) runs its schedules in turn, a clean
state restored between them. A coordinator hands each step to its thread and waits for it, so the order of host calls
is the schedule's; concurrency comes only from the gate and the stream holds. A step that synchronises the device
(``sync``, ``empty_cache``, ``capture``, ``replay``) lets the gate and the holds go first, as the synchronisation waits
for them. Inside a launch or an allocation the host ACL library's pause points tell the coordinator where the thread
is: a device allocation that failed (torch_npu's out-of-memory retry follows, which drains the queue and synchronises
the device) and a wait for an event or a stream let the gate and the holds go. With the gate open the coordinator
drains the queue after each step (a gate closed and opened), so every lambda queued so far has run, and waits until
the streams not held are idle: what is still pending at a step is decided by the gate and the holds alone, never by
how fast the host went.

**The oracles** (:func:`verdict`, pure: the two runs' records in). Every schedule runs twice, with the patch set's
launch memory and with the reference's:

* *memory*: every allocation, the user's tensors and the launches' own, that succeeds with the reference succeeds with
  the patch set (compared step by step; the first refusal is the cause, later ones may follow from it);
* *safety*: no launch of the patch set touches freed memory (or gets memory another kernel uses, or the wrong lock
  content: the probe kernel's verdict, ``sim.harness.kernel_problems``, and the host ACL library's reports) where the
  reference's does not. Compared launch by launch (the n-th kernel of a given kernel, grid, stream and replay in
  both runs; the host library's reports by count): where the reference's launches are all clean this is "in a
  schedule where the reference's launches do not"; where they are not (torch_npu's own windows), a launch of the
  patch set that is unsafe where the reference's same launch is safe still fails. Where the reference's launches
  touch memory they must not and the patch set's same launches do not (an ``empty_cache`` paused between its device
  synchronisation and its lock while another thread launches), the verdict says the patch set is *safer*.

A run that did not finish (a thread error, a step the coordinator had to force, torch_npu's queue stopped) is an
*error* for that schedule, not a verdict. :func:`summary_text` gives "N schedules explored; memory held in a/N; safety
held in b/N; patch set safer in c", where the patch set's launches touched memory they must not at all (the reference's
too there, or the oracle would have failed), and every failing seed with its schedule. :func:`caught` says where a
mutant fails an oracle on a schedule the patch set holds.

Which mutants of :mod:`mutant_helpers` the oracles can catch, and why not the others: ``release-once-queued`` is the
reference's own rule (never caught, by construction); ``given-back-without-a-use`` frees a block under its kernel only
in torch_npu's own empty_cache window, where the reference's block of the same launch is free in the cache as well,
so only rare orders (a tensor taking the reference's freed block first) tell them apart;
``capture-error-read-as-capturing`` and ``no-memory-taken-as-memory`` need CANN's capture status to fail and an
allocator that answers no memory, which no schedule has. The others break the memory oracle (blocks that never go
back, or not at the cache miss) or the safety one (a replaced block back at once, one block for every thread).

**Replay a seed**: ``python -m torch_npu._inductor.patchset.tooling.releases.explorer --release 2.7.1.post10 --seeds
17:18`` (``--schedule`` prints the schedule only, no runtime; ``--json`` the report as data). A mutant of the patch
set in its place: ``--mutant given-back-without-a-use``. The CI-sized run is the default, ``--seeds 0:30``
(:data:`CI_SEEDS`; ``test/test_explorer.py``); a longer one ``--long`` (0:300). Exit status 0 when every schedule held
both oracles. A schedule runs in a child with the schedules before it in its group; the state between them is
restored (threads ended, the device synchronised, every kept block handed back at a cache miss, the cache emptied,
the host library reset), but a mutant that keeps memory for ever (``shared-by-threads``) carries it over.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Iterable, Sequence

# ---------------------------------------------------------------------------------------------------
# 1. the schedule model (pure)
# ---------------------------------------------------------------------------------------------------
#: Each seed's family (seed % 5) picks which ingredients its schedule leans on; every family mixes in the others.
FAMILIES = ("pending", "capture", "window", "interleave", "threads")
#: TASK_QUEUE_ENABLE of a seed: QUEUES[(seed // 5) % 3] (a family's own values in turn where it has them), so 15
#: consecutive seeds cover every family with every queue value it can use.
QUEUES = ("1", "0", "2")
LAUNCH_MIB = (2, 4, 8, 16, 24, 32)
ALLOC_MIB = (8, 16, 24, 32, 40, 48)
DEVICE_MIB = (48, 64, 96)
#: The CI-sized exploration, and a longer one.
CI_SEEDS = range(0, 30)
LONG_SEEDS = range(0, 300)
#: The kernels a launch step uses: the sample each is rendered from.
KERNEL_SAMPLES = {"ws": "threads", "locks": "both"}
#: Operations that synchronise the device: the gate and the holds go before them.
SYNCING = ("sync", "empty_cache", "capture", "replay")

_WEIGHTS = {
    "pending": {"launch": 4, "alloc": 4, "free": 1, "gate": 2, "sync": 0.5, "empty_cache": 0.5, "hold": 1, "end": 0.5},
    "capture": {"launch": 3, "alloc": 2, "free": 1, "capture": 3, "replay": 2, "empty_cache": 1, "gate": 1,
                "sync": 0.5, "end": 0.5},
    "window": {"launch": 4, "alloc": 2, "free": 1, "window": 3, "hold": 1, "gate": 1, "end": 1, "empty_cache": 0.5},
    "interleave": {"launch": 5, "park": 3, "alloc": 1, "free": 1, "gate": 1, "end": 1, "hold": 1},
    "threads": {"launch": 4, "alloc": 2, "free": 1, "end": 2, "empty_cache": 2, "sync": 1, "gate": 2, "hold": 1},
}
#: The TASK_QUEUE_ENABLE values a family takes in turn (the others: all of QUEUES): lambdas pending need the queue on,
#: torch_npu refuses a capture at level 2, a launch stopped at its ACL launch call with its lambda needs it off.
_FAMILY_QUEUES = {"pending": ("1", "2"), "capture": ("1", "0"), "interleave": ("0",)}
#: What a family must contain at least once (where its queue value allows it).
_REQUIRED = {"capture": "capture", "window": "window", "interleave": "park"}


class _Gen:
    """A schedule under construction: the steps so far and the state they leave (which threads run, which one is
    parked, whether the gate is held, which streams are held, the user's tensors, the graphs)."""

    def __init__(self, rng: random.Random, queue: str, threads: int, streams: int, large: bool = False):
        self.rng, self.queue, self.streams = rng, queue, streams
        # sizes drawn from the larger half (the device's memory under pressure) or from all
        self.locks_share = 0.25  # launches of the locks kernel (the interleave family: threads running one graph)
        self.launch_mib = LAUNCH_MIB[len(LAUNCH_MIB) // 2 - 1:] if large else LAUNCH_MIB
        self.alloc_mib = ALLOC_MIB[len(ALLOC_MIB) // 2 - 1:] if large else ALLOC_MIB
        self.threads = list(range(threads))
        self.ended: set = set()
        self.parked: tuple | None = None  # (op, thread)
        self.gate = False
        self.holds: set = set()
        self.tensors: dict = {}  # name -> thread
        self.graphs: list = []
        self.launched: set = set()  # (thread, stream)
        self.steps: list = []
        self.count: dict = {}
        self.tensor_no = 0
        self.since_park = 0  # launches, allocations and frees since the thread parked
        self.window_launches: list = []  # (stream, MiB) of the launches made while an empty_cache is parked
        self.worked: set = set()  # threads that launched or allocated

    # -- state ---------------------------------------------------------------------------------------------
    def free_threads(self) -> list:
        return [t for t in self.threads if t not in self.ended and not (self.parked and self.parked[1] == t)]

    def emit(self, step: dict) -> None:
        self.steps.append(step)
        op = step["op"]
        self.count[op if not step.get("park") else ("window" if op == "empty_cache" else "park")] = \
            self.count.get(op, 0) + 1
        if op in SYNCING:
            self.gate = False
            self.holds = set() if not (op == "empty_cache" and step.get("park")) else self.holds
        if op == "launch":
            self.launched.add((step["t"], step["s"]))
        if op in ("launch", "alloc"):
            self.worked.add(step["t"])
        if op in ("launch", "alloc", "free") and self.parked and not step.get("park"):
            self.since_park += 1
        if op == "launch" and "mib" in step and self.parked and self.parked[0] == "empty_cache":
            self.window_launches.append((step["s"], step["mib"]))
            self.window_last = (step["t"], step["s"])

    def _launch_step(self, t: int, s: int, park: bool = False) -> dict:
        kernel = "locks" if self.rng.random() < (0.5 if park else self.locks_share) else "ws"
        step = {"op": "launch", "t": t, "s": s, "k": kernel}
        if kernel == "ws":
            step["mib"] = self.rng.choice(self.launch_mib)
        if park:
            step["park"] = True
        return step

    # -- operations: each returns False where it cannot apply now --------------------------------------------
    def op(self, name: str) -> bool:
        return getattr(self, f"_op_{name}")()

    def _thread(self) -> int | None:
        free = self.free_threads()
        return self.rng.choice(free) if free else None

    def _op_launch(self) -> bool:
        t = self._thread()
        if t is None:
            return False
        s = self.rng.randrange(self.streams)
        if self.parked and self.parked[0] == "launch" and self.rng.random() < 0.6:  # beside the stopped launch
            s = self.parked_stream
        if self.parked and self.parked[0] == "empty_cache" and self.window_launches and self.rng.random() < 0.6:
            # in the window: the thread that launched there goes on (a graph's next kernel), on its stream
            t, s = self.window_last
        self.emit(self._launch_step(t, s))
        return True

    def _op_park(self) -> bool:  # a launch stopped at its ACL launch call: the lambda runs on the caller (queue off)
        t = self._thread()
        if self.queue != "0" or self.parked or t is None:
            return False
        s = self.rng.randrange(self.streams)
        self.emit(self._launch_step(t, s, park=True))
        self.parked, self.since_park, self.parked_stream = ("launch", t), 0, s
        return True

    def _op_alloc(self) -> bool:
        t = self._thread()
        if t is None:
            return False
        name = f"u{self.tensor_no}"
        self.tensor_no += 1
        self.tensors[name] = t
        s, mib = self.rng.randrange(self.streams), self.rng.choice(self.alloc_mib)
        if self.parked and self.parked[0] == "empty_cache" and self.window_launches and self.rng.random() < 0.6:
            # in the window: a tensor the size of a launch made there, on its stream (what the cache then holds)
            s, mib = self.rng.choice(self.window_launches)
        self.emit({"op": "alloc", "t": t, "s": s, "mib": mib, "name": name})
        return True

    def _op_free(self) -> bool:
        free = self.free_threads()
        if not self.tensors or not free:
            return False
        name = self.rng.choice(sorted(self.tensors))
        owner = self.tensors.pop(name)
        self.emit({"op": "free", "t": owner if owner in free else self.rng.choice(free), "name": name})
        return True

    def _on_a_thread(self, op: str) -> bool:
        """A step with no argument but the thread that takes it (none while a launch is parked)."""
        t = self._thread()
        if t is None or self.parked:
            return False
        self.emit({"op": op, "t": t})
        return True

    def _op_sync(self) -> bool:
        return self._on_a_thread("sync")

    def _op_empty_cache(self) -> bool:
        return self._on_a_thread("empty_cache")

    def _op_window(self) -> bool:
        """torch_npu's emptyCache stopped between its device synchronisation and its lock, every stream held (what
        is launched meanwhile stays pending), until a later ``resume``."""
        t = self._thread()
        if t is None or self.parked or len(self.free_threads()) < 2:
            return False
        self.emit({"op": "empty_cache", "t": t, "park": True})
        self.parked, self.since_park, self.window_launches = ("empty_cache", t), 0, []
        for s in range(self.streams):
            self.emit({"op": "hold", "s": s})
            self.holds.add(s)
        return True

    def _op_resume(self) -> bool:
        if not self.parked:
            return False
        self.emit({"op": "resume", "t": self.parked[1]})
        was = self.parked[0]
        self.parked = None
        if was == "empty_cache":  # the stream holds go once the emptyCache is done (or it let them go itself)
            for s in sorted(self.holds):
                self.emit({"op": "release", "s": s})
            self.holds = set()
        return True

    def _op_end(self) -> bool:
        free = [t for t in self.free_threads() if t in self.worked]  # a thread that did something ends
        alive = [t for t in self.threads if t not in self.ended]
        if not free or len(alive) < 2:
            return False
        t = self.rng.choice(free)
        self.ended.add(t)
        self.emit({"op": "end", "t": t})
        return True

    def _op_gate(self) -> bool:
        if self.queue == "0":
            return False
        self.gate = not self.gate
        self.emit({"op": "gate", "hold": self.gate})
        return True

    def _op_hold(self) -> bool:
        s = self.rng.randrange(self.streams)
        if s in self.holds:
            self.holds.discard(s)
            self.emit({"op": "release", "s": s})
        else:
            self.holds.add(s)
            self.emit({"op": "hold", "s": s})
        return True

    def _op_capture(self) -> bool:
        t = self._thread()
        # (torch_npu refuses a graph capture with TASK_QUEUE_ENABLE=2)
        if t is None or self.parked or self.streams < 2 or len(self.graphs) >= 2 or self.queue == "2":
            return False
        if (t, 1) not in self.launched:  # torch.npu.graph after an eager warm-up of the thread on the stream
            self.emit(self._launch_step(t, 1))
        name = f"g{len(self.graphs)}"
        launches = [{k: v for k, v in self._launch_step(t, 1).items() if k in ("k", "mib")}
                    for _ in range(self.rng.choice((1, 1, 2)))]
        self.graphs.append(name)
        self.emit({"op": "capture", "t": t, "s": 1, "graph": name, "launches": launches})
        return True

    def _op_replay(self) -> bool:
        t = self._thread()
        if t is None or self.parked or not self.graphs:
            return False
        self.emit({"op": "replay", "t": t, "graph": self.rng.choice(self.graphs)})
        return True


def schedule(seed: int) -> dict:
    """The schedule of ``seed``: plain data (json-able), the same on every machine and Python (``random.Random``
    seeded with a string)."""
    rng = random.Random(f"npu-launch-memory-explorer/{seed}")
    family = FAMILIES[seed % len(FAMILIES)]
    queue = _FAMILY_QUEUES.get(family, QUEUES)[(seed // len(FAMILIES)) % len(_FAMILY_QUEUES.get(family, QUEUES))]
    threads = {"pending": rng.choice((1, 2, 2)), "capture": rng.choice((1, 2)), "window": rng.choice((2, 3)),
               "interleave": rng.choice((2, 3)), "threads": 3}[family]
    streams = 2 if family == "capture" else rng.choice((1, 2))
    # the device under pressure: the smaller sizes for the families that are about memory
    device_mib = rng.choice({"pending": (48, 64), "capture": (48, 48, 64)}.get(family, DEVICE_MIB)
                            if rng.random() < 0.85 else DEVICE_MIB)
    gen = _Gen(rng, queue, threads, streams, large=family in ("pending", "capture"))
    if family == "interleave":
        gen.locks_share = 0.6
    weights = dict(_WEIGHTS[family])
    length = rng.randint(6, 11)
    required = _REQUIRED.get(family)
    if (required == "park" and queue != "0") or (required == "capture" and queue == "2"):
        required = None
    force_at = rng.randrange(max(1, length - 2)) if required else -1
    caps = {"window": 2, "park": 2, "capture": 2}
    if family == "pending" and queue != "0" and rng.random() < 0.8:  # a busy device: lambdas wait in the queue
        gen.op("gate")
    for i in range(length):
        if gen.parked and gen.since_park >= 1 and rng.random() < (0.4 if gen.parked[0] == "launch" else 0.25):
            gen.op("resume")
            continue
        if i == force_at and not gen.count.get(required) and gen.op(required):
            continue
        w = {n: (0 if gen.count.get(n, 0) >= caps.get(n, 99) else x) for n, x in weights.items()}
        if gen.parked:  # the window is for what others do meanwhile: launches, and tensors taking what they freed
            w.update(launch=w.get("launch", 0) * 3, window=0, park=0)
            if gen.parked[0] == "empty_cache":
                w.update(alloc=w.get("alloc", 0) * 3)
        names = [n for n in w if w[n] > 0]
        for _ in range(8):  # an operation that applies now
            name = rng.choices(names, weights=[w[n] for n in names])[0]
            if gen.op(name):
                break
    if required and not gen.count.get(required):
        if gen.parked:
            gen.op("resume")
        gen.op(required)
    return {"seed": seed, "family": family, "queue": queue, "device_mib": device_mib, "threads": threads,
            "streams": streams, "steps": gen.steps}


def step_text(step: dict) -> str:
    """One step in words: ``T1@S0 launch ws 32 MiB``."""
    op = step["op"]
    who = f"T{step['t']}" if "t" in step else "--"
    at = f"{who}@S{step['s']}" if "s" in step and "t" in step else who
    if op == "launch":
        what = f"launch {step['k']}" + (f" {step['mib']} MiB" if "mib" in step else "")
        return f"{at} {what}" + (" (parked at its ACL launch call)" if step.get("park") else "")
    if op == "alloc":
        return f"{at} alloc {step['name']} {step['mib']} MiB"
    if op == "free":
        return f"{who} free {step['name']}"
    if op == "empty_cache":
        return f"{who} empty_cache" + (" (parked after its device synchronisation)" if step.get("park") else "")
    if op == "gate":
        return "-- gate " + ("held (lambdas stay queued)" if step["hold"] else "let go")
    if op in ("hold", "release"):
        return f"-- {op} S{step['s']}"
    if op == "capture":
        inner = ", ".join(f"{x['k']}" + (f" {x['mib']} MiB" if "mib" in x else "") for x in step["launches"])
        return f"{at} capture {step['graph']} [{inner}]"
    if op == "replay":
        return f"{who} replay {step['graph']}"
    return f"{who} {op}"


def describe(sch: dict) -> str:
    """A schedule, printable: its header, then one numbered line per step."""
    head = (f"seed {sch['seed']} ({sch['family']}): TASK_QUEUE_ENABLE={sch['queue']}, device {sch['device_mib']} MiB, "
            f"{sch['threads']} thread(s), {sch['streams']} stream(s)")
    return "\n".join([head] + [f"  {i:2d}. {step_text(s)}" for i, s in enumerate(sch["steps"])])


def parse_seeds(text: str) -> list[int]:
    """"A:B" (B excluded), "A" or "A,B,C"."""
    if ":" in text:
        a, b = text.split(":", 1)
        return list(range(int(a), int(b)))
    return [int(x) for x in text.split(",") if x.strip()]


def ingredients(sch: dict) -> set[str]:
    """What a schedule exercises (for coverage): threads, streams, queue value, operations."""
    out = {f"queue-{sch['queue']}", f"threads-{sch['threads']}", f"streams-{sch['streams']}"}
    for st in sch["steps"]:
        out.add(st["op"] + ("-park" if st.get("park") else ""))
        if st["op"] == "gate" and st["hold"]:
            out.add("gate-held")
    sizes = {st["mib"] for st in sch["steps"] if st["op"] == "launch" and "mib" in st}
    if len(sizes) > 1:
        out.add("launch-sizes-change")
    return out


# ---------------------------------------------------------------------------------------------------
# 2. the oracles (pure: the two runs' records in, the verdict out)
# ---------------------------------------------------------------------------------------------------
#: The host ACL library's reports that say a kernel got memory it must not touch (the safety oracle). The others
#: (a capture invalidated, a self-wait) are reported as notes.
SAFETY_KINDS = ("use-after-free", "out-of-bounds", "uninitialised-read", "region-overlap-in-kernel",
                "overlap-with-running-kernel", "locks-changed-while-running", "region-overrun", "bad-arguments",
                "cross-device")


def allocations(run: dict) -> list[dict]:
    """Every allocation of a run (a child's schedule result), in schedule order: ``key`` (the step, and the launch
    inside a capture), ``what``, ``ok``, ``error``. A user's tensor or a launch's own memory; a launch that threw is a
    refused allocation (its text says why)."""
    out = []
    for st in run.get("steps", []):
        step = st.get("step") or {}
        i, op = st.get("i"), step.get("op")
        if op in ("launch", "alloc"):
            outcome = st.get("outcome")
            if outcome in ("ok", "refused", "threw"):
                out.append({"key": f"{i}", "what": f"step {i}: {step_text(step)}", "ok": outcome == "ok",
                            "error": st.get("error", ""), "kind": st.get("alloc")})
        elif op == "capture":
            for j, ln in enumerate(st.get("launches") or []):
                if ln.get("outcome") in ("ok", "refused", "threw"):
                    x = step["launches"][j]
                    out.append({"key": f"{i}.{j}", "ok": ln["outcome"] == "ok", "error": ln.get("error", ""),
                                "what": f"step {i}: {step_text(step)}: captured launch {j} ({x['k']}"
                                        + (f" {x['mib']} MiB)" if "mib" in x else ")"), "kind": None})
    return out


def verdict(patch: dict, ref: dict) -> dict:
    """One schedule's verdict from the patch set's run and the reference's (each :func:`run_view`'s record):

    * ``memory``: "held", or "failed" with ``memory_failures`` (allocations that succeeded with the reference and were
      refused with the patch set); ``memory_better``: the other way round;
    * ``safety``: "held", or "failed" (the patch set's kernels got memory they must not touch, the reference's did
      not) with ``safety_failures``; ``safer``: the reference's kernels did and the patch set's did not;
    * either is "error" when a run did not finish (``errors``)."""
    seed = patch.get("seed", ref.get("seed"))
    errors = [f"{who}: {e}" for who, run in (("patch set", patch), ("reference", ref)) for e in run.get("errors", [])]
    out = {"seed": seed, "errors": errors, "memory": "error" if errors else "held", "safety": "error" if errors else "held",
           "memory_failures": [], "memory_better": [], "safety_failures": [], "safer": False, "notes": [],
           "unsafe": bool(unsafe(patch)) and not errors, "reference_unsafe": bool(unsafe(ref)) and not errors}
    theirs = {a["key"]: a for a in allocations(ref)}
    for a in allocations(patch):
        b = theirs.get(a["key"])
        if b is None:
            continue
        if b["ok"] and not a["ok"]:
            out["memory_failures"].append(f"{a['what']}: refused with the patch set ({_short(a['error'])}), "
                                          f"fits with the reference")
        elif a["ok"] and not b["ok"]:
            out["memory_better"].append(f"{a['what']}: fits with the patch set, refused with the reference")
    if out["memory_failures"] and not errors:
        out["memory"] = "failed"
    worse, better = _compare_kernels(patch, ref)
    if worse and not errors:
        out["safety"] = "failed"
        out["safety_failures"] = worse[:6]
    if better and not worse and not errors:
        out["safer"] = True
        out["notes"].append("the patch set is safer here: the reference's launches touched memory they must not, the "
                            "patch set's did not (" + "; ".join(better[:2]) + ")")
    mine, bar = unsafe(patch), unsafe(ref)
    if bar and mine and not worse:
        out["notes"].append("both touched memory they must not (the reference does not meet its own bar here): "
                            + "; ".join(bar[:2]))
    for who, run in (("patch set", patch), ("reference", ref)):
        if run.get("other_errors"):
            out["notes"].append(f"{who}: host ACL library reports " +
                                ", ".join(f"{k} x{n}" for k, n in sorted(run["other_errors"].items())))
    return out


def _compare_kernels(patch: dict, ref: dict) -> tuple[list[str], list[str]]:
    """Launch by launch (a kernel is the same launch in both runs when its kernel, grid, stream and replay match, the
    n-th of those): what the patch set's kernels got that they must not where the reference's same kernel did not
    (``worse``), and the other way round (``better``); the host ACL library's reports of those kinds by count."""
    def bad(run: dict) -> dict:
        return {k["key"]: k for k in run.get("kernels", []) if k.get("problems")}

    mine, theirs = bad(patch), bad(ref)
    worse = [f"{k['what']}: {'; '.join(k['problems'][:2])}" for key, k in mine.items() if key not in theirs]
    better = [f"{k['what']}: {'; '.join(k['problems'][:2])}" for key, k in theirs.items() if key not in mine]
    pm, rm = patch.get("memory_errors") or {}, ref.get("memory_errors") or {}
    worse += [f"host ACL library: {kind} x{n} (x{rm.get(kind, 0)} with the reference)" for kind, n in sorted(pm.items())
              if n > rm.get(kind, 0)]
    better += [f"host ACL library: {kind} x{n} (x{pm.get(kind, 0)} with the patch set)" for kind, n in sorted(rm.items())
               if n > pm.get(kind, 0)]
    return worse, better


def unsafe(run: dict) -> list[str]:
    """What a run's kernels got that they must not touch: each kernel's problems, then the host ACL library's
    reports of those kinds (one line each)."""
    out = [f"{k['what']}: {'; '.join(k['problems'][:2])}" for k in run.get("kernels", []) if k.get("problems")]
    out += [f"host ACL library: {kind} x{n}" for kind, n in sorted((run.get("memory_errors") or {}).items())]
    return out


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _short(text: str, n: int = 240) -> str:
    return " ".join(str(text).split())[:n]


def run_view(raw: dict, judge_kernel) -> dict:
    """The child's record of one schedule in the fields :func:`verdict` reads: ``steps`` as they ran, ``kernels``
    (each probe record, what it was and its problems by ``judge_kernel(record) -> list[str]``), the host ACL
    library's reports split into ``memory_errors`` (:data:`SAFETY_KINDS`) and ``other_errors``, and ``errors``: why
    the run is no verdict (it did not finish, a thread failed, a step had to be forced, torch_npu's queue stopped)."""
    kernels, seen = [], {}
    streams = [int(h) for h in raw.get("streams") or []]
    for rec in sorted(raw.get("probe_records") or [], key=lambda r: r.get("launch_id", 0)):
        stream = streams.index(int(rec["stream"])) if int(rec.get("stream", -1)) in streams else -1
        replayed = bool(rec.get("captured_launch_id"))
        base = (rec.get("name"), (rec.get("grid") or [None])[0], stream, replayed)
        seen[base] = seen.get(base, 0) + 1
        what = (f"{'replayed ' if replayed else ''}kernel {rec.get('name')} (grid {base[1]}, "
                f"S{stream if stream >= 0 else '?'}, "
                f"{_ordinal(seen[base])} of these)")
        kernels.append({"key": "/".join(map(str, base + (seen[base],))), "what": what, "problems": judge_kernel(rec)})
    mem, other = {}, {}
    for e in raw.get("host_errors") or []:
        (mem if e["kind"] in SAFETY_KINDS else other)[e["kind"]] = (mem if e["kind"] in SAFETY_KINDS else other).get(
            e["kind"], 0) + 1
    errors = list(raw.get("anomalies") or [])
    if not raw.get("done"):
        errors.append(f"the schedule did not finish: {raw.get('failure') or 'the child stopped'}")
    return {"seed": raw.get("seed"), "steps": raw.get("steps") or [], "kernels": kernels, "memory_errors": mem,
            "other_errors": other, "errors": errors, "leftover_bytes": raw.get("leftover_bytes")}


def summarize(verdicts: Sequence[dict], label: str = "patch set") -> dict:
    """The counts over schedules: explored, memory held, safety held, safer, errors; the failing seeds."""
    n = len(verdicts)
    return {"label": label, "explored": n,
            "memory_held": sum(v["memory"] == "held" for v in verdicts),
            "safety_held": sum(v["safety"] == "held" for v in verdicts),
            "safer": sum(bool(v["safer"]) for v in verdicts),
            "errors": sum(bool(v["errors"]) for v in verdicts),
            "unsafe": sum(bool(v.get("unsafe")) for v in verdicts),
            "unsafe_with_the_reference_too": sum(bool(v.get("unsafe") and v.get("reference_unsafe")) for v in verdicts),
            "unsafe_seeds": [v["seed"] for v in verdicts if v.get("unsafe")],
            "memory_failed_seeds": [v["seed"] for v in verdicts if v["memory"] == "failed"],
            "safety_failed_seeds": [v["seed"] for v in verdicts if v["safety"] == "failed"],
            "safer_seeds": [v["seed"] for v in verdicts if v["safer"]],
            "error_seeds": [v["seed"] for v in verdicts if v["errors"]]}


def summary_line(s: dict) -> str:
    n = s["explored"]
    line = (f"{n} schedules explored; memory held in {s['memory_held']}/{n}; safety held in {s['safety_held']}/{n}; "
            f"{s['label']} safer in {s['safer']}")
    if s.get("unsafe"):  # the absolute count beside the oracle, which is relative to the reference
        line += (f" (its launches touched memory they must not in {s['unsafe']}, the reference's too in "
                 f"{s['unsafe_with_the_reference_too']} of them)")
    return line + (f"; {s['errors']} did not finish" if s["errors"] else "")


def summary_text(report: dict, schedules: bool = True) -> str:
    """The report in words: the summary line, then each failing seed (its oracle, why, its schedule and the
    command that replays it)."""
    s = report["summary"]
    lines = [f"explorer: torch_npu {report['release']}, {s['label']} against the reference "
             f"(op-plugin's EXEC_NPU_CMD_V1 rule), seeds {report['seeds_text']}", summary_line(s)]
    for v in report["verdicts"]:
        bad = [o for o in ("memory", "safety") if v[o] != "held"]
        if not bad and not v["safer"]:
            continue
        tag = ", ".join(f"{o} {v[o]}" for o in bad) or "patch set safer"
        lines.append(f"seed {v['seed']}: {tag}")
        for x in (v["memory_failures"][:3] + v["safety_failures"][:3] + v["errors"][:3] + v["notes"][:2]):
            lines.append(f"    {x}")
        if schedules and bad:
            lines += ["    " + x for x in describe(schedule(v["seed"])).splitlines()]
            lines.append(f"    replay: python -m torch_npu._inductor.patchset.tooling.releases.explorer --release "
                         f"{report['release']} --seeds {v['seed']}:{v['seed'] + 1}"
                         + (f" --mutant {report['mutant']}" if report.get("mutant") else ""))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------
# 3. the reference launcher: torch_npu's own operators' rule
# ---------------------------------------------------------------------------------------------------
REFERENCE = "reference"
#: op-plugin's EXEC_NPU_CMD_V1: ``workspace_tensor = OpPreparation::unsafe_empty_workspace(workspace_size)`` (a byte
#: tensor whose storage is ``NPUCachingAllocator::get()->allocate(size)``, the calling thread's current stream), its
#: address handed to the lambda queued with ``OpCommand::RunOpApiV2``, the tensor dropped as the macro's scope ends.
#: Here: the same DataPtr, carved as the helper carves its block, dropped by ``handed()`` once the launch is queued
#: (or as the call unwinds when it threw). The lambda's ``LaunchDone`` finds no kept block and does nothing.
REFERENCE_CLASS = r"""
#ifndef NPU_PATCHSET_REFERENCE_LAUNCH_MEMORY
#define NPU_PATCHSET_REFERENCE_LAUNCH_MEMORY
namespace npu_patchset_reference {
class LaunchMemory {
 public:
  LaunchMemory(const char *kernel, aclrtStream stream, uint32_t gx, uint32_t gy, uint32_t gz, uint32_t bn, uint64_t ws,
               const torch_npu::inductor::LockLayout &locks) {
    (void)stream;  // torch_npu's operators take their workspace on the current stream
    r_.layout = locks;
    r_.sizes = torch_npu::inductor::launch_sizes(kernel, gx, gy, gz, bn, ws, locks);
    if (r_.sizes.total_bytes == 0) return;
    // OpPreparation::unsafe_empty_workspace(total_bytes): the caching allocator's block, as a tensor's storage
    workspace_ = c10_npu::NPUCachingAllocator::get()->allocate(r_.sizes.total_bytes);
    const uintptr_t base = (reinterpret_cast<uintptr_t>(workspace_.get()) + 511) & ~uintptr_t(511);
    if (r_.sizes.lock_bytes != 0) r_.locks = reinterpret_cast<void *>(base);
    if (r_.sizes.workspace_bytes != 0) r_.workspace = reinterpret_cast<void *>(base + r_.sizes.workspace_offset);
  }
  const torch_npu::inductor::LaunchRegions &regions() const noexcept { return r_; }
  // EXEC_NPU_CMD_V1's scope ends once RunOpApiV2 returned: the workspace tensor goes, its block free in the cache
  void handed() { workspace_.clear(); }

 private:
  torch_npu::inductor::LaunchRegions r_;
  c10::DataPtr workspace_;
};
}  // namespace npu_patchset_reference
#endif
"""
_HELPER_CLASS = "torch_npu::inductor::LaunchMemory "


def reference_edit(cpp: str) -> str:
    """A patched launcher's text with its LaunchMemory replaced by :data:`REFERENCE_CLASS`."""
    if _HELPER_CLASS not in cpp:
        return cpp
    return REFERENCE_CLASS + cpp.replace(_HELPER_CLASS, "npu_patchset_reference::LaunchMemory ")


# ---------------------------------------------------------------------------------------------------
# 4. build and run (torch_npu's own runtime; see real_runtime.py)
# ---------------------------------------------------------------------------------------------------
#: The entry points the explorer's child calls besides the tier's own (runtime_build._GLUE): a user's allocation from
#: torch_npu's caching allocator (as ``torch.empty`` takes it: the current stream), its release, and the device
#: synchronisation, each from a ctypes call (the GIL released: a thread stopped inside must not stop the others).
EXPLORER_GLUE = r"""
// ---- the explorer's entry points (tooling/releases/explorer.py) ----
#include <map>
namespace npu_patchset_explorer {
std::mutex slots_mu;
std::map<int, c10::DataPtr> slots;
}  // namespace npu_patchset_explorer
extern "C" __attribute__((visibility("default"))) int npu_patchset_explorer_alloc(int slot, uint64_t bytes, char* error,
                                                                                  size_t n) {
  try {
    c10::DataPtr p = c10_npu::NPUCachingAllocator::get()->allocate(bytes);
    if (!p) {
      std::snprintf(error, n, "the allocator returned no memory");
      return 1;
    }
    std::lock_guard<std::mutex> g(npu_patchset_explorer::slots_mu);
    npu_patchset_explorer::slots[slot] = std::move(p);
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, n, "%s", e.what());
  }
  return 1;
}
extern "C" __attribute__((visibility("default"))) int npu_patchset_explorer_free(int slot) {
  c10::DataPtr p;
  {
    std::lock_guard<std::mutex> g(npu_patchset_explorer::slots_mu);
    auto it = npu_patchset_explorer::slots.find(slot);
    if (it == npu_patchset_explorer::slots.end()) return 0;
    p = std::move(it->second);
    npu_patchset_explorer::slots.erase(it);
  }
  p.clear();
  return 1;
}
extern "C" __attribute__((visibility("default"))) int npu_patchset_explorer_synchronize(char* error, size_t n) {
  try {
    c10_npu::npuSynchronizeDevice(true);
    return 0;
  } catch (const std::exception& e) {
    std::snprintf(error, n, "%s", e.what());
  }
  return 1;
}
"""
def give_back_glue(helper_mutants: Sequence[str]) -> str:
    """An entry point per copy of the helper in the build (the patch set's, each edited mutant's): its idle blocks
    back, as ``torch_npu_launch_resources_give_back`` (what the patch set's ``torch.npu.empty_cache()`` calls first)
    does for the patch set's."""
    from . import mutant_helpers

    out = ['extern "C" __attribute__((visibility("default"))) size_t npu_patchset_explorer_give_back_patched() {\n'
           '  return torch_npu::inductor::KeptBlocks::all().give_back(true);\n}\n']
    for m in helper_mutants:
        ns = mutant_helpers._NS.format(m.replace("-", "_"))
        out.append(f'extern "C" __attribute__((visibility("default"))) size_t npu_patchset_explorer_give_back_'
                   f'{m.replace("-", "_")}() {{\n  return {ns}::KeptBlocks::all().give_back(true);\n}}\n')
    return "".join(out)


def empty_cache_gives_back() -> bool:
    """Whether the patch set's ``torch.npu.empty_cache()`` hands the kept launch memory back first (the tier's glue
    says what it is with the patch set applied: ``runtime_build``'s ``npu_patchset_real_runtime_empty_cache``)."""
    from . import runtime_build

    body = runtime_build._GLUE.split("npu_patchset_real_runtime_empty_cache", 1)[-1].split("\n}", 1)[0]
    return "give_back" in body


#: The kernels' run time on the host ACL library's stream.
KERNEL_US = 100
#: How long a child may go without progress (its watchdog), and a step before the coordinator forces it on.
CHILD_STALL_S = 120.0
CHILD = Path(__file__).with_name("explorer_child.py")


@dataclasses.dataclass
class ExplorerBuild:
    release: str
    shared_object: Path
    launchers: list  # per launcher: key, tag, sample, entry, cubin, kernel_name, xnumel (its default grid's)
    harness: dict
    tags: tuple


def build(release: str, *, helper: Path | None = None) -> ExplorerBuild:
    """The patch set's launchers (the ``threads`` and ``both`` samples, rendered by the wheel's own codegen after
    ``patchset.apply()``, with ``helper``: the one in ``csrc/`` by default), the reference's, and each mutant of
    :mod:`mutant_helpers` (``real_runtime.with_mutants``), in one shared object with the tier's entry points and the
    explorer's (cached by the build's inputs)."""
    from . import mutant_helpers
    from . import real_artifacts as ra
    from . import real_runtime as rr
    from .runtime_build import _LOAD_KERNEL, entries_source

    python = rr.line_python(release)
    libraries = rr.host_libraries(release)
    rendered_json = ra.harness_json(release, python, samples=rr.RUNTIME_SAMPLES, triton_shim=True)
    if "patched" not in rendered_json:
        raise rr.RealRuntimeError(f"torch_npu {release}: the wheel harness rendered no launchers")
    full = rr.with_mutants(rendered_json)
    keys = tuple(KERNEL_SAMPLES.values())
    harness = {k: v for k, v in full.items() if not isinstance(v, dict) or k not in ("patched", "upstream", *rr.MUTANTS)}
    harness["patched"] = {k: full["patched"][k] for k in keys}
    harness[REFERENCE] = {}
    for key in keys:
        kernel = rr.RUNTIME_SAMPLE_BY_KEY[key].kernel
        cpp = reference_edit(full["patched"][key]["cpp"]).replace(f"{kernel}_patched", f"{kernel}_{REFERENCE}")
        harness[REFERENCE][key] = dict(full["patched"][key], cpp=cpp)
    mutants = tuple(mutant_helpers.NAMES)
    for m in mutants:
        harness[m] = {k: full[m][k] for k in keys}
    tags = ("patched", REFERENCE, *mutants)

    helper_mutants = [m for m in mutants if m in mutant_helpers.HELPER_EDITS]

    def entries(calls, keys_):
        return entries_source(calls, keys_) + EXPLORER_GLUE + give_back_glue(helper_mutants)

    flavour = ra.Flavour(name="explorer", tags=tags, entries=entries, acl_libraries=libraries, harness=harness,
                         triton_shim=True)
    try:
        result = ra.build(release, python=python, helper=helper, flavour=flavour)
    except ra.TierError as exc:
        raise rr.RealRuntimeError(str(exc)) from exc
    if not result.ok:
        raise rr.RealRuntimeError(result.message)
    launchers = []
    for i, key in enumerate(result.info["launchers"]):
        tag, sample_key = key.split("/", 1)
        found = _LOAD_KERNEL.search(harness[tag][sample_key]["cpp"])
        if not found:
            raise rr.RealRuntimeError(f"torch_npu {release}: no loadKernel(...) in the rendered {key} launcher")
        s = rr.RUNTIME_SAMPLE_BY_KEY[sample_key]
        launchers.append({"key": key, "tag": tag, "sample": sample_key, "entry": f"{rr.ENTRY}{i}",
                          "cubin": Path(found.group("path")).name, "kernel_name": found.group("name"),
                          "kernel": f"{s.kernel}_{tag.replace('-', '_')}", "xnumel": 64 * math.prod(s.grid)})
    return ExplorerBuild(release, Path(result.info["shared_object"]), launchers, harness, tags)


def probe_binary(b: ExplorerBuild, tag: str) -> str:
    """The probe kernel binary for rendering ``tag``'s launchers: each kernel's workspace per program (its grid
    changes from launch to launch), its lock bytes, its arguments, its run time; locks left used."""
    from ..sim import harness as sim_harness
    from ..sim import launcher_writer as lc
    from . import real_runtime as rr
    from . import rendered

    lines = ["ACL_HOST_PROBE_BINARY 1"]
    for ln in b.launchers:
        if ln["tag"] != tag:
            continue
        sample = rr.RUNTIME_SAMPLE_BY_KEY[ln["sample"]]
        plan, site, args, grid = rendered.sample_setup(b.harness, sample, tag)
        exp = sim_harness.expected(plan, site, grid)
        per = exp["workspace_bytes"] // math.prod(grid)
        lines.append(f"kernel {ln['kernel_name'].split()[0]} has_ffts={int(site.has_ffts)} "
                     f"simt_only={int(site.simt(plan))} lock_bytes={exp['lock_bytes']} workspace_bytes=0 "
                     f"workspace_per_program={per} own_args_bytes={lc.own_args_bytes(args)} sim_time_us={KERNEL_US} "
                     f"locks_used=1")
    return "\n".join(lines) + "\n"


def kernel_judge(b: ExplorerBuild, tag: str):
    """``judge(probe record) -> problems``: what the kernel got against what it needs for the grid it ran with, by the
    simulation's own rules (``sim.harness.kernel_problems``)."""
    from ..sim import harness as sim_harness
    from . import real_runtime as rr
    from . import rendered
    from .real_runtime_judge import expectations, probe_view

    setups = {}
    for ln in b.launchers:
        if ln["tag"] == tag:
            plan, site, _args, _grid = rendered.sample_setup(b.harness, rr.RUNTIME_SAMPLE_BY_KEY[ln["sample"]], tag)
            setups[ln["kernel_name"].split()[0]] = (plan, site)
    cache: dict = {}

    def judge(rec: dict) -> list[str]:
        if rec.get("name") not in setups:
            return []
        grid = tuple(rec["grid"])
        key = (rec["name"], grid)
        if key not in cache:
            cache[key] = expectations(*setups[rec["name"]], grid)
        return sim_harness.kernel_problems(probe_view(rec), *cache[key])

    return judge


def _run_child(release: str, spec: dict, queue: str, timeout: float) -> dict:
    """``explorer_child.py`` for ``spec`` on ``release``'s runtime with ``TASK_QUEUE_ENABLE=queue`` (the tier's
    ``runtime_run.run_child``, with the explorer's child, on one device)."""
    from .runtime_run import run_child

    return run_child(release, spec, queue=queue, timeout=timeout, env_extra={"ACL_HOST_DEVICES": "1"}, child=CHILD)


def run_variant(release: str, b: ExplorerBuild, tag: str, schedules: Sequence[dict], *,
                timeout: float = CHILD_STALL_S, log=None) -> dict[int, dict]:
    """Each schedule with rendering ``tag``'s launch memory: a child per TASK_QUEUE_ENABLE value runs its schedules
    in turn; after a schedule that left torch_npu's runtime unusable (or a crash) a fresh child takes the rest.
    {seed: the child's record of that schedule}."""
    from .real_runtime_judge import child_failure
    from .runtime_build import HOST_LIBRARY

    launchers = [ln for ln in b.launchers if ln["tag"] == tag]
    if not launchers:
        raise ValueError(f"no launchers of {tag!r} in the explorer's build")
    from . import mutant_helpers

    # torch.npu.empty_cache() as the patch set makes it: where it hands the patch set's kept blocks back first, a
    # mutant of the helper hands back its own (its copy of the helper in the user's wrappers would)
    own = tag in ("patched", *mutant_helpers.HELPER_EDITS) and empty_cache_gives_back()
    spec = {"so": str(b.shared_object), "host_library": HOST_LIBRARY, "launchers": launchers,
            "binary": probe_binary(b, tag), "variant": tag,
            "give_back_entry": f"npu_patchset_explorer_give_back_{tag.replace('-', '_')}" if own else None,
            "launch_api": b.harness.get("launch_api") or "aclrtLaunchKernelWithHostArgs"}
    out: dict[int, dict] = {}
    for q in QUEUES:
        pending = [s for s in schedules if s["queue"] == q]
        while pending:
            started = time.perf_counter()
            res = _run_child(release, dict(spec, schedules=pending), q, timeout)
            if log:
                log(f"  {tag} TASK_QUEUE_ENABLE={q}: {len(res.get('schedules') or [])} of {len(pending)} schedules "
                    f"in {time.perf_counter() - started:.1f} s")
            done = {r["seed"]: r for r in res.get("schedules") or []}
            out.update(done)
            failure = child_failure(res)
            rest = [s for s in pending if s["seed"] not in done]
            if rest and failure and "schedules" not in res:  # it failed before its first schedule: so would the next
                for s in rest:
                    out[s["seed"]] = {"seed": s["seed"], "done": False, "steps": [],
                                      "failure": f"the child failed before the schedules: {failure}"}
                break
            if rest and failure and not res.get("stopped_after"):
                # the child died inside the next schedule: that one is an error, the rest get a fresh child
                current = rest[0]
                out[current["seed"]] = {"seed": current["seed"], "done": False, "steps": [],
                                        "failure": f"the child failed: {failure}"}
                rest = rest[1:]
            pending = rest
    return out


def explore(release: str, seeds: Iterable[int], *, mutant: str | None = None, built: ExplorerBuild | None = None,
            reference_runs: dict | None = None, timeout: float = CHILD_STALL_S, log=None) -> dict:
    """The exploration: each schedule of ``seeds`` with the patch set's launch memory (or ``mutant``'s, a name of
    :mod:`mutant_helpers`) and with the reference's, judged by the two oracles. ``reference_runs``: the reference's
    records from an earlier call (the same seeds), so that several mutants share one reference run."""
    seeds = list(seeds)
    b = built or build(release)
    schedules = [schedule(s) for s in seeds]
    tag = mutant or "patched"
    started = time.perf_counter()
    if reference_runs is None or not set(seeds) <= set(reference_runs):
        reference_runs = run_variant(release, b, REFERENCE, schedules, timeout=timeout, log=log)
    runs = run_variant(release, b, tag, schedules, timeout=timeout, log=log)
    judges = {t: kernel_judge(b, t) for t in (tag, REFERENCE)}
    verdicts = []
    for s in seeds:
        mine = run_view(runs.get(s, {"seed": s, "done": False, "failure": "not run"}), judges[tag])
        theirs = run_view(reference_runs.get(s, {"seed": s, "done": False, "failure": "not run"}), judges[REFERENCE])
        verdicts.append(verdict(mine, theirs))
    label = f"mutant {mutant}" if mutant else "patch set"
    return {"release": release, "mutant": mutant, "seeds": seeds, "seeds_text": _seeds_text(seeds),
            "summary": summarize(verdicts, label), "verdicts": verdicts, "runs": runs,
            "reference_runs": reference_runs, "seconds": round(time.perf_counter() - started, 1)}


def _seeds_text(seeds: Sequence[int]) -> str:
    if seeds and list(seeds) == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}:{seeds[-1] + 1}"
    return ",".join(map(str, seeds))


def caught(report: dict, patched: dict | None = None) -> dict:
    """Whether a mutant's exploration ``report`` caught it: the seeds where an oracle failed, and of those the ones
    where the patch set's own run (``patched``, its report over the same seeds) held that oracle."""
    out = {"memory": report["summary"]["memory_failed_seeds"], "safety": report["summary"]["safety_failed_seeds"],
           "unsafe": report["summary"].get("unsafe_seeds", [])}
    if patched is not None:
        ok = {v["seed"]: v for v in patched["verdicts"]}
        out["beyond_the_patch_set"] = sorted(
            {s for o in ("memory", "safety") for s in out[o] if ok.get(s, {}).get(o) == "held"})
        # not an oracle's failure (the reference is as unsafe there), but less safe than the patch set itself
        out["unsafe_where_the_patch_set_is_not"] = sorted(
            s for s in out["unsafe"] if s in ok and not ok[s].get("unsafe") and not ok[s]["errors"])
    return out


# ---------------------------------------------------------------------------------------------------
# 5. command line
# ---------------------------------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m torch_npu._inductor.patchset.tooling.releases.explorer",
                                description="Schedules from seeds: the patch set's launch memory against torch_npu's "
                                            "own operators' rule, on a release's own runtime.")
    p.add_argument("--release", default="2.7.1.post10")
    p.add_argument("--seeds", default=f"{CI_SEEDS.start}:{CI_SEEDS.stop}", help="A:B, A or A,B,C (default: the CI range)")
    p.add_argument("--long", action="store_true", help=f"the longer exploration: seeds {LONG_SEEDS.start}:{LONG_SEEDS.stop}")
    p.add_argument("--mutant", help="a mutant of the patch set in its place (tooling/releases/mutant_helpers.py)")
    p.add_argument("--schedule", action="store_true", help="print the schedules only (no runtime)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    try:
        seeds = list(LONG_SEEDS) if args.long else parse_seeds(args.seeds)
    except ValueError:
        print(f"explorer: --seeds {args.seeds!r}: give A:B, A or A,B,C", file=sys.stderr)
        return 2
    if args.schedule:
        scheds = [schedule(s) for s in seeds]
        print(json.dumps(scheds, indent=1) if args.json else "\n".join(describe(s) for s in scheds))
        return 0
    from . import mutant_helpers

    if args.mutant and args.mutant not in mutant_helpers.NAMES:
        print(f"explorer: unknown mutant {args.mutant!r}; valid: {', '.join(mutant_helpers.NAMES)}", file=sys.stderr)
        return 2
    from . import real_runtime as rr

    try:
        report = explore(args.release, seeds, mutant=args.mutant,
                         log=None if args.json else (lambda m: print(m, file=sys.stderr, flush=True)))
    except rr.RealRuntimeError as exc:
        print(f"explorer: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({k: v for k, v in report.items() if k not in ("runs", "reference_runs")}, default=str))
    else:
        print(summary_text(report))
        print(f"({report['seconds']} s)")
    s = report["summary"]
    return 0 if s["memory_held"] == s["safety_held"] == s["explored"] else 1


if __name__ == "__main__":
    sys.exit(main())
