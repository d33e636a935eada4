"""The real-runtime benchmark's subprocess: a released torch_npu, over the host ACL library, times launchers.

NEVER imported by the project: ``real_runtime_bench.py`` starts it as ``python -P real_runtime_bench_child.py
SPEC.json`` in the environment ``host_runtime.subprocess_env`` makes (the wheel on PYTHONPATH, the host ACL library
on LD_LIBRARY_PATH: a TEST DOUBLE of CANN, only ever loaded into this subprocess). It imports torch and the wheel's
torch_npu only; it loads two shared objects with ctypes: the benchmark's helper (``real_runtime_bench.HELPER_SOURCE``:
a timed call loop, and a counting pass-through of torch_npu's exported ``allocate_workspace``, loaded before torch
so that it comes first in the global symbol scope) and the launchers (``real_runtime.entries_source``: one C entry
per rendered launcher, and the gate that holds torch_npu's task queue). It writes one JSON object to ``out``.

Per launcher and round (launchers in a rotating order, so that every cell is measured between the others):

* free run: ``launches`` calls back to back on the default stream (the task queue running, as in a compiled
  graph), then ``torch.npu.synchronize()``: host ns of each call on the calling thread, launches per second
  (first call to the device's end), torch_npu's caching-allocator requests (``allocation.all.allocated``) and
  live-allocation peak, the workspace allocator's calls (the pass-through), the host heap allocations the calling
  thread made in the calls (``heap_count.py``'s shim; torch_npu's own included), the host ACL library's call counts
  (which function, which thread), its error reports and a digest of the probe kernel's records;
* gated run: torch_npu's queue held by a task of the gate, ``gated`` calls queued behind it, the gate opened and
  the time until the queue thread reaches the next gate: the queue thread's time per lambda, back to back.

After the rounds, for the launchers the spec names in ``held_keys`` (a cell whose verdict needs a kernel still running
while the next launch's lambda runs: ``real_runtime_bench_cells.HELD_CHECK``), a held check, timed by nothing: the
stream held by the host ACL library (``acl_host_stream_hold``), ``held_launches`` calls, the queue thread through
all of their lambdas (it reaches a gate behind them), then the hold released. Every lambda has run before any of
their kernels starts, on any machine and at any load: what a lambda writes while the kernel before is still running
is seen by construction, not by how fast the queue thread is.
"""
from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time

SPEC = json.load(open(sys.argv[1]))
RESULT: dict = {"steps": [], "done": False, "batches": []}
ENTRY_ARGS = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p, ctypes.c_char_p,
              ctypes.c_char_p, ctypes.c_size_t]
#: The probe record's fields that decide its verdict (pointers and launch ids differ in every record).
_DIGEST_DROP = ("launch_id", "captured_launch_id", "stream", "lock_ptr", "workspace_ptr", "lock_extent",
                "workspace_extent")
#: A stream hold's own bound (ms): it only ends a hang; the check releases the hold long before.
HOLD_LIMIT_MS = 60000
sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # last: only child_watch.py is taken from there
import child_watch  # noqa: E402  (the result file and the stall watchdog, shared with the real-runtime child)

PROGRESS = child_watch.Progress(SPEC["out"], RESULT, SPEC["import_bound_s"])
save = PROGRESS.save


def step(what: str) -> None:
    RESULT["steps"].append(what)
    save()


