"""The real-runtime tier's subprocess: a released torch_npu, over the host ACL library, runs launchers.

NEVER imported by the project: ``real_runtime.py`` starts it as ``python -P real_runtime_child.py SPEC.json``
in the environment ``host_runtime.subprocess_env`` makes (the wheel on PYTHONPATH, the host ACL library on
LD_LIBRARY_PATH: a TEST DOUBLE of CANN, only ever loaded into this subprocess). It imports torch and the
wheel's torch_npu only (no module of this project: the wheel's ``torch_npu`` package is the one on the path),
loads the launchers' shared object with ctypes and writes one JSON object to the spec's ``out`` (rewritten
after every step, so that a run stopped by its timeout still says how far it got).

Spec (from ``real_runtime.py``): ``so``, ``cubin_dir``, ``out``, ``stall_s``, ``launchers`` (entry
symbol, kernel name, xnumel, device argument), ``mode`` "samples", "scenario", "capture", "batch" (``scenarios``:
several scenario specs in turn, each with its own part of the result) or "self-wait", and the scenario's
parameters. The host ACL library's control surface (``acl_host_*``) gives the probe's reports.

Timing: no verdict here depends on how fast the child gets somewhere. The watchdog (:func:`watchdog`) fires on a
stall, ``stall_s`` after the child last reported progress (a saved result), and is armed only once torch_npu is
imported and the launchers loaded (before that, :data:`IMPORT_BOUND_S` only bounds a hang; ``child_watch.py``); the waits between the
child's own threads are on events, bounded by :data:`WAIT_S` only against a hang.
"""
from __future__ import annotations

import ctypes
import faulthandler
import json
import os
import sys
import threading
import time
from pathlib import Path

T0 = time.perf_counter()
SPEC = json.load(open(sys.argv[1]))
RESULT: dict = {"steps": [], "done": False}
sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # last: only child_watch.py is taken from there
import child_watch  # noqa: E402  (the result file and the stall watchdog, shared with the benchmark's child)

#: The watchdog's bound while torch and torch_npu are imported and the launchers loaded: only a bound on a hang there
#: (an import takes 3-30 s on this tier's machines, longer on a loaded one), never a verdict on how fast it went.
IMPORT_BOUND_S = 900.0
#: A wait of one of the child's threads for another (an event it sets within milliseconds): only a bound on a hang.
WAIT_S = 120.0
#: memory-back-history: where the launch's cache miss stops (the helper's capture-status read as it hands a block
#: back, else torch_npu's device allocation after the callbacks), and for how long: the other thread asks meanwhile.
HISTORY_PAUSE, HISTORY_HOLD_S = b"aclmdlRICaptureGetInfo,aclrtMallocAlign32,aclrtMalloc", 2.0
PROGRESS = child_watch.Progress(SPEC["out"], RESULT, IMPORT_BOUND_S)
save, arm = PROGRESS.save, PROGRESS.arm


def step(what: str, out: dict | None = None) -> None:
    """Progress, saved at once: in the result (and in a batch's scenario result ``out``)."""
    if out is not None and out is not RESULT:
        out["steps"].append(what)
        what = f"{out['scenario']}: {what}"
    RESULT["steps"].append(what)
    save()


def watchdog() -> None:
    """A self-wait or a hang ends here (``child_watch``): the stacks of every thread, what was seen so far and the
    host ACL library's report, exit 3; on a stall (no progress for the armed bound: :func:`arm`), never on the
    run's total time."""
    PROGRESS.watch(lambda: {"host": HOST.report() if HOST is not None else None})


# ---- the host ACL library's control surface (ctypes) ------------------------------------------------
class HostAcl:
    """The host ACL library's ``acl_host_*`` functions, from the copy torch_npu loaded (same soname)."""

    def __init__(self, name: str):
        self.lib = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        self.lib.acl_host_report_json.restype = ctypes.c_char_p
        self.lib.acl_host_reset.restype = None

    def report(self) -> dict:
        return json.loads(self.lib.acl_host_report_json().decode())

    def reset(self) -> None:
        self.lib.acl_host_reset()

    def call(self, name: str, *args) -> int:
        return getattr(self.lib, name)(*args)


HOST: HostAcl | None = None


# ---- the launchers' shared object ---------------------------------------------------------------
class Launchers:
    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)
        self.error = ctypes.create_string_buffer(4096)
        self.lib.npu_patchset_real_runtime_gate_close.restype = ctypes.c_int
        self.lib.npu_patchset_real_runtime_gate_close.argtypes = [ctypes.c_int]
        self.lib.npu_patchset_real_runtime_gate_open.restype = None
        self.lib.npu_patchset_real_runtime_gate_refusal.restype = None
        self.lib.npu_patchset_real_runtime_gate_refusal.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        self.lib.npu_patchset_real_runtime_queue_tid.restype = ctypes.c_longlong
        self.lib.npu_patchset_real_runtime_wrapper_end.restype = ctypes.c_int
        self.lib.npu_patchset_real_runtime_give_back.restype = ctypes.c_int

    def entry(self, symbol: str):
        fn = getattr(self.lib, symbol)
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p,
                       ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        return fn

    def call(self, launcher: dict, bufs, stream: int, device: int = 0) -> tuple[bool, str]:
        """One launch as the compiled graph makes it; (threw, what) on the calling thread (the GIL released)."""
        err = ctypes.create_string_buffer(4096)
        rc = self.entry(launcher["entry"])(bufs[0].data_ptr(), bufs[1].data_ptr(), launcher["xnumel"], device,
                                           stream, SPEC["cubin_dir"].encode(), err, len(err))
        return rc != 0, err.value.decode(errors="replace")

    def gate_close(self) -> str:
        """Holds torch_npu's task queue (a task of its own waits there): 'held', 'queue off' or 'timeout'. The queue
        thread reaches the gate within milliseconds; WAIT_S only bounds a hang."""
        rc = self.lib.npu_patchset_real_runtime_gate_close(int(WAIT_S * 1000))
        return {1: "held", 0: "queue off", -2: "the queue refused it"}.get(rc, "timeout")

    def gate_open(self) -> None:
        self.lib.npu_patchset_real_runtime_gate_open()

    def gate_refusal(self) -> str:
        """What torch_npu raised when it last refused a gate's task."""
        buf = ctypes.create_string_buffer(4096)
        self.lib.npu_patchset_real_runtime_gate_refusal(buf, len(buf))
        return buf.value.decode(errors="replace")

    def give_back(self) -> int:
        return self.lib.npu_patchset_real_runtime_give_back()

    def empty_cache(self) -> str:
        """torch_npu's caching allocator's emptyCache, called through ctypes (the GIL released: torch_npu's own
        binding keeps it during the device synchronisation, where a pause would stop every Python thread); what
        it threw, else ""."""
        err = ctypes.create_string_buffer(4096)
        fn = self.lib.npu_patchset_real_runtime_empty_cache
        fn.restype, fn.argtypes = ctypes.c_int, [ctypes.c_char_p, ctypes.c_size_t]
        if fn(err, len(err)) == 0:
            return ""
        return err.value.decode(errors="replace") or "a non-standard exception"

    def wrapper_end(self) -> int:
        return self.lib.npu_patchset_real_runtime_wrapper_end()

    def queue_tid(self) -> int:
        return self.lib.npu_patchset_real_runtime_queue_tid()

    def outcome(self, launcher: dict) -> dict | None:
        """What the launch's lambda returned, where the build notes it (real_sources.py's): ran, rc, escaped."""
        if "outcome" not in launcher:
            return None
        vals = [ctypes.c_int(0) for _ in range(3)]
        self.lib.npu_patchset_real_runtime_outcome(launcher["outcome"], *map(ctypes.byref, vals))
        return dict(zip(("ran", "rc", "escaped"), (v.value for v in vals)))


