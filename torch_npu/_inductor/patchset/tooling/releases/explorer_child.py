"""The explorer's subprocess (``explorer.py``): a released torch_npu, over the host ACL library, runs schedules.

NEVER imported by the project: ``explorer.py`` starts it as ``python -P explorer_child.py SPEC.json`` in the
environment ``host_runtime.subprocess_env`` makes (the wheel on PYTHONPATH, the host ACL library, a TEST DOUBLE of
CANN, on LD_LIBRARY_PATH), with one TASK_QUEUE_ENABLE value and one rendering's launchers (the patch set's, the
reference's or a mutant's). It reuses ``real_runtime_child.py`` (its spec and result file, its stall watchdog, its
host library and launcher wrappers) and writes one JSON object to the spec's ``out``: per schedule, what each step did,
the probe kernel's records and the host library's reports.

Each schedule (``explorer.schedule``) runs from a clean state: the threads of the schedule before ended, the device
synchronised, every kept block handed back (a cache miss runs every helper's callback), torch_npu's cache emptied, the
host library reset. A coordinator (this process's main thread) hands each step to its worker thread and waits for it:
the order of host calls is the schedule's. A worker arms the host library's pause points (its own thread's) around the
calls it makes through ctypes: after a device allocation (one that failed means torch_npu's out-of-memory retry comes,
which drains the task queue and synchronises the device: the coordinator lets the gate and the stream holds go), before
a wait for an event, a stream or the device (the holds go), and a schedule's own ``park`` point (the step stays there
until ``resume``). A step that does not finish within :data:`STEP_BOUND_S` and stopped nowhere known is forced on (the
gate and holds let go) and reported; one that still hangs ends the child, and the parent goes on with a fresh one.
"""
from __future__ import annotations

import ctypes
import json
import os
import queue
import sys
import threading
import time
import traceback

SPEC_FILE = sys.argv[1]  # the spec (real_runtime_child.py reads it as it is imported)
sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # last: real_runtime_child.py and child_watch.py
import real_runtime_child as rc  # noqa: E402  (its result file, watchdog, host library and launcher wrappers)

SPEC, RESULT = rc.SPEC, rc.RESULT
#: A step that has not finished within this (and stopped at no pause point the coordinator knows) is forced on.
STEP_BOUND_S = 15.0
#: The host library's own limits on a pause and a stream hold (only against a hang: the coordinator releases them).
PAUSE_LIMIT_MS = 60_000
HOLD_LIMIT_MS = 60_000
#: The device allocation torch_npu's caching allocator calls (aclrtMallocAlign32 where the wheel has it; main()
#: looks which one it called): one pause point per allocation.
MALLOC = [b"aclrtMallocAlign32"]
WAITS = (b"aclrtSynchronizeEvent,aclrtSynchronizeStream,aclrtSynchronizeStreamWithTimeout,aclrtSynchronizeDevice,"
         b"aclrtSynchronizeDeviceWithTimeout")
SYNC_DEVICE = b"aclrtSynchronizeDevice,aclrtSynchronizeDeviceWithTimeout"
SYNCING = ("sync", "empty_cache", "capture", "replay")
KERNELS = {"threads": "ws", "both": "locks"}
ERR = 4096


#: torch.npu.empty_cache() as this variant has it (main() sets it): the empty_cache steps call it.
EMPTY_CACHE: list = [None]


class Stuck(Exception):
    """A step that hangs even with the gate and the holds let go: the child stops after saving what it has."""


def _fail(exc: BaseException, n: int = 300) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())[:n]}"


# ---- the host library's controls -----------------------------------------------------------------------------------
def _lib():
    return rc.HOST.lib


def arm(functions: bytes, after: bool) -> int:
    lib = _lib()
    lib.acl_host_pause_arm.restype = ctypes.c_uint64
    lib.acl_host_pause_arm.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32]
    return lib.acl_host_pause_arm(functions, int(after), PAUSE_LIMIT_MS)