def thread_cpu_ns(tid: int) -> int:
    """CPU time a thread of this process has run, in ns (the kernel's schedstat)."""
    try:
        with open(f"/proc/self/task/{tid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def named_total(breakdown: str, obj: str | None = None) -> int:
    """Calls a heap breakdown ("libtorch_npu.so 5, own.so 1") names: all of them, or those of shared object ``obj``."""
    parts = (p.rsplit(" ", 1) for p in breakdown.split(", ") if p)
    return sum(int(n) for name, n in parts if obj is None or name == obj)


def digest(records: list) -> list:
    """The probe records with what decides a verdict in common, once each, with how many there were; the first of
    each kept whole (with ``ptr - base`` and the extents, which the judge reads)."""
    seen: dict = {}
    for r in records:
        key = json.dumps({k: v for k, v in r.items() if k not in _DIGEST_DROP}, sort_keys=True)
        if key in seen:
            seen[key]["count"] += 1
        else:
            seen[key] = {"count": 1, "record": r}
    return list(seen.values())[:8]


def main() -> None:
    PROGRESS.watch()  # a hang ends here (exit 3) with what was measured so far: on a stall, never on total time
    # A sleep of the probe kernel (its simulated run time) is otherwise stretched by the default 50 us timer slack;
    # threads started later (torch_npu's queue, the host ACL library's stream workers) inherit this.
    libc = ctypes.CDLL(None)
    RESULT["timer_slack_set"] = libc.prctl(29, 1, 0, 0, 0) == 0  # PR_SET_TIMERSLACK, 1 ns
    helper = ctypes.CDLL(SPEC["helper_so"], mode=os.RTLD_GLOBAL)  # first in the global scope (see the docstring)
    helper.bench_calls.restype = ctypes.c_int
    helper.bench_calls.argtypes = [ctypes.c_void_p, ctypes.c_int, *ENTRY_ARGS[:-2], ctypes.POINTER(ctypes.c_int64),
                                   ctypes.c_char_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_int64)]
    helper.bench_heap_known.restype = ctypes.c_int64
    helper.bench_heap_known.argtypes = [ctypes.c_int]
    helper.bench_heap_by_object.restype = None
    helper.bench_heap_by_object.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    helper.bench_workspace_calls.restype = ctypes.c_uint64
    t0 = time.perf_counter()
    import torch

    import torch_npu  # noqa: F401  (the wheel's own)

    torch.npu.set_device(0)
    RESULT.update(torch=torch.__version__, torch_npu=torch_npu.__version__, import_s=round(time.perf_counter() - t0, 2),
                  task_queue=os.environ.get("TASK_QUEUE_ENABLE"))
    host = ctypes.CDLL(os.environ.get("ACL_HOST_LIBRARY") or SPEC["host_library"], mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
    host.acl_host_report_json.restype = ctypes.c_char_p
    host.acl_host_reset.restype = None
    so = ctypes.CDLL(SPEC["so"])
    so.npu_patchset_real_runtime_gate_close.restype = ctypes.c_int
    so.npu_patchset_real_runtime_gate_close.argtypes = [ctypes.c_int]
    so.npu_patchset_real_runtime_gate_open.restype = None
    so.npu_patchset_real_runtime_queue_tid.restype = ctypes.c_longlong
    PROGRESS.arm(SPEC["stall_s"])  # the spec's import_bound_s until here; the child's own work from here
    step("imported torch_npu, loaded the helper and the launchers")

    def report() -> dict:
        return json.loads(host.acl_host_report_json().decode())

    stream = torch.npu.current_stream().npu_stream  # once: NPUStream::stream() drains the task queue
    caller = threading.get_native_id()
    cubin = SPEC["cubin_dir"].encode()
    err = ctypes.create_string_buffer(4096)
    launchers = SPEC["launchers"]
    fns = {ln["key"]: ctypes.cast(getattr(so, ln["entry"]), ctypes.c_void_p).value for ln in launchers}
    bufs = {ln["key"]: [torch.empty(ln["xnumel"], device="npu", dtype=torch.float32) for _ in range(2)]
            for ln in launchers}
    in_flight = min(2 * max(SPEC["launches"], SPEC["gated"]), SPEC.get("in_flight_max", 4000))  # warm-up (below)
    most = max(SPEC["launches"], SPEC["gated"], SPEC["warmup"], in_flight, 1)
    ns = (ctypes.c_int64 * most)()
    heap = ctypes.c_int64(-1)

    def hand_back_kept() -> None:
        # The kept blocks go back as at a cache miss: with their stream recorded as a use, so torch_npu's allocator
        # records an event behind each (a task on its queue); a synchronisation and one request of its own make the
        # allocator reach and query those events here, not in the batch that follows.
        torch.npu.synchronize()
        so.npu_patchset_real_runtime_give_back()
        torch.npu.synchronize()
        torch.empty(1, device="npu")  # its malloc processes the allocator's completed events first

    def calls(ln: dict, n: int) -> int:
        b = bufs[ln["key"]]
        return helper.bench_calls(fns[ln["key"]], n, b[0].data_ptr(), b[1].data_ptr(), ln["xnumel"], 0, stream, cubin,
                                  ns, err, len(err), ctypes.byref(heap))

    # The heap counter on allocations of a known number (heap_count.py): 5000 mallocs and one operator new counted,
    # another thread's 5000 not; and its breakdown by caller names all 5001 (a breakdown that once kept only 4096
    # callers understated the launchers' own share of every long batch, unseen by a short run).
    counted = helper.bench_heap_known(5000)
    helper.bench_heap_by_object(err, len(err))
    RESULT["heap_known"] = {"made": 5001, "counted": counted, "named": named_total(err.value.decode(errors="replace"))}

    # What a bare synchronize calls (subtracted from each free run's counts).
    torch.npu.synchronize()
    host.acl_host_reset()
    torch.npu.synchronize()
    RESULT["synchronize_calls"] = {k: v["calls"] for k, v in report().get("calls", {}).items()}
    failed: dict = {}
    for ln in launchers:  # warm-up: the kernel loaded, the allocator's segments made
        if calls(ln, SPEC["warmup"]):
            failed[ln["key"]] = err.value.decode(errors="replace")
        torch.npu.synchronize()
    if so.npu_patchset_real_runtime_gate_close(10000) != 1:
        raise RuntimeError("torch_npu's task queue could not be held (TASK_QUEUE_ENABLE must be 1)")
    so.npu_patchset_real_runtime_gate_open()
    queue_tid = so.npu_patchset_real_runtime_queue_tid()
    # More launches in flight at once than a run will have (queued behind a held gate), then a free run as measured:
    # what a launcher keeps per launch in flight (the helper's records of held blocks) is made here, not counted in
    # the first batch.
    for ln in (x for x in launchers if x["key"] not in failed):
        torch.npu.synchronize()
        if so.npu_patchset_real_runtime_gate_close(10000) == 1:
            calls(ln, in_flight)
            so.npu_patchset_real_runtime_gate_open()
        torch.npu.synchronize()
        calls(ln, SPEC["launches"])
        torch.npu.synchronize()
    RESULT.update(caller_tid=caller, queue_tid=queue_tid, warmup_failed=failed)
    step("warmed up")

    for rnd in range(SPEC["rounds"]):
        shift = rnd % len(launchers)
        for ln in launchers[shift:] + launchers[:shift]:
            if ln["key"] in failed:
                continue
            n, m = SPEC["launches"], SPEC["gated"]
            # the blocks an earlier batch left held go back first: the peak is this batch's
            hand_back_kept()
            host.acl_host_reset()
            torch.npu.reset_peak_memory_stats(0)
            s0 = torch.npu.memory_stats(0)
            ws0, q0, c0 = helper.bench_workspace_calls(), thread_cpu_ns(queue_tid), thread_cpu_ns(caller)
            t0 = time.perf_counter_ns()
            bad = calls(ln, n)
            t1 = time.perf_counter_ns()
            heap_n = heap.value
            sync_error = ""
            try:
                torch.npu.synchronize()
            except Exception as exc:  # torch_npu's queue reports a failed task here
                sync_error = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
            t2 = time.perf_counter_ns()
            # who made the calls' heap allocations (after t2: naming them takes time), the launchers' own code (the
            # rendered launcher, the helper inlined in it) apart from torch_npu's
            heap_by = ""
            if not bad:
                helper.bench_heap_by_object(err, len(err))
                heap_by = err.value.decode(errors="replace")
            # the launchers' own count only from a breakdown that names every counted call
            own = os.path.basename(SPEC["so"])
            heap_launchers = (named_total(heap_by, own) if heap_n >= 0 and not bad and named_total(heap_by) == heap_n
                              else None)
            q1, c1, ws1 = thread_cpu_ns(queue_tid), thread_cpu_ns(caller), helper.bench_workspace_calls()
            s1 = torch.npu.memory_stats(0)
            rep = report()
            call_ns = sorted(ns[i] for i in range(n))
            batch = {
                "key": ln["key"], "round": rnd, "launches": n, "failed_calls": bad,
                "call_error": err.value.decode(errors="replace") if bad else "", "sync_error": sync_error,
                "call_ns_median": call_ns[n // 2], "call_ns_mean": sum(call_ns) / n, "call_ns_p90": call_ns[(9 * n) // 10],
                "enqueue_s": (t1 - t0) / 1e9, "wall_s": (t2 - t0) / 1e9, "queue_cpu_ns": q1 - q0, "caller_cpu_ns": c1 - c0,
                "caching_requests": s1.get("allocation.all.allocated", 0) - s0.get("allocation.all.allocated", 0),
                "peak_live_allocations": s1.get("allocation.all.peak", 0) - s0.get("allocation.all.current", 0),
                "peak_live_bytes": s1.get("allocated_bytes.all.peak", 0) - s0.get("allocated_bytes.all.current", 0),
                "workspace_calls": ws1 - ws0, "heap_allocations": heap_n, "heap_by_object": heap_by,
                "heap_in_launchers": heap_launchers,
                "calls": {k: {"calls": v["calls"], "threads": v.get("threads", {})} for k, v in rep.get("calls", {}).items()},
                "counters": rep.get("counters", {}), "errors": rep.get("errors", [])[:5],
                "error_count": len(rep.get("errors", [])), "missing_calls": rep.get("missing_calls", {}),
                "probe_count": len(rep.get("probe_records", [])), "probe_digest": digest(rep.get("probe_records", [])),
            }
            # Gated: the queue held, m launches queued behind the gate, then the queue thread's time through them.
            torch.npu.synchronize()
            if so.npu_patchset_real_runtime_gate_close(10000) == 1:
                bad_g = calls(ln, m)
                gated_call = sorted(ns[i] for i in range(m))
                g0 = time.perf_counter_ns()
                so.npu_patchset_real_runtime_gate_open()
                reached = so.npu_patchset_real_runtime_gate_close(600000)
                g1 = time.perf_counter_ns()
                so.npu_patchset_real_runtime_gate_open()
                batch.update(gated=m, gated_failed=bad_g, gated_reached=reached == 1,
                             queue_ns_per_launch=(g1 - g0) / m, gated_call_ns_median=gated_call[m // 2])
            try:
                torch.npu.synchronize()
            except Exception as exc:
                batch["sync_error"] = batch["sync_error"] or f"{type(exc).__name__}: {str(exc)[:300]}"
            RESULT["batches"].append(batch)
            save()
    step("measured")

    # The held check (see the docstring): never part of a batch, so no timed figure includes it.
    host.acl_host_stream_hold.restype = ctypes.c_uint64
    host.acl_host_stream_hold.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
    host.acl_host_stream_release.restype = ctypes.c_int
    host.acl_host_stream_release.argtypes = [ctypes.c_uint64]
    RESULT["held_checks"] = []
    for ln in (x for x in launchers if x["key"] in SPEC.get("held_keys", ()) and x["key"] not in failed):
        m = SPEC["held_launches"]
        hand_back_kept()
        host.acl_host_reset()
        hold = host.acl_host_stream_hold(stream, HOLD_LIMIT_MS)
        check = {"key": ln["key"], "launches": m, "held": False, "queue_through": False}
        if hold == 0:
            check["hold_error"] = "the host ACL library could not hold the stream"
        else:
            try:
                check["failed_calls"] = calls(ln, m)
                check["call_error"] = err.value.decode(errors="replace") if check["failed_calls"] else ""
                # the queue thread reached a gate behind the m lambdas: each ran, none of their kernels has started
                check["queue_through"] = so.npu_patchset_real_runtime_gate_close(HOLD_LIMIT_MS // 2) == 1
                so.npu_patchset_real_runtime_gate_open()
            finally:
                check["held"] = host.acl_host_stream_release(hold) == 1  # 0: it let go by its limit first
        check["sync_error"] = ""
        try:
            torch.npu.synchronize()
        except Exception as exc:
            check["sync_error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        rep = report()
        check.update(errors=rep.get("errors", [])[:5], error_count=len(rep.get("errors", [])),
                     missing_calls=rep.get("missing_calls", {}), probe_count=len(rep.get("probe_records", [])),
                     probe_digest=digest(rep.get("probe_records", [])))
        RESULT["held_checks"].append(check)
        save()
    step("held check" if RESULT["held_checks"] else "no held check")
    RESULT["done"] = True
    save()


if __name__ == "__main__":
    PROGRESS.run(main)