def main() -> None:
    global HOST
    watchdog()  # IMPORT_BOUND_S until the launchers are loaded
    import torch

    if "torch_npu_patchset_autoload" not in sys.modules:  # a line's own interpreter (2.13.0's), without the checkout's
        sys.path.append(str(Path(__file__).resolve().parents[5]))  # editable install: its torch.backends entry
        import torch_npu_patchset_autoload  # point, as a user's install runs it (the Python patches, empty_cache's)

        torch_npu_patchset_autoload.autoload()
    import torch_npu  # noqa: F401  (the wheel's own, on its own torch)

    RESULT.update(torch=torch.__version__, torch_npu=torch_npu.__version__,
                  torch_npu_file=torch_npu.__file__, task_queue_enable=os.environ.get("TASK_QUEUE_ENABLE"),
                  patchset_imported=any(m.startswith("torch_npu._inductor.patchset") for m in sys.modules))
    pluggable = [sp["pluggable"] for sp in SPEC.get("scenarios", [SPEC]) if sp.get("pluggable")]
    if pluggable:  # before torch_npu's first allocation, as change_current_allocator requires
        torch.npu.memory.change_current_allocator(torch.npu.memory.NPUPluggableAllocator(
            pluggable[0], "npu_patchset_pluggable_malloc", "npu_patchset_pluggable_free"))
    torch.npu.set_device(0)
    RESULT["import_s"] = round(time.perf_counter() - T0, 2)
    step("imported torch_npu, device 0 set")
    HOST = HostAcl(os.environ.get("ACL_HOST_LIBRARY") or SPEC["host_library"])
    so = Launchers(SPEC["so"])
    arm(SPEC["stall_s"])  # what is timed starts here: the child's own work
    step("launchers loaded")
    if SPEC["mode"] == "samples":
        run_samples(torch, so)
    elif SPEC["mode"] == "self-wait":  # the watchdog's own check: a wait that never ends
        so.gate_close()
        step("torch_npu's queue held; synchronising waits for it")
        torch.npu.synchronize()
    elif SPEC["mode"] == "batch":  # several scenarios in turn, one process (what CI's time allows)
        RESULT["scenarios"] = []
        for sp in SPEC["scenarios"]:
            out = {"scenario": sp["name"], "steps": [], "done": False}
            RESULT["scenarios"].append(out)
            started = time.perf_counter()
            RUNNERS[sp["mode"]](torch, so, sp, out)
            out.update(done=True, seconds=round(time.perf_counter() - started, 2))
            save()
    else:
        RUNNERS[SPEC["mode"]](torch, so, SPEC, RESULT)
    RESULT["done"] = True
    RESULT["seconds"] = round(time.perf_counter() - T0, 2)
    save()
    if SPEC["mode"] == "batch":
        # The verdict is written; torch_npu's own shutdown (about 3.5 s per process here) is not what the
        # scenarios judge, and three of these processes run in every CI leg.
        os._exit(0)


def _one_line(text: str, limit: int = 400) -> str:
    """``text`` with its whitespace runs folded into single spaces, cut to ``limit`` characters."""
    return ' '.join(text.split())[:limit]


def _failure(exc: BaseException, limit: int = 400) -> str:
    """An exception as one line: its type, then its text (:func:`_one_line`)."""
    return f"{type(exc).__name__}: {_one_line(str(exc), limit)}"


def _stats(torch) -> dict:
    s = torch.npu.memory_stats(0)
    return {"allocated": torch.npu.memory_allocated(0), "requests": s.get("allocation.all.allocated", 0),
            "retries": s.get("num_alloc_retries", 0), "reserved": torch.npu.memory_reserved(0)}


def _until_settled(read, want: dict | None) -> dict:
    """``read()`` once it equals ``want`` (what nothing left gives: at once where nothing is late), else once it
    has not moved for 0.1 s (2 s at most): torch_npu destroys a finished task on its release thread, so memory a
    task owned (a mutant's lambda, an operator's tensors) goes back a moment after the queue ran it."""
    last, quiet, deadline = read(), 0, time.monotonic() + 2.0
    while (want is None or last != want) and quiet < 20 and time.monotonic() < deadline:
        time.sleep(0.005)
        now = read()
        quiet = quiet + 1 if now == last else 0
        last = now
    return last


def _settled(torch, want: dict | None = None) -> dict:
    return _until_settled(lambda: _stats(torch), want)


def _lambda_outcome(so: Launchers, launcher: dict) -> dict | None:
    """The launch lambda's outcome once it ran, for launchers whose build notes one (else None); the wait is
    bounded by WAIT_S against a hang only."""
    deadline = time.monotonic() + WAIT_S
    while (out := so.outcome(launcher)) is not None and not out["ran"] and time.monotonic() < deadline:
        time.sleep(0.001)
    return out


def run_samples(torch, so: Launchers) -> None:
    """Each launcher SPEC["launches"] times on the default stream. Each launch: torch_npu's queue held (a task
    waits in it), the call made, what the caching allocator holds then, the queue let go, the device
    synchronised; the host ACL library's report of what that launch did (reset before it)."""
    stream = torch.npu.current_stream().npu_stream  # once: NPUStream::stream() drains the task queue
    caller = threading.get_native_id()
    RESULT["caller_tid"] = caller
    RESULT["launches"] = []
    for launcher in SPEC["launchers"]:
        bufs = [torch.empty(launcher["xnumel"], device="npu", dtype=torch.float32) for _ in range(2)]
        torch.npu.synchronize()
        baseline = None
        for i in range(SPEC["launches"]):
            so.give_back()  # what the allocator's callback does: the kept blocks whose kernels finished go back
            HOST.reset()
            torch.npu.reset_peak_memory_stats(0)  # the peak then says how big the launch's block was
            before = _stats(torch)
            baseline = baseline or before  # before the launcher's first launch
            gate = so.gate_close()
            threw, what = so.call(launcher, bufs, stream)
            held = _stats(torch)  # the launch is queued behind the gate: its lambda has not run
            calls, early = None, None
            if gate == "queue off":  # the lambda ran in the call: once its kernel finished, the block is the
                calls = HOST.report().get("calls", {})  # caller's to give back at its next launch in the wrapper
                torch.npu.synchronize()
                early = so.give_back()
            kept = so.wrapper_end()  # the end of the compiled graph's wrapper function
            at_end = _stats(torch)  # still queued
            so.gate_open()
            # Tasks run in order: once the queue thread holds a new gate, the lambda has run. A lambda that failed
            # stopped torch_npu's queue, which then runs nothing more: no gate is waited for after it.
            ran = None if threw else _lambda_outcome(so, launcher)  # a call that threw queued nothing
            drain = "the lambda failed" if ran and (ran["rc"] != 0 or ran["escaped"]) else so.gate_close()
            so.gate_open()
            if calls is None:
                calls = HOST.report().get("calls", {})  # what the launch called, before this process synchronises
            # torch_npu's queue reports a failed task once, to the first call that reaches it: the drain gate's
            # enqueue when the failure came first, else a synchronisation.
            sync_error = f"refused the next task: {_one_line(so.gate_refusal())}" if drain == "the queue refused it" else ""
            try:
                torch.npu.synchronize()
            except Exception as exc:
                sync_error += _failure(exc)
            if drain == "the lambda failed" and not sync_error:
                sync_error = _reported_failure(torch)
            after_sync = _stats(torch)
            given_back = so.give_back()  # the calling thread gives its kept block back
            after = _settled(torch, before)
            peak = torch.npu.max_memory_allocated(0)
            RESULT["launches"].append({
                "key": launcher["key"], "kernel": launcher["kernel"], "launch": i + 1, "gate": gate,
                "queue_tid": so.queue_tid(), "call_threw": threw, "call_error": what, "sync_error": sync_error,
                "kept_to_wrapper_end": kept, "given_back_before_wrapper_end": early, "memory_before": before, "memory_baseline": baseline, "memory_held_while_queued": held, "memory_at_wrapper_end": at_end, "memory_after_sync": after_sync, "given_back": given_back, "memory_peak": peak,
                "memory_after": after, "calls_before_sync": calls, "host": HOST.report(),
                "outcome": so.outcome(launcher)})
            save()
            if sync_error or drain == "the lambda failed":
                break  # torch_npu's queue stopped after the failed task: no later launch would run
        del bufs
        mine = [x for x in RESULT["launches"] if x["key"] == launcher["key"]]
        if any(x["call_threw"] or x["sync_error"] or x["gate"] not in ("held", "queue off") for x in mine):
            # torch_npu's queue stops after a failed task, and a failed allocation can leave an allocator
            # changed: the next launcher gets a fresh process (the parent starts it), not this one's leftovers.
            RESULT["stopped_after"] = launcher["key"]
            break
    step("samples done")