def reached(pid: int) -> bool:
    lib = _lib()
    lib.acl_host_pause_reached.argtypes = [ctypes.c_uint64, ctypes.c_uint32]
    return lib.acl_host_pause_reached(pid, 0) == 1


def release(pid: int) -> None:
    lib = _lib()
    lib.acl_host_pause_release.argtypes = [ctypes.c_uint64]
    lib.acl_host_pause_release(pid)


def stream_hold(handle: int) -> int:
    lib = _lib()
    lib.acl_host_stream_hold.restype = ctypes.c_uint64
    lib.acl_host_stream_hold.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    return lib.acl_host_stream_hold(handle, HOLD_LIMIT_MS)


def stream_release(hid: int) -> int:
    lib = _lib()
    lib.acl_host_stream_release.argtypes = [ctypes.c_uint64]
    return lib.acl_host_stream_release(hid)


def device_allocs() -> int:
    lib = _lib()
    lib.acl_host_counters_json.restype = ctypes.c_char_p
    return json.loads(lib.acl_host_counters_json().decode())["device_allocs"]


def set_device_memory(nbytes: int) -> None:
    lib = _lib()
    lib.acl_host_set_device_memory.argtypes = [ctypes.c_int, ctypes.c_uint64]
    lib.acl_host_set_device_memory(0, nbytes)


def stream_idle(handle: int) -> bool:
    lib = _lib()
    lib.aclrtStreamQuery.restype = ctypes.c_int
    lib.aclrtStreamQuery.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    status = ctypes.c_int(1)
    return lib.aclrtStreamQuery(handle, ctypes.byref(status)) == 0 and status.value == 0  # ACL_STREAM_STATUS_COMPLETE


def device_in_use() -> int:
    return rc.HOST.report()["counters"]["device_memory_in_use"][0]


# ---- the explorer's entry points in the launchers' shared object ------------------------------------------------
class Memory:
    """A user's allocations from torch_npu's caching allocator through the shared object (as ``torch.empty`` takes
    them, on the calling thread's current stream), made from ctypes: the GIL is free while one waits."""

    def __init__(self, so: rc.Launchers):
        self.lib = so.lib
        self.lib.npu_patchset_explorer_alloc.restype = ctypes.c_int
        self.lib.npu_patchset_explorer_alloc.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_char_p, ctypes.c_size_t]
        self.lib.npu_patchset_explorer_free.restype = ctypes.c_int
        self.lib.npu_patchset_explorer_free.argtypes = [ctypes.c_int]
        self.lib.npu_patchset_explorer_synchronize.restype = ctypes.c_int
        self.lib.npu_patchset_explorer_synchronize.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

    def alloc(self, slot: int, nbytes: int) -> str:
        err = ctypes.create_string_buffer(ERR)
        return "" if self.lib.npu_patchset_explorer_alloc(slot, nbytes, err, ERR) == 0 else (
            err.value.decode(errors="replace") or "a non-standard exception")

    def free(self, slot: int) -> bool:
        return self.lib.npu_patchset_explorer_free(slot) == 1

    def synchronize(self) -> str:
        err = ctypes.create_string_buffer(ERR)
        return "" if self.lib.npu_patchset_explorer_synchronize(err, ERR) == 0 else err.value.decode(errors="replace")


def _refusal(threw: bool, err: str) -> str:
    if not threw and not err:
        return "ok"
    low = err.lower()
    return "refused" if ("out of memory" in low or "bytes for its locks and workspace" in low
                         or "no memory" in low) else "threw"


# ---- a step in flight ---------------------------------------------------------------------------------------------
class Job:
    def __init__(self, step: dict):
        self.step = step
        self.done = threading.Event()
        self.pauses: dict = {}  # pause id -> "malloc" | "wait" | "park", while the worker may stop there
        self.handled: set = set()
        self.result: dict = {}
        self.park_id = 0
        self.allocs0 = 0
        self.successes = 0
        self.waits = 0