def run_scenario(torch, so: Launchers, sp: dict, out: dict) -> None:
    """sp["threads"] Python threads, each sp["per_thread"] launches of one launcher on its device's default
    stream (thread t on sp["devices"][t % len]); each thread empties the cache every sp["empty_cache_every"]
    launches (0: never); with sp["empty_cache_thread"], one more thread calls torch.npu.empty_cache() in a
    loop; with sp["oom_bytes"], one more thread allocates that much again and again so that torch_npu's
    allocator runs its out-of-memory retry (the host ACL library's device memory limited by the parent); with
    sp["operators"], one more thread runs torch_npu's own Tensor.zero_() and Tensor.fill_() on each device."""
    launcher = sp["launchers"][0]
    devices = sp.get("devices") or [0]
    HOST.reset()
    stop = threading.Event()
    started = threading.Event()  # the launches begin once the other thread runs (at once without one)
    # The empty_cache thread's calls, begun and done (one thread: in order), so that a launching thread can wait for
    # one that began after it dropped a segment of its own: memory freed while the launches run, by construction.
    emptied = threading.Condition()
    calls = {"begun": 0, "done": 0, "ended": False}
    if not (sp.get("empty_cache_thread") or sp.get("operators") or sp.get("oom_bytes")):
        started.set()
    rows: list = []
    errors: list = []
    tids: dict = {}
    extra: dict = {}

    def launching(t: int) -> None:
        try:
            device = devices[t % len(devices)]
            torch.npu.set_device(device)
            tids[t] = threading.get_native_id()
            stream = torch.npu.current_stream(device).npu_stream
            bufs = [torch.empty(launcher["xnumel"], device=f"npu:{device}", dtype=torch.float32) for _ in range(2)]
            if not started.wait(WAIT_S):
                errors.append(f"thread {t}: the other thread never started")
            scratch = sp.get("empty_cache_every") or sp.get("empty_cache_thread")
            for i in range(sp["per_thread"]):
                threw, what = so.call(launcher, bufs, stream, device)
                if scratch:  # a tensor of the program's own, dropped: what empty_cache frees besides any launch's
                    del_me = torch.empty(24 << 20, device=f"npu:{device}", dtype=torch.uint8)  # a segment of its own
                    del del_me
                if sp.get("empty_cache_thread") and i == sp["per_thread"] // 2:
                    with emptied:  # half way: one empty_cache that began after the drop (not left to the pace)
                        target = calls["begun"] + 1
                        if not emptied.wait_for(lambda n=target: calls["done"] >= n or calls["ended"], WAIT_S):
                            errors.append(f"thread {t}: no empty_cache call within {WAIT_S:.0f} s (a hang?)")
                if sp.get("pace_s"):  # the launches spread over the other thread's empty_cache calls
                    time.sleep(sp["pace_s"])
                rows.append({"thread": t, "device": device, "launch": i + 1, "call_threw": threw,
                             "call_error": what[:300]})
                if sp.get("empty_cache_every") and (i + 1) % sp["empty_cache_every"] == 0:
                    torch.npu.empty_cache()
        except Exception as exc:
            errors.append(f"thread {t}: {type(exc).__name__}: {str(exc).strip()[:300]}")

    def pressing() -> None:
        n, failed = 0, {}
        torch.npu.set_device(0)
        # Two streams in turn: the allocator keeps freed blocks per stream, so each request finds the other
        # stream's big block cached, the device full, and runs the out-of-memory path (free what is cached, retry).
        streams = [torch.npu.Stream(), torch.npu.Stream()]
        while not stop.is_set():
            try:
                with torch.npu.stream(streams[n % 2]):
                    x = torch.empty(sp["oom_bytes"] // 4, device="npu", dtype=torch.float32)
                    del x
            except Exception as exc:  # still too big after the retry: torch_npu says so, and the thread goes on
                what = _failure(exc, 160)
                failed[what] = failed.get(what, 0) + 1
            n += 1
            if n == 2:  # the second request found the first one's block cached: the retry has run once
                started.set()
            time.sleep(0.001)
        extra.update(oom_allocations=n, oom_failures=failed)

    def emptying() -> None:
        n = 0
        try:
            torch.npu.set_device(0)
            while not stop.is_set():
                with emptied:
                    calls["begun"] += 1
                torch.npu.empty_cache()
                with emptied:
                    calls["done"] += 1
                    emptied.notify_all()
                n += 1
                started.set()
                time.sleep(0.001)
        except Exception as exc:
            errors.append(f"empty_cache thread: {type(exc).__name__}: {str(exc).strip()[:300]}")
        finally:  # no launching thread waits for a thread that ended
            with emptied:
                calls["ended"] = True
                emptied.notify_all()
            started.set()
        extra["empty_cache_calls"] = n

    def operating() -> None:
        # torch_npu's own operators (op-plugin, aclnnInplaceZero / aclnnInplaceFillScalar): with
        # TASK_QUEUE_ENABLE=2 each is queued whole, its workspace taken on the device's queue thread.
        n = 0
        extra["operator_tid"] = threading.get_native_id()
        try:
            xs = {}
            for d in devices:
                torch.npu.set_device(d)
                xs[d] = torch.empty(4096, device=f"npu:{d}", dtype=torch.float32)
            want = {}
            while not stop.is_set():
                for d in devices:
                    torch.npu.set_device(d)
                    if n % 2 == 0:
                        xs[d].zero_()
                    else:
                        xs[d].fill_(float(n))
                    want[d] = float(0 if n % 2 == 0 else n)
                    n += 1
                started.set()
                time.sleep(0.001)
            for d in devices:  # what the last operator wrote, read back (a blocking copy after the queue drained)
                torch.npu.set_device(d)
                got = xs[d].cpu()
                extra.setdefault("operator_results", {})[str(d)] = {
                    "want": want.get(d), "all_equal": bool((got == want.get(d, 0.0)).all())}
            del xs
        except Exception as exc:
            errors.append(f"operator thread: {type(exc).__name__}: {str(exc).strip()[:300]}")
        finally:
            started.set()
        extra["operators_called"] = n

    for d in devices:  # each device initialised on this thread first (torch_npu's lazy init)
        torch.npu.set_device(d)
        torch.npu.synchronize()
    torch.npu.set_device(0)
    before = _stats_all(torch, devices)
    threads = [threading.Thread(target=launching, args=(t,)) for t in range(sp["threads"])]
    for flag, target in (("oom_bytes", pressing), ("empty_cache_thread", emptying), ("operators", operating)):
        if sp.get(flag):
            threads.append(threading.Thread(target=target))
    for t in threads:
        t.start()
    for t in threads[:sp["threads"]]:
        t.join()
    stop.set()
    for t in threads[sp["threads"]:]:
        t.join()
    sync_error = _synchronize_all(torch, devices)
    for d in devices:  # what the allocator's callback does, on each device: the kept blocks go back
        torch.npu.set_device(d)
        so.give_back()
    torch.npu.set_device(0)
    out.update(calls=rows, thread_errors=errors, sync_error=sync_error, memory_before=before,
                  memory_after=_settled_all(torch, devices, before), host=HOST.report(), thread_tids=tids, **extra)
    step("scenario done", out)


def _stats_all(torch, devices) -> dict:
    """_stats summed over ``devices`` (torch_npu's figures are per device)."""
    per = [_stats_of(torch, d) for d in devices]
    return {k: sum(p[k] for p in per) for k in per[0]}


def _stats_of(torch, d: int) -> dict:
    s = torch.npu.memory_stats(d)
    return {"allocated": torch.npu.memory_allocated(d), "requests": s.get("allocation.all.allocated", 0),
            "retries": s.get("num_alloc_retries", 0), "reserved": torch.npu.memory_reserved(d)}


def _settled_all(torch, devices, want: dict | None = None) -> dict:
    return _until_settled(lambda: _stats_all(torch, devices), want)


def _reported_failure(torch) -> str:
    """torch_npu's report of a task that failed on its queue, once a synchronisation returned clean: its queue thread
    empties the queue before it sets the failed status, and a synchronisation in between finds nothing wrong
    (docs/facts.md, torch_npu's task queue). So synchronise until one gets the report; the bound is against a hang."""
    hang_bound = time.monotonic() + WAIT_S
    while time.monotonic() < hang_bound:
        try:
            torch.npu.synchronize()
        except Exception as exc:
            return _failure(exc)
        time.sleep(0.01)
    return ""


def _synchronize_all(torch, devices) -> str:
    try:
        for d in devices:
            torch.npu.set_device(d)
            torch.npu.synchronize()
        torch.npu.set_device(0)
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).strip()[:300]}"
    return ""


def _replay(graph, stream, times: int, errors: list) -> int:
    """Replays ``graph`` ``times`` times, then waits for ``stream``; how many replays were made (a failure is
    appended to ``errors``)."""
    replays = 0
    try:
        for _ in range(times):
            graph.replay()
            replays += 1
        stream.synchronize()
    except Exception as exc:
        errors.append(f"replay {replays + 1}: {type(exc).__name__}: {str(exc).strip()[:300]}")
    return replays


def run_capture(torch, so: Launchers, sp: dict, out: dict) -> None:
    """torch.npu.NPUGraph on a stream of its own: a warm-up launch, sp["captured"] launches captured, then
    eager launches with torch.npu.empty_cache() and growth (sp["grow_bytes"] allocated on the stream, and a
    launch) between them, then sp["replays"] replays; the graph deleted at the end."""
    launcher = sp["launchers"][0]
    torch.npu.set_device(0)
    side = torch.npu.Stream()
    stream = side.npu_stream
    # torch_npu's own graph state (the generator's seed and offset, its capture bookkeeping) is made by a first,
    # empty capture: what the judge compares at the end is the launches' memory only.
    warm = torch.npu.NPUGraph()
    with torch.npu.graph(warm, stream=side):
        pass
    del warm
    torch.npu.synchronize()
    HOST.reset()
    before = _settled(torch)
    bufs = [torch.empty(launcher["xnumel"], device="npu", dtype=torch.float32) for _ in range(2)]
    errors, rows = [], []

    def launch(what: str) -> None:
        threw, err = so.call(launcher, bufs, stream)
        rows.append({"thread": 0, "device": 0, "launch": len(rows) + 1, "what": what, "call_threw": threw,
                     "call_error": err[:300]})

    with torch.npu.stream(side):
        launch("warm-up")
    side.synchronize()
    graph = torch.npu.NPUGraph()
    with torch.npu.graph(graph, stream=side):
        for _ in range(sp["captured"]):
            launch("captured")
    step("captured", out)
    captured_tasks = HOST.report()["counters"]["captured_tasks"]
    grown = []
    with torch.npu.stream(side):
        launch("eager, after the capture")
        torch.npu.empty_cache()
        for _ in range(2):  # growth: new segments, a launch with them in use, then given back
            grown.append(torch.empty(sp["grow_bytes"] // 4, device="npu", dtype=torch.float32))
            launch("eager, after growth")
        del grown
        torch.npu.empty_cache()
        launch("eager, after a second empty_cache")
    step("eager launches, empty_cache and growth done", out)
    replays = _replay(graph, side, sp["replays"], errors)
    step("replayed", out)
    sync_error = _synchronize_all(torch, [0])
    del graph
    bufs.clear()
    so.give_back()
    out.update(calls=rows, thread_errors=errors, sync_error=sync_error, memory_before=before,
                  memory_after=_settled(torch, before), host=HOST.report(), replays=replays, captured_tasks=captured_tasks,
                  thread_tids={0: threading.get_native_id()})
    step("scenario done", out)


def _warm_graph(torch, stream=None) -> None:
    """torch_npu's own graph state (the generator's seed and offset, its capture bookkeeping, the default capture
    stream) made by a first, empty capture: what the judge compares at the end is the launches' memory only."""
    warm = torch.npu.NPUGraph()
    with torch.npu.graph(warm, stream=stream):
        pass
    del warm
    torch.npu.synchronize()


def run_graphs(torch, so: Launchers, sp: dict, out: dict) -> None:
    """sp["graphs"] torch.npu.NPUGraph captured one after the other on torch.npu.graph's default capture stream (a
    warm-up launch on it first, then sp["captured"] launches each), then sp["replays"] rounds in which every graph
    is replayed on a stream of its own, all issued before any is waited for (they run at the same time)."""
    launcher = sp["launchers"][0]
    torch.npu.set_device(0)
    _warm_graph(torch)
    capture = torch.npu.graph.default_capture_stream  # one for every torch.npu.graph without stream=
    capture_handle = capture.npu_stream
    replay_streams = [torch.npu.Stream() for _ in range(sp["graphs"])]
    replay_handles = [s.npu_stream for s in replay_streams]
    HOST.reset()
    before = _settled(torch)
    errors, rows, graphs = [], [], []
    bufs = [[torch.empty(launcher["xnumel"], device="npu", dtype=torch.float32) for _ in range(2)]
            for _ in range(sp["graphs"])]

    def launch(what: str, g: int) -> None:
        threw, err = so.call(launcher, bufs[g], capture_handle)
        rows.append({"thread": 0, "device": 0, "launch": len(rows) + 1, "what": what, "call_threw": threw,
                     "call_error": err[:300]})

    for g in range(sp["graphs"]):
        with torch.npu.stream(capture):
            launch(f"graph {g}: warm-up", g)
        capture.synchronize()
        graph = torch.npu.NPUGraph()
        with torch.npu.graph(graph):  # the default capture stream, the graph's own memory pool
            if torch.npu.current_stream().npu_stream != capture_handle:
                errors.append("torch.npu.graph did not capture on its default capture stream")
            for _ in range(sp["captured"]):
                launch(f"graph {g}: captured", g)
        graphs.append(graph)
        del graph  # only ``graphs`` keeps it: deleted at the end, its pool with it
        step(f"graph {g} captured", out)
    captured_tasks = HOST.report()["counters"]["captured_tasks"]
    replays = 0
    try:
        for _ in range(sp["replays"]):
            for g, stream in enumerate(replay_streams):  # issued back to back: both graphs in flight at once
                with torch.npu.stream(stream):
                    graphs[g].replay()
            for stream in replay_streams:
                stream.synchronize()
            replays += 1
    except Exception as exc:
        errors.append(f"replay {replays + 1}: {type(exc).__name__}: {str(exc).strip()[:300]}")
    step("replayed", out)
    sync_error = _synchronize_all(torch, [0])
    graphs.clear()
    bufs.clear()
    so.give_back()
    out.update(calls=rows, thread_errors=errors, sync_error=sync_error, memory_before=before,
               memory_after=_settled(torch, before), host=HOST.report(), replays=replays, captured_tasks=captured_tasks,
               replay_streams=replay_handles, thread_tids={0: threading.get_native_id()})
    step("scenario done", out)


def run_global_capture(torch, so: Launchers, sp: dict, out: dict) -> None:
    """torch.npu.graph on a stream of its own, in its default capture_error_mode ("global"), captures
    sp["captured"] launches while another thread makes sp["eager_during"] eager launches on a second stream (the
    capture ends only once their kernels have run); that thread also launches before and after the capture; then
    sp["replays"] replays."""
    launcher = sp["launchers"][0]
    kernel = launcher["kernel_name"].split()[0]
    torch.npu.set_device(0)
    side, eager = torch.npu.Stream(), torch.npu.Stream()
    _warm_graph(torch, side)
    side_handle, eager_handle = side.npu_stream, eager.npu_stream
    HOST.reset()
    before = _settled(torch)
    errors, rows = [], []
    bufs = [torch.empty(launcher["xnumel"], device="npu", dtype=torch.float32) for _ in range(2)]
    eager_bufs = [torch.empty(launcher["xnumel"], device="npu", dtype=torch.float32) for _ in range(2)]
    phase = {"name": "before"}
    go = {p: threading.Event() for p in ("during", "after", "done")}
    finished = {p: threading.Event() for p in ("before", "during", "after")}
    tids = {0: threading.get_native_id()}

    def launch(what: str, buffers, stream: int, thread: int) -> None:
        threw, err = so.call(launcher, buffers, stream)
        rows.append({"thread": thread, "device": 0, "launch": len(rows) + 1, "what": what, "call_threw": threw,
                     "call_error": err[:300]})

    def eager_thread() -> None:
        try:
            torch.npu.set_device(0)
            tids[1] = threading.get_native_id()
            for p, n in (("before", sp["eager_before"]), ("during", sp["eager_during"]), ("after", sp["eager_after"])):
                if p != "before" and not go[p].wait(WAIT_S):
                    errors.append(f"eager thread: never told to launch {p} the capture")
                    return
                with torch.npu.stream(eager):  # current, as a compiled graph's launches find their stream
                    for _ in range(n):
                        launch(f"eager, {p} the capture", eager_bufs, eager_handle, 1)
                finished[p].set()
        except Exception as exc:
            errors.append(f"eager thread: {type(exc).__name__}: {str(exc).strip()[:300]}")
        finally:
            for e in finished.values():
                e.set()

    def kernels_run() -> int:
        return sum(1 for r in HOST.report()["probe_records"] if r["name"] == kernel)

    other = threading.Thread(target=eager_thread)
    other.start()
    finished["before"].wait(WAIT_S)
    torch.npu.synchronize()
    with torch.npu.stream(side):
        launch("warm-up of the captured launcher", bufs, side_handle, 0)
    side.synchronize()
    seen_before = kernels_run()
    graph = torch.npu.NPUGraph()
    seen_during = 0
    try:
        with torch.npu.graph(graph, stream=side):  # capture_error_mode: torch.npu.graph's default, "global"
            for _ in range(sp["captured"]):
                launch("captured", bufs, side_handle, 0)
            phase["name"] = "during"
            go["during"].set()
            finished["during"].wait(WAIT_S)
            # The eager kernels run while the capture is underway: torch_npu's queue thread launches them on the
            # eager stream, and the host library's stream runs them (within milliseconds; WAIT_S bounds a hang).
            waited_until = time.monotonic() + WAIT_S
            while True:
                seen_during = kernels_run() - seen_before
                if seen_during >= sp["eager_during"] or time.monotonic() > waited_until:
                    break
                time.sleep(0.005)
    except Exception as exc:
        errors.append(f"capture: {_failure(exc, 300)}")
    step("captured", out)
    captured_tasks = HOST.report()["counters"]["captured_tasks"]
    go["after"].set()
    finished["after"].wait(WAIT_S)
    other.join(WAIT_S)
    replays = _replay(graph, side, sp["replays"], errors)
    step("replayed", out)
    sync_error = _synchronize_all(torch, [0])
    del graph
    bufs.clear()
    eager_bufs.clear()
    so.give_back()
    host = HOST.report()
    out.update(calls=rows, thread_errors=errors, sync_error=sync_error, memory_before=before,
               memory_after=_settled(torch, before), host=host, replays=replays, captured_tasks=captured_tasks,
               eager_during_capture=seen_during, eager_stream=eager_handle, thread_tids=tids)
    step("scenario done", out)


_ALLOC_CALLS = ("aclrtMalloc", "aclrtMallocAlign32")


def _call_counts(calls: dict) -> dict:
    """What the launch phase's judge needs of the host library's call accounting: refused device allocations, and
    per thread the device allocations and frees."""
    def threads(names):
        out: dict = {}
        for n in names:
            for tid, k in ((calls.get(n) or {}).get("threads") or {}).items():
                out[tid] = out.get(tid, 0) + k
        return out
    return {"refused": sum((calls.get(n) or {}).get("failed", 0) for n in _ALLOC_CALLS),
            "allocs": threads(_ALLOC_CALLS), "frees": threads(("aclrtFree",))}


def _delta(a: dict, b: dict) -> dict:
    return {"refused": b["refused"] - a["refused"],
            **{k: {t: n - a[k].get(t, 0) for t, n in b[k].items() if n - a[k].get(t, 0)} for k in ("allocs", "frees")}}


def run_oom_fill(torch, so: Launchers, sp: dict, out: dict) -> None:
    """sp["rounds"] rounds, on one launching thread: the device (the host ACL library's, limited by the parent)
    filled with tensors on another stream (requests of sp["fill_bytes"] each, largest first, until torch_npu
    refuses them), the tensors deleted (their blocks stay cached for that stream), then sp["per_round"] launches on
    the default stream, whose first request fits only after the caching allocator's out-of-memory retry; per
    round, what the launches (and their lambdas) refused, allocated and freed, by thread."""
    launcher = sp["launchers"][0]
    torch.npu.set_device(0)
    torch.npu.synchronize()
    so.give_back()
    torch.npu.empty_cache()
    HOST.reset()
    before = _settled(torch)
    errors, rows, phases = [], [], []
    tids: dict = {}

    def launching() -> None:
        try:
            torch.npu.set_device(0)
            tids[0] = threading.get_native_id()
            stream = torch.npu.current_stream().npu_stream
            other = torch.npu.Stream()
            bufs = [torch.empty(launcher["xnumel"], device="npu", dtype=torch.float32) for _ in range(2)]
            for r in range(sp["rounds"]):
                so.give_back()  # the last round's blocks (their kernels finished) cached for the default stream
                held, refusals = [], 0
                with torch.npu.stream(other):
                    for size in sp["fill_bytes"]:
                        while True:
                            try:
                                held.append(torch.empty(size // 4, device="npu", dtype=torch.float32))
                            except Exception:  # torch_npu's out-of-memory error, after its own retry
                                refusals += 1
                                break
                held_bytes = sum(t.numel() * 4 for t in held)
                del held  # cached for `other`: the device is full of them
                in_use = HOST.report()["counters"]["device_memory_in_use"][0]
                calls0, stats0 = _call_counts(HOST.report()["calls"]), _stats(torch)
                for _ in range(sp["per_round"]):
                    threw, what = so.call(launcher, bufs, stream)
                    rows.append({"thread": 0, "device": 0, "launch": len(rows) + 1, "round": r + 1,
                                 "call_threw": threw, "call_error": what[:300]})
                try:
                    torch.npu.synchronize()  # the queue drained: every lambda of the round has run
                except Exception as exc:
                    errors.append(f"round {r + 1}: torch.npu.synchronize(): {_failure(exc, 300)}")
                stats1 = _stats(torch)
                phases.append({"round": r + 1, "filled_bytes": held_bytes, "fill_refusals": refusals,
                               "device_bytes_in_use": in_use,
                               "retries": stats1["retries"] - stats0["retries"],
                               **_delta(calls0, _call_counts(HOST.report()["calls"]))})
                step(f"round {r + 1} done", out)
            del bufs
        except Exception as exc:
            errors.append(f"launching thread: {_failure(exc, 300)}")

    t = threading.Thread(target=launching)
    t.start()
    t.join()
    sync_error = _synchronize_all(torch, [0])
    so.give_back()
    out.update(calls=rows, thread_errors=errors, sync_error=sync_error, memory_before=before,
               memory_after=_settled(torch, before), host=HOST.report(), thread_tids=tids, launch_phases=phases)
    step("scenario done", out)


def _pause_arm(functions: bytes, after: bool, limit_s: float = WAIT_S) -> int:
    """The calling thread's next call of one of ``functions`` stops until released, or ``limit_s`` has passed."""
    HOST.lib.acl_host_pause_arm.restype = ctypes.c_uint64
    HOST.lib.acl_host_pause_arm.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_uint32]
    return HOST.lib.acl_host_pause_arm(functions, int(after), int(limit_s * 1000))


def _paused(box: dict, thread: threading.Thread) -> bool:
    """Whether ``thread`` armed its pause (its id put in ``box["pause"]``) and reached it."""
    deadline = time.perf_counter() + WAIT_S
    while "pause" not in box and thread.is_alive() and time.perf_counter() < deadline:
        time.sleep(0.001)
    return "pause" in box and _pause_reached(box["pause"])


def _pause_reached(pid: int, wait_s: float = WAIT_S) -> bool:
    HOST.lib.acl_host_pause_reached.argtypes = [ctypes.c_uint64, ctypes.c_uint32]
    return HOST.lib.acl_host_pause_reached(pid, int(wait_s * 1000)) == 1


def _pause_release(pid: int) -> int:
    HOST.lib.acl_host_pause_release.argtypes = [ctypes.c_uint64]
    return HOST.lib.acl_host_pause_release(pid)



def run_interleave(torch, so: Launchers, sp: dict, out: dict) -> None:
    """sp["rounds"] rounds of two threads on the default stream (TASK_QUEUE_ENABLE=0: each lambda runs on its
    caller), their launches interleaved by construction: thread 0's launch stops at its ACL launch call, its lock
    fills made (a pause of the host ACL library); thread 1 makes a whole launch; then thread 0's launch goes on. On
    the stream: thread 0's fills, thread 1's fills and kernel, thread 0's kernel, which finds its locks as its own
    fills left them only if thread 1's fills and kernel were on memory of their own."""
    launcher = sp["launchers"][0]
    torch.npu.set_device(0)
    stream = torch.npu.current_stream().npu_stream
    torch.npu.synchronize()
    so.give_back()
    HOST.reset()
    before = _settled(torch)
    errors, rows, windows = [], [], []
    tids: dict = {}
    go = [threading.Event() for _ in range(sp["rounds"])]
    paused = [threading.Event() for _ in range(sp["rounds"])]
    pauses: dict = {}

    def launching(t: int) -> None:
        try:
            torch.npu.set_device(0)
            tids[t] = threading.get_native_id()
            bufs = [torch.empty(launcher["xnumel"], device="npu", dtype=torch.float32) for _ in range(2)]
            for r in range(sp["rounds"]):
                if t == 0:
                    pauses[r] = _pause_arm(b"aclrtLaunchKernelWithHostArgs", after=False)
                    paused[r].set()
                elif not go[r].wait(WAIT_S):
                    errors.append(f"thread 1: never told to launch in round {r + 1}")
                    return
                threw, err = so.call(launcher, bufs, stream)
                rows.append({"thread": t, "device": 0, "launch": len(rows) + 1, "round": r + 1,
                             "call_threw": threw, "call_error": err[:300]})
                if t == 1:
                    _pause_release(pauses[r])
            del bufs
        except Exception as exc:
            errors.append(f"thread {t}: {_failure(exc, 300)}")
        finally:
            for e in (*go, *paused):
                e.set()

    threads = [threading.Thread(target=launching, args=(t,)) for t in range(2)]
    for th in threads:
        th.start()
    for r in range(sp["rounds"]):
        paused[r].wait(WAIT_S)
        reached = r in pauses and _pause_reached(pauses[r])
        windows.append({"round": r + 1, "paused": reached})
        go[r].set()
    for th in threads:
        th.join()
    sync_error = _synchronize_all(torch, [0])
    so.give_back()
    out.update(calls=rows, thread_errors=errors, sync_error=sync_error, memory_before=before,
               memory_after=_settled(torch, before), host=HOST.report(), thread_tids=tids, windows=windows)
    step("scenario done", out)


def _stream_hold(stream: int) -> int:
    HOST.lib.acl_host_stream_hold.restype = ctypes.c_uint64
    HOST.lib.acl_host_stream_hold.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    return HOST.lib.acl_host_stream_hold(stream, int(WAIT_S * 1000))


def _stream_release(hold: int) -> int:
    HOST.lib.acl_host_stream_release.argtypes = [ctypes.c_uint64]
    return HOST.lib.acl_host_stream_release(hold)


def _fresh(torch, so: Launchers) -> dict:
    """The device idle, the kept blocks and torch_npu's cache given back, the host ACL library's records reset:
    what the scenario's memory is measured against."""
    torch.npu.synchronize()
    so.give_back()
    torch.npu.empty_cache()
    HOST.reset()
    return _settled(torch)


#: What torch_npu's device synchronisation calls (2.7.1 and 2.13.0: the one with a timeout).
SYNCHRONIZE_DEVICE = b"aclrtSynchronizeDevice,aclrtSynchronizeDeviceWithTimeout"


def run_empty_cache_window(torch, so: Launchers, sp: dict, out: dict) -> None:
    """sp["rounds"] rounds, each on a stream of its own: another thread's torch_npu emptyCache (a
    ctypes call) stops as its device synchronisation returns (a pause of the host ACL library), before it frees
    what the allocator caches; the stream held (a kernel of the host ACL library's own waits on it), so that
    what is launched now stays pending; a launching thread (a new one each round) makes a launch (8 MiB: a segment
    of its own, nothing being cached at the round's start) and one needing a block sp["grow"] times larger, which
    replaces the first one's; then the other thread's emptyCache goes on and frees what is cached (a dropped
    tensor's segment at least), or stops before it waits for an allocator event (the replaced block's, behind the
    held kernels), and only then does the stream run: the first kernel finds its memory live only if its block
    never became free in the cache while it was pending."""
    launcher = sp["launchers"][0]
    larger = dict(launcher, xnumel=launcher["xnumel"] * sp["grow"])
    torch.npu.set_device(0)
    before = _fresh(torch, so)
    bufs = [torch.empty(launcher["xnumel"] * sp["grow"], device="npu", dtype=torch.float32) for _ in range(2)]
    rows, errors, windows, tids = [], [], [], {}
    for r in range(sp["rounds"]):
        box: dict = {}
        armed = threading.Event()

        def emptying(box: dict = box, armed: threading.Event = armed) -> None:
            try:
                torch.npu.set_device(0)
                box["pause"] = _pause_arm(SYNCHRONIZE_DEVICE, after=True)
                # and later, before it waits for an allocator event (one behind a block handed back with a use)
                box["event_pause"] = _pause_arm(b"aclrtSynchronizeEvent", after=False)
                armed.set()
                box["error"] = so.empty_cache()
            except Exception as exc:
                box["error"] = _failure(exc, 300)
            finally:
                armed.set()

        def launching(t: int, side) -> None:
            try:
                torch.npu.set_device(0)
                tids[t] = threading.get_native_id()
                with torch.npu.stream(side):
                    for what, ln in (("8 MiB", launcher), (f"x{sp['grow']}: its block replaces the first", larger)):
                        # side.npu_stream: torch_npu's NPUStream::stream() empties the task queue first, so with the
                        # queue on the first launch's lambda has run (its kernel pending) before the second launch
                        threw, err = so.call(ln, bufs, side.npu_stream)
                        rows.append({"thread": t, "device": 0, "launch": len(rows) + 1, "round": t + 1, "what": what,
                                     "call_threw": threw, "call_error": err[:300]})
            except Exception as exc:
                errors.append(f"launching thread {t}: {_failure(exc, 300)}")

        torch.npu.synchronize()  # nothing cached: the first launch's block is a segment of its own
        so.give_back()
        torch.npu.empty_cache()
        other = threading.Thread(target=emptying)
        other.start()
        armed.wait(WAIT_S)
        reached = "pause" in box and _pause_reached(box["pause"])
        side = torch.npu.Stream()  # a stream of the round's own: nothing kept for it (thread ids may be reused)
        hold = _stream_hold(side.npu_stream)
        th = threading.Thread(target=launching, args=(r, side))
        th.start()
        th.join()
        scratch = torch.empty(24 << 20, device="npu", dtype=torch.uint8)  # a segment the emptyCache frees in any case
        del scratch
        if "pause" in box:
            _pause_release(box["pause"])
        # The emptyCache now either frees what is cached and returns, or first waits for an allocator event behind
        # the held kernels (the replaced block went back with its stream as a use): it stops before that wait. Either
        # way the kernels are still pending here; then the stream runs, and the emptyCache goes on.
        waited = False
        while other.is_alive() and "event_pause" in box and not waited:
            waited = _pause_reached(box["event_pause"], 0.05)
        held = _stream_release(hold) == 1 if hold else False  # the kernels were still pending until here
        if "event_pause" in box:
            _pause_release(box["event_pause"])
        other.join()
        if box.get("error"):
            errors.append(f"round {r + 1}: the other thread's emptyCache threw: {box['error']}")
        torch.npu.synchronize()
        windows.append({"round": r + 1, "paused": bool(reached), "held": held, "hold": hold,
                        "empty_cache_waited_for_an_event": waited})
        step(f"round {r + 1} done", out)
    sync_error = _synchronize_all(torch, [0])
    bufs.clear()
    so.give_back()
    out.update(calls=rows, thread_errors=errors, sync_error=sync_error, memory_before=before,
               memory_after=_settled(torch, before), host=HOST.report(), thread_tids=tids, windows=windows)
    step("scenario done", out)


def run_queue_stops(torch, so: Launchers, sp: dict, out: dict) -> None:
    """TASK_QUEUE_ENABLE=1, the default stream: sp["before_fault"] launches; then one whose ACL launch the host
    ACL library fails (an injected fault: its lambda returns the code on torch_npu's queue thread), reported by
    the synchronisation that follows (torch_npu's queue: ERROR_EXIT, then CAN_EXIT, where it drops every later
    task); then sp["after_fault"] launches more, whose lambdas never run; then a synchronisation. No hang, and
    memory stays bounded: what is still allocated at the end is compared with one launch's block."""
    launcher = sp["launchers"][0]
    torch.npu.set_device(0)
    stream = torch.npu.current_stream().npu_stream
    before = _fresh(torch, so)
    bufs = [torch.empty(launcher["xnumel"], device="npu", dtype=torch.float32) for _ in range(2)]
    rows: list = []

    def launch(what: str) -> None:
        threw, err = so.call(launcher, bufs, stream)
        rows.append({"thread": 0, "device": 0, "launch": len(rows) + 1, "what": what, "call_threw": threw,
                     "call_error": err[:300]})

    for _ in range(sp["before_fault"]):
        launch("before the fault")
    torch.npu.synchronize()
    block = _stats(torch)["allocated"] - before["allocated"]  # one launch's block, still held by the rule
    HOST.lib.acl_host_inject_fault.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_int]
    injected = HOST.lib.acl_host_inject_fault(sp["launch_api"].encode(), 1, sp["fault_code"])
    launch("its ACL launch fails in the lambda")
    # torch_npu's queue thread empties the queue before it sets the failed status: a synchronisation that comes
    # between the two returns clean, and the first call to reach the queue after it gets the report (facts.md).
    report, reported_by = "", ""
    try:
        torch.npu.synchronize()
    except Exception as exc:
        report, reported_by = _failure(exc, 300), "the synchronisation after it"
    step("the failure reported", out)
    for _ in range(sp["after_fault"]):
        launch("after torch_npu's queue stopped")
        if not report and rows[-1]["call_threw"]:
            report, reported_by = rows[-1]["call_error"], f"launch {rows[-1]['launch']}"
            rows[-1]["reports_the_failure"] = True
    step("launched after the failure", out)
    sync_error = _synchronize_all(torch, [0])
    if not report and sync_error:
        report, reported_by, sync_error = sync_error, "the last synchronisation", ""
    so.give_back()
    out.update(calls=rows, thread_errors=[], sync_error=sync_error, memory_before=before,
               memory_after=_settled(torch, before), host=HOST.report(), thread_tids={0: threading.get_native_id()},
               fault_injected=injected == 0, fault_report=report, fault_reported_by=reported_by,
               block_bytes=block)
    step("scenario done", out)


def run_eager_capture(torch, so: Launchers, sp: dict, out: dict) -> None:
    """One stream of its own, current throughout: an eager launch (its block kept), sp["captured"] launches
    captured with torch.npu.graph on it, an eager launch needing a block sp["grow"] times larger (which replaces
    the kept one), torch.npu.empty_cache(), then sp["replays"] replays: the captured kernels must run on memory
    the graph holds, never on the eager block the larger launch replaced and empty_cache freed."""
    launcher = sp["launchers"][0]
    larger = dict(launcher, xnumel=launcher["xnumel"] * sp["grow"])
    torch.npu.set_device(0)
    side = torch.npu.Stream()
    stream = side.npu_stream
    _warm_graph(torch, side)
    before = _fresh(torch, so)
    bufs = [torch.empty(launcher["xnumel"] * sp["grow"], device="npu", dtype=torch.float32) for _ in range(2)]
    errors, rows = [], []

    def launch(ln: dict, what: str) -> None:
        threw, err = so.call(ln, bufs, stream)
        rows.append({"thread": 0, "device": 0, "launch": len(rows) + 1, "what": what, "call_threw": threw,
                     "call_error": err[:300]})

    with torch.npu.stream(side):
        launch(launcher, "eager")
    graph = torch.npu.NPUGraph()
    with torch.npu.graph(graph, stream=side):
        for _ in range(sp["captured"]):
            launch(launcher, "captured")
    step("captured", out)
    captured_tasks = HOST.report()["counters"]["captured_tasks"]
    with torch.npu.stream(side):
        launch(larger, f"eager, x{sp['grow']}")
    side.synchronize()
    so.give_back()  # what a cache miss's callback would do: blocks whose kernels finished go back
    torch.npu.empty_cache()
    step("eager launches and empty_cache done", out)
    replays = _replay(graph, side, sp["replays"], errors)
    step("replayed", out)
    sync_error = _synchronize_all(torch, [0])
    del graph
    bufs.clear()
    so.give_back()
    out.update(calls=rows, thread_errors=errors, sync_error=sync_error, memory_before=before,
               memory_after=_settled(torch, before), host=HOST.report(), replays=replays, captured_tasks=captured_tasks,
               thread_tids={0: threading.get_native_id()})
    step("scenario done", out)


def run_pressure(torch, so: Launchers, sp: dict, out: dict) -> None:
    """Launch memory when torch_npu's allocator needs it (issues 47, 53): the device (the host ACL library's) limited
    to sp["device_bytes"]; one launching thread on its default stream makes sp["per_thread"] launches needing sp["grow"]
    times the scenario kernel's 8 MiB (variant "replaced": one at 8 MiB first, whose block the larger one replaces);
    then a tensor of sp["tensor_bytes"] that fits only if the launch memory goes back: allocated at the first call, or
    refused (torch_npu's out-of-memory error, after its own retry). The launching thread is alive and idle meanwhile,
    or has ended (variant "ended"). The device is synchronised first (every kernel finished), except in variant
    "queued": torch_npu's queue held while the launches are made, the tensor asked for by another thread with their
    lambdas still queued (its cache miss asks the helper's callback then; the host ACL library stops it after the
    allocator's first refused device allocation, and only then is the queue let go, which its out-of-memory retry
    waits for). Variant "capture": the launches are an eager warm-up, and the tensor is a launch of the same kernel
    captured with torch.npu.graph on a stream of its own, which synchronises and empties the cache as it starts; during
    the capture torch_npu's allocator neither retries nor takes a block back. Variant "history": memory history on
    (torch.npu.memory._record_memory_history() as documented: every free gathers its Python stack, which takes the
    GIL); the launching thread, GIL released as a compiled graph's, makes the 8 MiB launch and then the larger one,
    whose cache miss stops (a pause of HISTORY_HOLD_S) holding the allocator's mutex, in the helper's hand-back or in
    the device allocation after it; meanwhile another thread takes a memory snapshot, as one debugging memory does
    (torch_npu's binding waits for that mutex with the GIL held), then, once the launches were made, asks for the
    tensor. A free under the mutex on the GIL-less thread deadlocks both (torch_npu gathers "outside of mutex")."""
    launcher, variant = sp["launchers"][0], sp["variant"]
    larger = dict(launcher, xnumel=launcher["xnumel"] * sp["grow"])
    torch.npu.set_device(0)
    before = _fresh(torch, so)
    bufs = [torch.empty(larger["xnumel"], device="npu", dtype=torch.float32) for _ in range(2)]
    HOST.lib.acl_host_set_device_memory.argtypes = [ctypes.c_int, ctypes.c_uint64]
    HOST.lib.acl_host_set_device_memory(0, sp["device_bytes"])
    rows, errors, tids = [], [], {}
    launched, done = threading.Event(), threading.Event()
    # read before the queue is held: NPUStream::stream() empties torch_npu's queue first (the default stream: the same
    # for every thread of the device)
    stream = torch.npu.current_stream().npu_stream
    gate = so.gate_close() if variant == "queued" else ""
    held: dict = {}
    if variant == "history":
        torch.npu.memory._record_memory_history()

    def launching() -> None:
        try:
            torch.npu.set_device(0)
            tids[0] = threading.get_native_id()
            plan = [("8 MiB", launcher)] if variant in ("replaced", "history") else []
            plan += [(f"x{sp['grow']}", larger)] * sp["per_thread"]
            for what, ln in plan:
                if variant == "history" and ln is larger:  # the launch's cache miss stops, the allocator's mutex held
                    held["pause"] = _pause_arm(HISTORY_PAUSE, after=False, limit_s=HISTORY_HOLD_S)
                threw, err = so.call(ln, bufs, stream)
                rows.append({"thread": 0, "device": 0, "launch": len(rows) + 1, "what": what, "call_threw": threw,
                             "call_error": err[:300]})
        except Exception as exc:
            errors.append(f"launching thread: {_failure(exc, 300)}")
        finally:
            launched.set()
        if variant != "ended":
            done.wait(WAIT_S)  # alive and idle until the tensor was asked for

    stats0 = torch.npu.memory_stats(0)
    th = threading.Thread(target=launching)
    th.start()
    if variant == "history":
        held["paused"] = _paused(held, th)
    else:
        launched.wait(WAIT_S)
    if variant == "ended":
        th.join()
    if variant not in ("queued", "history"):
        torch.npu.synchronize()  # every launch's kernel has finished
    in_use = HOST.report()["counters"]["device_memory_in_use"][0]
    box: dict = {"allocated": False, "error": ""}

    def asking() -> None:
        try:
            torch.npu.set_device(0)
            if variant == "queued":
                box["pause"] = _pause_arm(b"aclrtMallocAlign32", after=True)
            if variant == "history":
                torch.npu.memory._snapshot()  # waits for the allocator's mutex, which the launch's miss holds, GIL held
                launched.wait(WAIT_S)
            if variant == "capture":
                side, graph = torch.npu.Stream(), torch.npu.NPUGraph()
                with torch.npu.graph(graph, stream=side):
                    threw, err = so.call(larger, bufs, side.npu_stream)
                rows.append({"thread": 1, "device": 0, "launch": len(rows) + 1, "what": f"x{sp['grow']}, captured",
                             "call_threw": threw, "call_error": err[:300]})
                if threw:
                    raise RuntimeError(err)
                graph.replay()
                torch.npu.synchronize()
                del graph
            else:
                tensor = torch.empty(sp["tensor_bytes"], device="npu", dtype=torch.uint8)
                del tensor
            box["allocated"] = True
        except Exception as exc:
            box["error"] = _failure(exc, 400)

    asker = threading.Thread(target=asking)
    asker.start()
    window = {}
    if variant == "queued":
        # the allocator's first device allocation was refused: its callbacks ran with the lambdas still queued
        window = {"gate": gate, "paused": _paused(box, asker)}
        if "pause" in box:
            _pause_release(box["pause"])
        so.gate_open()
    asker.join()
    allocated, error = box["allocated"], box["error"]
    stats1 = torch.npu.memory_stats(0)
    done.set()
    th.join()
    if variant == "history":
        torch.npu.memory._record_memory_history(enabled=None)
        window = {"paused": held.get("paused", False)}
    HOST.lib.acl_host_set_device_memory(0, 0)
    sync_error = _synchronize_all(torch, [0])
    bufs.clear()
    so.give_back()
    torch.npu.empty_cache()  # the blocks given back waited for events of torch_npu's allocator
    out.update(calls=rows, thread_errors=errors, sync_error=sync_error, memory_before=before,
               memory_after=_settled(torch, before), host=HOST.report(), thread_tids=tids, window=window,
               user_tensor={"bytes": sp["tensor_bytes"], "device_bytes": sp["device_bytes"],
                            "device_bytes_in_use": in_use, "allocated": allocated, "error": error,
                            **{k: stats1.get(k, 0) - stats0.get(k, 0) for k in ("num_alloc_retries", "num_ooms")}})
    step("scenario done", out)


def run_pluggable(torch, so: Launchers, sp: dict, out: dict) -> None:
    """Under the pluggable allocator main() installed (no memory, and no error, for requests of 1 MiB and more): one
    launch of the 8 MiB scenario kernel, which must be refused on the calling thread (the helper's error), nothing
    queued. torch_npu's memory statistics are the caching allocator's: not read here."""
    launcher = sp["launchers"][0]
    torch.npu.set_device(0)
    HOST.reset()
    bufs = [torch.empty(launcher["xnumel"], device="npu", dtype=torch.float32) for _ in range(2)]
    threw, err = so.call(launcher, bufs, torch.npu.current_stream().npu_stream)
    sync_error = _synchronize_all(torch, [0])
    bufs.clear()
    out.update(calls=[{"thread": 0, "device": 0, "launch": 1, "what": "8 MiB under the pluggable allocator",
                       "call_threw": threw, "call_error": err[:300], "expected_refusal": True}],
               thread_errors=[], sync_error=sync_error, host=HOST.report(), refusal={"threw": threw, "error": err[:300]})
    step("scenario done", out)


RUNNERS = {"scenario": run_scenario, "capture": run_capture, "graphs": run_graphs,
           "global-capture": run_global_capture, "oom-fill": run_oom_fill, "interleave": run_interleave,
           "empty-cache-window": run_empty_cache_window, "queue-stops": run_queue_stops,
           "eager-capture": run_eager_capture, "pressure": run_pressure,
           "pluggable": run_pluggable}


if __name__ == "__main__":
    faulthandler.enable()
    PROGRESS.run(main)