class Worker:
    """One schedule thread ``T<t>``: runs the steps handed to it, one at a time."""

    def __init__(self, ctx: "Schedule", t: int):
        self.ctx, self.t = ctx, t
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.tid = 0
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self.loop, name=f"T{t}", daemon=True)
        self.thread.start()
        self.ready.wait(rc.WAIT_S)

    def loop(self) -> None:
        try:
            self.ctx.torch.npu.set_device(0)
        finally:
            self.tid = threading.get_native_id()
            self.ready.set()
        while True:
            job = self.inbox.get()
            if job is None:
                return
            try:
                job.result.update(self.ctx.body(self, job))
            except BaseException as exc:  # said in the step's record
                job.result.update(outcome="threw", error=_fail(exc))
            finally:
                job.done.set()

    def guarded(self, job: Job, fn, park: tuple | None = None):
        """``fn()`` with this thread's pause points armed (the coordinator watches them): after each device
        allocation, before each wait for the device, and the step's own ``park`` point (functions, after)."""
        ids = {}
        for _ in range(3):
            ids[arm(MALLOC[0], True)] = "malloc"
        for _ in range(2):
            ids[arm(WAITS, False)] = "wait"
        if park:
            ids[arm(*park)] = "park"
        job.pauses.update(ids)
        try:
            return fn()
        finally:
            for pid in ids:  # no longer watched first, then let go (a pause left unreached)
                job.pauses.pop(pid, None)
            for pid in ids:
                release(pid)


class Schedule:
    """One schedule on this process's runtime: the coordinator's state and the steps' bodies."""

    def __init__(self, torch, so: rc.Launchers, mem: Memory, sch: dict):
        self.torch, self.so, self.mem, self.sch = torch, so, mem, sch
        self.queue = os.environ.get("TASK_QUEUE_ENABLE", "1")
        self.launchers = {KERNELS[ln["sample"]]: ln for ln in SPEC["launchers"] if ln["sample"] in KERNELS}
        self.workers: dict[int, Worker] = {}
        self.ended: set = set()
        self.parked: dict = {}  # thread -> (job, record)
        self.gate_held = False
        self.holds: dict = {}  # stream -> hold id
        self.graphs: dict = {}
        self.slots: set = set()
        self.anomalies: list = []
        self.taint = ""
        self.records: list = []

    # -- the runtime's state around a schedule ---------------------------------------------------------------------
    def setup(self) -> None:
        torch = self.torch
        torch.npu.set_device(0)
        self.stream_objs = [torch.npu.default_stream(0)] + [torch.npu.Stream() for _ in range(self.sch["streams"] - 1)]
        self.handles = [s.npu_stream for s in self.stream_objs]  # (reading it drains torch_npu's queue: now, not later)
        self.out["streams"] = list(self.handles)
        self.before = torch.npu.memory_allocated(0)
        # the launchers' input and output (their kernels read neither): the largest xnumel, 64 per program
        self.bufs = [torch.empty(64 * 64, device="npu", dtype=torch.float32) for _ in range(2)]
        torch.npu.synchronize()
        self.in_use = device_in_use()
        set_device_memory(self.in_use + (self.sch["device_mib"] << 20))

    def let_go(self, rec: dict | None, why: str) -> None:
        """torch_npu's queue and the held streams let go (``why`` noted in the step's record)."""
        what = []
        if self.gate_held:
            self.so.gate_open()
            self.gate_held = False
            what.append("gate")
        for s, hid in sorted(self.holds.items()):
            if stream_release(hid) == 0:
                self.anomalies.append(f"the hold of S{s} had expired (a wait the coordinator did not see)")
            what.append(f"S{s}")
        self.holds.clear()
        if what and rec is not None:
            rec.setdefault("let_go", []).append(f"{'+'.join(what)}: {why}")

    def release_holds(self, rec: dict, why: str) -> None:
        gate = self.gate_held
        self.gate_held = False
        self.let_go(rec, why)
        self.gate_held = gate

    def flush(self) -> None:
        """With the queue on and the gate not held: every lambda queued so far has run (a gate closed and opened)."""
        if self.queue == "0" or self.gate_held or self.taint:
            return
        got = self.so.gate_close()
        self.so.gate_open()
        if got == "the queue refused it":
            self.taint = f"torch_npu's queue stopped: {self.so.gate_refusal()[:200]}"
        elif got != "held":
            self.anomalies.append(f"draining the queue: the gate was not reached ({got})")

    def settle(self) -> None:
        """The streams not held run what they were given: the kernels there finish before the next step (so that
        only the gate and the holds, never the host's pace, decide what is still pending when)."""
        deadline = time.monotonic() + STEP_BOUND_S
        for s, handle in enumerate(self.handles):
            while s not in self.holds and not stream_idle(handle):
                if time.monotonic() > deadline:
                    self.anomalies.append(f"S{s} did not become idle within {STEP_BOUND_S:.0f} s")
                    return
                time.sleep(0.0002)

    def worker(self, t: int) -> Worker:
        if t not in self.workers:
            self.workers[t] = Worker(self, t)
        return self.workers[t]

    # -- the coordinator -----------------------------------------------------------------------------------------------
    def wait(self, job: Job, rec: dict) -> str:
        """Until the job is done ("done") or parked at its park point ("parked"), minding its pause points."""
        deadline, forced = time.monotonic() + STEP_BOUND_S, 0
        while True:
            if job.done.wait(0.001):
                return "done"
            for pid, kind in list(job.pauses.items()):
                if pid in job.handled or not reached(pid) or pid not in job.pauses:
                    continue
                job.handled.add(pid)
                if kind == "park":
                    job.park_id = pid
                    return "parked"
                if kind == "malloc":
                    now = device_allocs() - job.allocs0
                    if now > job.successes:
                        job.successes = now
                    else:
                        rec.setdefault("allocations_refused", 0)
                        rec["allocations_refused"] += 1
                        self.let_go(rec, "a device allocation failed: torch_npu's retry drains the queue and "
                                         "synchronises the device")
                else:
                    job.waits += 1
                    self.release_holds(rec, "a wait for the device")
                release(pid)
            if time.monotonic() > deadline:
                if forced:
                    raise Stuck(f"step {rec['i']} ({rec['step']['op']}) did not finish with the gate and the holds "
                                f"let go")
                forced += 1
                self.anomalies.append(f"step {rec['i']} ({rec['step']['op']}) was forced on after {STEP_BOUND_S:.0f} s")
                self.let_go(rec, "forced")
                for pid in list(job.pauses):
                    release(pid)
                deadline = time.monotonic() + STEP_BOUND_S

    def stats(self) -> dict:
        s = self.torch.npu.memory_stats(0)
        return {"retries": s.get("num_alloc_retries", 0), "segments": s.get("segment.all.allocated", 0),
                "allocated": s.get("allocated_bytes.all.current", 0), "reserved": s.get("reserved_bytes.all.current", 0)}

    def run_step(self, i: int, st: dict) -> dict:
        rec: dict = {"i": i, "step": st}
        op = st["op"]
        if op == "gate":
            if st["hold"] and not self.gate_held and self.queue != "0":
                got = self.so.gate_close()
                self.gate_held = got == "held"
                if got == "the queue refused it":
                    self.taint = f"torch_npu's queue stopped: {self.so.gate_refusal()[:200]}"
                rec["outcome"] = got
            elif not st["hold"] and self.gate_held:
                self.so.gate_open()
                self.gate_held = False
                rec["outcome"] = "let go"
            else:
                rec["outcome"] = "nothing to do"
        elif op == "hold":
            s = st["s"]
            if s not in self.holds:
                self.holds[s] = stream_hold(self.handles[s])
            rec["outcome"] = "held" if self.holds.get(s) else "not held"
        elif op == "release":
            hid = self.holds.pop(st["s"], None)
            rec["outcome"] = "let go" if hid and stream_release(hid) else "nothing held"
        elif op == "resume":
            self.resume(st["t"], rec)
        elif op == "end":
            self.end(st["t"])
            rec["outcome"] = "ended"
        elif st["t"] in self.ended or st["t"] in self.parked:
            rec["outcome"] = "skipped"
        else:
            if op in SYNCING:
                self.let_go(rec, "before a device synchronisation")
            w = self.worker(st["t"])
            job = Job(st)
            job.allocs0 = device_allocs()
            stats0 = self.stats()
            w.inbox.put(job)
            if self.wait(job, rec) == "parked":
                self.parked[st["t"]] = (job, rec, stats0)
                rec.update(outcome="parked", parked=True)  # its outcome once resumed replaces "parked"
            else:
                self.done_step(job, rec, stats0)
        self.flush()
        self.settle()
        return rec

    def done_step(self, job: Job, rec: dict, stats0: dict) -> None:
        rec.update(job.result)
        if job.step["op"] in ("alloc", "launch") and rec.get("outcome") == "ok":
            s = self.stats()
            rec["alloc"] = ("retry" if s["retries"] > stats0["retries"] else
                            "miss" if s["segments"] > stats0["segments"] else "hit")
        if job.step["op"] in ("alloc", "launch", "free", "empty_cache", "capture", "sync"):
            s = self.stats()  # torch_npu's allocator after the step, in MiB: (allocated, reserved)
            rec["mib"] = (round(s["allocated"] / 2**20, 2), round(s["reserved"] / 2**20, 2))
        if job.waits:
            rec["waited_on_the_device"] = job.waits

    def resume(self, t: int, rec: dict) -> None:
        if t not in self.parked:
            rec["outcome"] = "nothing parked"
            return
        job, prec, stats0 = self.parked.pop(t)
        release(job.park_id)
        self.wait(job, rec)
        self.done_step(job, prec, stats0)
        rec.update(outcome="resumed", resumed=prec["i"], result=prec.get("outcome"), error=prec.get("error", ""),
                   waited_on_the_device=job.waits)

    def end(self, t: int) -> None:
        w = self.workers.get(t)
        self.ended.add(t)
        if w is None:
            return
        w.inbox.put(None)
        w.thread.join(rc.WAIT_S)
        # Python's join returns before the OS thread has run its thread_local destructors (the helper's kept blocks
        # retire there): wait for the thread to be gone
        deadline = time.monotonic() + 5
        while os.path.exists(f"/proc/self/task/{w.tid}") and time.monotonic() < deadline:
            time.sleep(0.001)
        del self.workers[t]

    # -- the steps' bodies, on their worker thread -----------------------------------------------------------------
    def body(self, w: Worker, job: Job) -> dict:
        torch, st = self.torch, job.step
        op = st["op"]
        if op == "launch":
            ln = self.launchers[st["k"]]
            if "mib" in st:
                ln = dict(ln, xnumel=64 * st["mib"])
            park = (SPEC["launch_api"].encode(), False) if st.get("park") else None
            with torch.npu.stream(self.stream_objs[st["s"]]):
                threw, err = w.guarded(job, lambda: self.so.call(ln, self.bufs, self.handles[st["s"]]), park)
            return {"outcome": _refusal(threw, err), "error": err[:300]}
        if op == "alloc":
            slot = int(st["name"][1:])
            with torch.npu.stream(self.stream_objs[st["s"]]):
                err = w.guarded(job, lambda: self.mem.alloc(slot, st["mib"] << 20))
            if not err:
                self.slots.add(slot)
            return {"outcome": _refusal(bool(err), err), "error": err[:300]}
        if op == "free":
            slot = int(st["name"][1:])
            freed = w.guarded(job, lambda: self.mem.free(slot))
            self.slots.discard(slot)
            return {"outcome": "ok" if freed else "nothing allocated"}
        if op == "sync":
            err = w.guarded(job, self.mem.synchronize)
            return {"outcome": "ok" if not err else "threw", "error": err[:300]}
        if op == "empty_cache":
            park = (SYNC_DEVICE, True) if st.get("park") else None
            w.guarded(job, EMPTY_CACHE[0], park)  # (a failure raises: the step's record says it)
            return {"outcome": "ok"}
        if op == "capture":
            return self.capture(w, job)
        if op == "replay":
            g = self.graphs.get(st["graph"])
            if g is None:
                return {"outcome": "skipped", "error": "the graph was not captured"}
            with torch.npu.stream(self.stream_objs[1]):
                g.replay()
            return {"outcome": "ok"}
        raise ValueError(f"unknown step {op!r}")

    def capture(self, w: Worker, job: Job) -> dict:
        """torch.npu.graph on S1 (it synchronises and empties the cache as it begins), the launches captured."""
        torch, st = self.torch, job.step
        g = torch.npu.NPUGraph()
        launches, error = [], ""
        try:
            with torch.npu.graph(g, stream=self.stream_objs[1]):
                for x in st["launches"]:
                    ln = self.launchers[x["k"]]
                    if "mib" in x:
                        ln = dict(ln, xnumel=64 * x["mib"])
                    threw, err = w.guarded(job, lambda ln=ln: self.so.call(ln, self.bufs, self.handles[1]))
                    launches.append({"outcome": _refusal(threw, err), "error": err[:300]})
                    if threw:
                        break
        except Exception as exc:
            error = _fail(exc)
        if error or any(x["outcome"] != "ok" for x in launches):
            # torch_npu's capture state after a failed capture is not what a fresh process has: the rest of this
            # child's schedules get a fresh one
            self.taint = f"the capture of {st['graph']} failed"
            return {"outcome": "failed", "launches": launches, "error": error}
        self.graphs[st["graph"]] = g
        return {"outcome": "ok", "launches": launches}

    # -- the whole schedule --------------------------------------------------------------------------------------------
    def run(self) -> dict:
        started = time.perf_counter()
        out = self.out = {"seed": self.sch["seed"], "steps": self.records, "done": False}
        try:
            self.setup()
            for i, st in enumerate(self.sch["steps"]):
                self.records.append(self.run_step(i, st))
                if self.taint.startswith("torch_npu's queue stopped"):
                    break
            self.finish(out)
            out["done"] = True
        except Stuck as exc:
            out["failure"] = str(exc)
            out["stuck"] = True
        except Exception as exc:
            out["failure"] = _fail(exc, 600)
            out["traceback"] = traceback.format_exc()[-3000:]
            self.taint = self.taint or "the coordinator failed"
        out.update(anomalies=self.anomalies, taint=self.taint, seconds=round(time.perf_counter() - started, 3))
        return out

    def finish(self, out: dict) -> None:
        """Every parked step resumed, the gate and the holds let go, the threads ended, the device synchronised; what
        the kernels got and what the host library reported; then the state restored for the next schedule."""
        torch = self.torch
        for t in sorted(self.parked):
            self.resume(t, {"i": "end", "step": {"op": "resume"}})
        self.let_go(None, "the schedule's end")
        for t in sorted(self.workers):
            self.end(t)
        err = self.mem.synchronize()
        if err:
            out["sync_error"] = err[:300]
        report = rc.HOST.report()
        out["probe_records"] = report.get("probe_records", [])
        out["host_errors"] = [{"kind": e["kind"], "message": e["message"][:300]} for e in report.get("errors", [])]
        out["counters"] = {k: report["counters"].get(k) for k in ("device_frees", "device_allocs", "captured_tasks",
                                                                   "replays")}
        self.graphs.clear()
        for slot in sorted(self.slots):
            self.mem.free(slot)
        self.bufs = []
        self.stream_objs = []
        restore(torch, self.so, self.mem)
        out["leftover_bytes"] = torch.npu.memory_allocated(0) - self.before


def restore(torch, so: rc.Launchers, mem: Memory) -> None:
    """The state every schedule starts from: the device idle, every helper's idle and retired blocks handed back (a
    cache miss of torch_npu's allocator runs each helper's callback: a request no cached block and no free memory can
    serve, refused after torch_npu's own retry, which frees what it caches), the cache emptied, the host library reset
    (its device memory back to its default)."""
    mem.synchronize()
    so.give_back()
    set_device_memory(device_in_use() + (1 << 20))
    mem.alloc(-1, 1 << 30)  # refused: the callbacks ran, then the retry
    mem.free(-1)
    mem.synchronize()
    torch.npu.empty_cache()
    rc.HOST.reset()


def main() -> None:
    rc.watchdog()  # the import bound until the launchers are loaded
    import torch

    import torch_npu  # noqa: F401  (the wheel's own)

    RESULT.update(torch=torch.__version__, torch_npu=torch_npu.__version__, variant=SPEC.get("variant"),
                  task_queue_enable=os.environ.get("TASK_QUEUE_ENABLE"))
    torch.npu.set_device(0)
    RESULT["import_s"] = round(time.perf_counter() - rc.T0, 2)
    rc.HOST = rc.HostAcl(os.environ.get("ACL_HOST_LIBRARY") or SPEC["host_library"])
    so = rc.Launchers(SPEC["so"])
    mem = Memory(so)

    give_back = None
    if SPEC.get("give_back_entry"):  # this variant's own kept blocks first, as the patch set's empty_cache does
        give_back = getattr(so.lib, SPEC["give_back_entry"])
        give_back.restype, give_back.argtypes = ctypes.c_size_t, []

    def empty_cache() -> None:  # what torch.npu.empty_cache() is with the patch set applied (the build's entry point)
        if give_back is not None:
            give_back()
        err = so.empty_cache()
        if err:
            raise RuntimeError(err)

    EMPTY_CACHE[0] = empty_cache

    # torch.npu.graph empties the cache through it as a capture starts
    torch.npu.empty_cache = torch_npu.npu.empty_cache = torch_npu.npu.memory.empty_cache = empty_cache
    rc.arm(SPEC["stall_s"])
    rc.step("launchers loaded")
    if os.environ.get("TASK_QUEUE_ENABLE", "1") != "2":  # (torch_npu refuses a capture with the queue at level 2)
        side = torch.npu.Stream()
        rc._warm_graph(torch, side)  # torch_npu's graph state made once: a schedule's first capture is not the first
        del side
    restore(torch, so, mem)
    mem.alloc(-2, 32 << 20)  # a segment of its own: which ACL allocation torch_npu's caching allocator calls
    mem.free(-2)
    calls = rc.HOST.report().get("calls", {})
    MALLOC[0] = b"aclrtMallocAlign32" if (calls.get("aclrtMallocAlign32") or {}).get("calls") else b"aclrtMalloc"
    RESULT["malloc_function"] = MALLOC[0].decode()
    restore(torch, so, mem)
    RESULT["schedules"] = []
    for sch in SPEC["schedules"]:
        out = Schedule(torch, so, mem, sch).run()
        RESULT["schedules"].append(out)
        rc.step(f"seed {sch['seed']} done")
        if out.get("stuck"):
            RESULT["stopped_after"] = sch["seed"]
            break
        if out.get("taint"):  # the rest in a fresh process
            RESULT["stopped_after"] = sch["seed"]
            break
    RESULT["done"] = True
    RESULT["seconds"] = round(time.perf_counter() - rc.T0, 2)
    rc.save()
    os._exit(0)  # torch_npu's own shutdown is not what is judged (and a stuck thread may still hold a lock)


if __name__ == "__main__":
    import faulthandler

    faulthandler.enable()
    rc.PROGRESS.run(main)
