"""The real-runtime benchmark's figures: its children's batches in, the rows, ratios, goals and table out.

Pure functions (``real_runtime_bench.py`` builds and runs; this module decides what the batches say): counters per
launch from torch_npu's allocator statistics and the host ACL library's call records, each batch's verdict by the
simulation's rules on the probe kernel's records, medians per cell, the ratios the goals of issue 30 name.
"""
from __future__ import annotations

import statistics
from typing import Sequence

from ..sim import harness as sim_harness
from . import rendered
from .real_runtime_bench_cells import CELLS, GRID, LAYOUTS, PATCH_SET, REPORTED, SAMPLE_BY_KEY, cells_of
from .real_runtime_judge import LAUNCH_CALLS, SYNC_CALLS, expectations, first_line, probe_view


# ---- judge (pure) -----------------------------------------------------------------------------------------
def _count(calls: dict, names: Sequence[str], baseline: dict | None = None) -> int:
    n = sum((calls.get(f) or {}).get("calls", 0) for f in names)
    return n - sum((baseline or {}).get(f, 0) for f in names)


def queue_thread_acl_calls(calls: dict, only: tuple[str, ...] | None = None) -> int:
    """ACL calls made by the threads that launched kernels (torch_npu's queue thread with its queue on); ``only``
    those functions, if given."""
    launchers = {t for f in LAUNCH_CALLS for t in ((calls.get(f) or {}).get("threads") or {})}
    return sum(c for f, v in calls.items() if only is None or f in only
               for t, c in ((v or {}).get("threads") or {}).items() if t in launchers)


def batch_counters(batch: dict, baseline: dict) -> dict:
    """Per launch of a free run: allocator calls (caching + workspace allocator), device synchronisations,
    host-blocking calls (synchronous copies, stream and device synchronisations), page-locked allocations, ACL calls
    on the queue thread; the synchronisation the child makes after the run (``baseline``: what a bare one calls)
    taken off."""
    n, calls = batch["launches"], batch["calls"]
    syncs = _count(calls, SYNC_CALLS, baseline)
    dsync = _count(calls, ("aclrtSynchronizeDevice", "aclrtSynchronizeDeviceWithTimeout"), baseline)
    copies = _count(calls, ("aclrtMemcpy",), baseline)
    queue_calls = queue_thread_acl_calls(calls)
    return {"allocator_calls": (batch["caching_requests"] + batch["workspace_calls"]) / n,
            "caching_allocator_calls": batch["caching_requests"] / n, "workspace_allocator_calls": batch["workspace_calls"] / n,
            "device_synchronizations": dsync / n, "host_blocking_calls": (syncs + copies) / n,
            "sync_copies": copies / n, "page_locked_allocations": _count(calls, ("aclrtMallocHost",), baseline) / n,
            "launch_calls": _count(calls, LAUNCH_CALLS) / n, "memsets": _count(calls, ("aclrtMemsetAsync",)) / n,
            "queue_acl_calls": queue_calls / n,
            "events_recorded": _count(calls, ("aclrtRecordEvent",)) / n,
            "event_queries": _count(calls, ("aclrtQueryEventStatus",)) / n,
            # the same less aclrtCreateEvent: a launch record's event is made once, by the first lambda that records
            # it, so that count is high while the records in use still grow (a short run, a queue falling behind)
            "queue_acl_calls_warm": (queue_calls - queue_thread_acl_calls(calls, ("aclrtCreateEvent",))) / n,
            "heap_allocations": batch["heap_allocations"] / n if batch.get("heap_allocations", -1) >= 0 else None,
            "heap_in_launchers": batch["heap_in_launchers"] / n if batch.get("heap_in_launchers") is not None else None}


def batch_verdict(built, ln: dict, batch: dict) -> list[str]:
    """What went wrong in a free run: calls that threw, launches that never reached the kernel, what the kernels
    got (the simulation's rules on the probe's records), the host ACL library's error reports."""
    problems = []
    if batch.get("failed_calls"):
        problems.append(f"{batch['failed_calls']} calls threw: {first_line(batch['call_error'], 160)}")
    if batch.get("sync_error"):
        problems.append(f"synchronize: {first_line(batch['sync_error'], 160)}")
    if batch["probe_count"] != batch["launches"] - batch.get("failed_calls", 0):
        problems.append(f"{batch['probe_count']} of {batch['launches']} launches reached the kernel")
    plan, site, _args, grid = rendered.sample_setup(built.harness, SAMPLE_BY_KEY[ln["sample"]], ln["tag"])
    exp = expectations(plan, site, grid)
    for d in batch["probe_digest"]:
        for p in sim_harness.kernel_problems(probe_view(d["record"]), *exp):
            # the content found differs from record to record: what was expected is enough here
            problems.append(f"lock content at start differs from {p.split(' != ')[-1]}" if p.startswith("lock content")
                            else p)
    if batch.get("error_count"):
        kinds = sorted({e["kind"] for e in batch.get("errors", [])})
        problems.append(f"{batch['error_count']} host ACL library error reports ({', '.join(kinds)})")
    if batch.get("missing_calls"):
        problems.append(f"unimplemented ACL calls {sorted(batch['missing_calls'])}")
    return list(dict.fromkeys(problems))


def held_check_problems(built, ln: dict, check: dict) -> list[str]:
    """What the held check found (``real_runtime_bench_child.py``: every lambda ran while the stream was held, then
    the kernels): :func:`batch_verdict`'s problems, and a check that did not hold as it should."""
    problems = [check["hold_error"]] if check.get("hold_error") else []
    if not check.get("hold_error") and not check.get("queue_through"):
        problems.append("the queue thread did not get through the launches while the stream was held")
    if not check.get("hold_error") and not check.get("held"):
        problems.append("the stream hold let go by its limit before the check released it")
    return [f"with the kernel before held: {p}" for p in problems + batch_verdict(built, ln, check)]


def heap_counter_problems(res: dict) -> list[str]:
    """The child's check of its heap counter (``heap_count.py``) on allocations of a known number: a counter that
    missed or over-counted them makes every heap figure of that child wrong."""
    known = res.get("heap_known")
    if known is None:
        return []
    problems = [] if known["counted"] == known["made"] else [
        f"the heap counter counted {known['counted']} of {known['made']} known allocations"]
    if known.get("named", known["counted"]) != known["counted"]:
        problems.append(f"the heap counter's breakdown named {known['named']} of {known['counted']} known allocations")
    return problems


#: The verdict column's words for the problems :func:`batch_verdict` finds (the JSON keeps the problems whole).
VERDICT_WORDS = (("sync pointer is null", "null-pointers"), ("regions overlap", "regions-overlap"),
                 ("lock content", "lock-content"), ("disturbed", "disturbed"), ("calls threw", "threw"),
                 ("reached the kernel", "launches-lost"), ("synchronize:", "sync-error"),
                 ("host ACL library error", "host-errors"), ("unimplemented", "missing-acl"),
                 ("heap counter", "heap-counter"))


def short_verdict(problems: Sequence[str]) -> str:
    if not problems:
        return "clean"
    words = [next((w for s, w in VERDICT_WORDS if s in p), "other") for p in problems]
    return "+".join(dict.fromkeys(words))


def _median(v):
    return statistics.median(v) if v else None


def summarise(built: dict, results: list[dict]) -> list[dict]:
    """One row per (layout, kernel us, cell): medians over every batch (each repeat's rounds), counters the worst
    batch's, peak live launch blocks the most, the verdict every batch's problems."""
    acc: dict = {}
    for res in results:
        b = built[res["release"]]
        by_key = {ln["key"]: ln for ln in b.launchers}
        for batch in res.get("batches", []):
            ln = by_key[batch["key"]]
            cell = next(c for c, t in cells_of(res["release"], res["cells"]) if t == ln["tag"])
            a = acc.setdefault((ln["layout"], res["kernel_us"], cell), {"batches": [], "problems": []})
            a["batches"].append(dict(batch, counters_per_launch=batch_counters(batch, res.get("synchronize_calls", {}))))
            a["problems"] += batch_verdict(b, ln, batch) + heap_counter_problems(res)
        for check in res.get("held_checks", []):  # adds to the verdict only: no figure comes from it
            ln = by_key[check["key"]]
            cell = next(c for c, t in cells_of(res["release"], res["cells"]) if t == ln["tag"])
            a = acc.setdefault((ln["layout"], res["kernel_us"], cell), {"batches": [], "problems": []})
            a["held_checks"] = a.get("held_checks", 0) + 1
            a["problems"] += held_check_problems(b, ln, check)
        for failure in filter(None, [res.get("failure")]):
            for cell, tag in cells_of(res["release"], res["cells"]):
                for ln in (x for x in b.launchers if x["tag"] == tag):
                    acc.setdefault((ln["layout"], res["kernel_us"], cell), {"batches": [], "problems": []})[
                        "problems"].append(f"child: {failure}")
    rows = []
    for layout in LAYOUTS:
        for k in sorted({key[1] for key in acc}):
            for cell in CELLS:
                a = acc.get((layout, k, cell))
                if a is None:
                    continue
                bs = a["batches"]
                row = {"layout": layout, "kernel_us": k, "cell": cell, "release": CELLS[cell][0],
                       "rendering": CELLS[cell][1], "batches": len(bs),
                       "held_checks": a.get("held_checks", 0)}
                if bs:
                    call = _median([x["call_ns_median"] for x in bs])
                    queue = _median([x["queue_cpu_ns"] / x["launches"] for x in bs])
                    wall = _median([x["queue_ns_per_launch"] for x in bs if "queue_ns_per_launch" in x])
                    gated = [x["gated_call_ns_median"] for x in bs if x.get("gated_call_ns_median") is not None]
                    row.update(call_ns=call, call_ns_mean=_median([x["call_ns_mean"] for x in bs]), queue_ns=queue,
                               gated_call_ns=_median(gated) if gated else None,
                               queue_wall_ns=wall, total_ns=call + queue,
                               total_wall_ns=call + wall if wall is not None else None,
                               launches_per_s=_median([x["launches"] / x["wall_s"] for x in bs]),
                               peak_live_blocks=max(x["peak_live_allocations"] for x in bs),
                               peak_live_bytes=max(x.get("peak_live_bytes", 0) for x in bs),
                               runs={"call_ns": [x["call_ns_median"] for x in bs], "gated_call_ns": gated,
                                     "queue_ns": [round(x["queue_cpu_ns"] / x["launches"]) for x in bs],
                                     "queue_wall_ns": [x.get("queue_ns_per_launch") for x in bs],
                                     "launches_per_s": [round(x["launches"] / x["wall_s"]) for x in bs]})
                    for c in bs[0]["counters_per_launch"]:
                        seen = [x["counters_per_launch"][c] for x in bs if x["counters_per_launch"][c] is not None]
                        row[c] = max(seen) if seen else None
                row["problems"] = list(dict.fromkeys(a["problems"]))
                row["verdict"] = short_verdict(row["problems"])
                rows.append(row)
    return with_ratios(rows)


def with_ratios(rows: list[dict]) -> list[dict]:
    """Each row's ratios against the own fix (launches per second, total host ns) and the floor (queue thread) of
    its layout and kernel time."""
    ref = {(r["layout"], r["kernel_us"], r["cell"]): r for r in rows}
    for r in rows:
        own, floor = ref.get((r["layout"], r["kernel_us"], "own-fix")), ref.get((r["layout"], r["kernel_us"], "floor"))

        def ratio(a, b):
            return a / b if a is not None and b else None

        r["launches_per_s_vs_own_fix"] = ratio(r.get("launches_per_s"), own and own.get("launches_per_s"))
        r["total_vs_own_fix"] = ratio(r.get("total_ns"), own and own.get("total_ns"))
        r["queue_vs_floor"] = ratio(r.get("queue_ns"), floor and floor.get("queue_ns"))
        r["total_wall_vs_own_fix"] = ratio(r.get("total_wall_ns"), own and own.get("total_wall_ns"))
        r["queue_wall_vs_floor"] = ratio(r.get("queue_wall_ns"), floor and floor.get("queue_wall_ns"))
    return rows


def goals(rows: list[dict]) -> list[str]:
    """Issues 30's and 39's goals, each with the measured figures and met / not met (never assumed)."""
    out = []
    patch = [r for r in rows if r["cell"] in PATCH_SET]

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    for k in (20, 100):
        rs = [r for r in patch if r["kernel_us"] == k and r.get("launches_per_s_vs_own_fix") is not None]
        if rs:
            v = [r["launches_per_s_vs_own_fix"] for r in rs]
            out.append(f"launches/s with {k} us kernels >= 10x the own fix: {min(v):.2f}x .. {max(v):.2f}x: "
                       f"{verdict(min(v) >= 10)}")
            floor = [r["launches_per_s_vs_own_fix"] for r in rows if r["cell"] == "floor" and r["kernel_us"] == k
                     and r.get("launches_per_s_vs_own_fix") is not None]
            if floor:  # the bound: a launcher that passes NULL does the least a launch can
                out.append(f"  (the floor, NULL pointers, at {k} us: {min(floor):.2f}x .. {max(floor):.2f}x the own fix: "
                           "about the most any launcher can reach on this stream)")
    rs = [r for r in patch if r["kernel_us"] == 0 and r["layout"] in REPORTED and r.get("total_vs_own_fix") is not None]
    if rs:
        v = [r["total_vs_own_fix"] for r in rs]
        out.append(f"0 us, reported layouts: total host ns (call + queue CPU) <= 1.5x the own fix: {min(v):.2f}x .. {max(v):.2f}x: "
                   f"{verdict(max(v) <= 1.5)}")
        v = [r["queue_vs_floor"] for r in rs if r.get("queue_vs_floor") is not None]
        if v:
            out.append(f"0 us, reported layouts: queue-thread CPU ns <= 1.5x the floor: {min(v):.2f}x .. {max(v):.2f}x: "
                       f"{verdict(max(v) <= 1.5)}")
            acl = [r.get("queue_acl_calls") for r in rs if r.get("queue_acl_calls") is not None]
            floor = [r.get("queue_acl_calls") for r in rows if r["cell"] == "floor" and r["kernel_us"] == 0
                     and r["layout"] in REPORTED and r.get("queue_acl_calls") is not None]
            if acl and floor:
                out.append(f"  (ACL calls per launch on the queue thread: the patch set {min(acl):.2f} .. {max(acl):.2f}, "
                           f"the floor {min(floor):.2f} .. {max(floor):.2f})")
        for key, what in (("total_wall_vs_own_fix", "total with q wall vs the own fix"),
                          ("queue_wall_vs_floor", "q wall vs the floor")):
            v = [r[key] for r in rs if r.get(key) is not None]
            if v:
                out.append(f"  (the same by wall time, {what}: {min(v):.2f}x .. {max(v):.2f}x)")
    if patch:
        bad = [r for r in patch if (r.get("allocator_calls") or 0) > 0.01 or (r.get("device_synchronizations"),
               r.get("host_blocking_calls"), r.get("page_locked_allocations")) != (0, 0, 0)]
        out.append(f"counters <=0.01/0/0/0 per launch in every patch-set cell: {verdict(not bad)}"
                   + (f" ({len(bad)} cells differ)" if bad else ""))
        # issue 39: live launch memory bounded by the (thread, stream) pairs that launch (one here), plus one while
        # a block is replaced; no event in the steady state; on the queue thread the fills and the launch only;
        # the calling thread within 1.5x the floor's
        peak = [r["peak_live_blocks"] for r in patch if r.get("peak_live_blocks") is not None]
        if peak:
            byte = [r.get("peak_live_bytes") or 0 for r in patch]
            out.append(f"peak live launch blocks per batch <= 2 (one thread, one stream): {min(peak):.0f} .. "
                       f"{max(peak):.0f} ({min(byte) / 2**20:.2f} .. {max(byte) / 2**20:.2f} MiB): {verdict(max(peak) <= 2)}")
        ev = [r.get(c) for r in patch for c in ("events_recorded", "event_queries") if r.get(c) is not None]
        if ev:
            out.append(f"events recorded or queried per launch: {max(ev):g} at most: {verdict(max(ev) == 0)}")
        q = [(r["queue_acl_calls_warm"], r["memsets"]) for r in patch
             if r.get("queue_acl_calls_warm") is not None and r.get("memsets") is not None]
        if q:
            extra = [a - m for a, m in q]
            out.append(f"queue-thread ACL calls per launch = the lock fills + 1 launch: +{min(extra):.2f} .. "
                       f"+{max(extra):.2f}: {verdict(max(extra) <= 1 + 1e-9)}")
        # The calling thread's own cost is read with the queue thread held (gated): free-running, the queue thread and
        # the device's thread share the machine's cores with it, and its median then measures the scheduler (on the
        # 2-core VM the floor's own free-running median moved between ~330 and ~690 ns from round to round).
        def ratios(key):
            floor = {(r["layout"], r["kernel_us"]): r.get(key) for r in rows if r["cell"] == "floor"}
            return [r[key] / floor[(r["layout"], r["kernel_us"])] for r in patch
                    if r.get(key) and floor.get((r["layout"], r["kernel_us"]))]
        calls, free = ratios("gated_call_ns"), ratios("call_ns")
        if calls:
            out.append(f"calling-thread ns per launch <= 1.5x the floor's (queue thread held): {min(calls):.2f}x .. "
                       f"{max(calls):.2f}x: {verdict(max(calls) <= 1.5)}" +
                       (f" (free-running: {min(free):.2f}x .. {max(free):.2f}x)" if free else ""))
        own = {(r["layout"], r["kernel_us"]): r for r in rows if r["cell"] == "own-fix"}
        # a new block costs its record beside its allocator request (one per batch here); none once warm
        heap = [(r.get("heap_in_launchers"), own[(r["layout"], r["kernel_us"])].get("heap_in_launchers"),
                 r.get("allocator_calls") or 0) for r in patch if (r["layout"], r["kernel_us"]) in own]
        heap = [(a, b, c) for a, b, c in heap if a is not None and b is not None]
        if heap:
            more = [a for a, b, c in heap if a > b + c + 1e-9]
            out.append("the launchers' own heap allocations per launch no more than the own fix's, but a record per "
                       f"new block: {verdict(not more)}" + (f" ({len(more)} cells more)" if more else ""))
        unclean = [r for r in patch if r["verdict"] != "clean"]
        out.append(f"every patch-set cell clean: {verdict(not unclean)}")
    return out


# ---- output -----------------------------------------------------------------------------------------------
def _num(x, fmt="{:.0f}") -> str:
    return "-" if x is None else fmt.format(x)


def _ctr(x) -> str:
    return "-" if x is None else (f"{x:g}" if abs(x - round(x)) < 1e-9 else f"{x:.2f}")


HEAD = ["layout", "k_us", "cell", "call", "call g", "queue", "total", "q wall", "launch/s", "l/s/own", "total/own",
        "queue/floor", "acl/q", "alloc", "dsync", "block", "pinned", "heap|own", "peak", "peak B", "verdict"]


def table(rows: list[dict]) -> str:
    out = []
    for r in rows:
        out.append([r["layout"], str(r["kernel_us"]), r["cell"], _num(r.get("call_ns")), _num(r.get("gated_call_ns")),
                    _num(r.get("queue_ns")),
                    _num(r.get("total_ns")), _num(r.get("queue_wall_ns")), _num(r.get("launches_per_s")),
                    _num(r.get("launches_per_s_vs_own_fix"), "{:.2f}"), _num(r.get("total_vs_own_fix"), "{:.2f}"),
                    _num(r.get("queue_vs_floor"), "{:.2f}"), _ctr(r.get("queue_acl_calls")), _ctr(r.get("allocator_calls")),
                    _ctr(r.get("device_synchronizations")), _ctr(r.get("host_blocking_calls")),
                    _ctr(r.get("page_locked_allocations")),
                    f"{_ctr(r.get('heap_allocations'))}|{_ctr(r.get('heap_in_launchers'))}",
                    _num(r.get("peak_live_blocks")), _num(r.get("peak_live_bytes")), r["verdict"]])
    widths = [max(len(h), *(len(x[i]) for x in out)) if out else len(h) for i, h in enumerate(HEAD)]
    left = {0, 2, len(HEAD) - 1}

    def fmt(x):
        return "  ".join(v.ljust(widths[i]) if i in left else v.rjust(widths[i]) for i, v in enumerate(x)).rstrip()

    return "\n".join([fmt(HEAD), fmt(["-" * w for w in widths])] + [fmt(x) for x in out])


LEGEND = ("call: host ns per launch on the calling thread (median over a batch's calls of call_<kernel>: the launch "
          "memory, the queue call, the hand-over); call g: the same with torch_npu's queue thread held at a gate (no "
          "other thread of the child running: the calling thread's own cost, which the goal compares); queue: CPU ns per launch of torch_npu's queue thread over a "
          "free-running batch (what it computes; a lambda blocked in a copy is not running); total = call + queue; "
          "q wall: ns per launch the queue thread took through a batch queued behind a held gate, back to back "
          "(its waits and its preemption included); launch/s: launches per second of a free run, first call to the "
          "end of torch.npu.synchronize(); l/s/own, total/own: against the own-fix cell of the same layout and kernel "
          "time; queue/floor: against the floor's. Per launch (the worst batch): acl/q = ACL calls on torch_npu's "
          "queue thread (the lambda's launch, fills, copies and events), alloc = allocator calls (torch_npu's "
          "caching-allocator requests + workspace-allocator calls), dsync = device synchronisations, block = "
          "host-blocking calls (synchronous copies, stream and device synchronisations), pinned = page-locked "
          "allocations, heap|own = host heap allocations (malloc and its relatives, operator new included) on the "
          "calling thread in the calls: all of them (torch_npu's allocator and the host ACL library included) | those "
          "the launchers' own code made (the rendered launcher with the helper inlined: the std::function its "
          "lambda goes to torch_npu's queue in); peak = most caching-allocator allocations live at once in a free run beyond those before it "
          "(the launch blocks held), peak B = the same in bytes; verdict: the probe kernel's records by the simulation's rules and the host ACL "
          "library's error reports ('clean', or what they found; for the own-fix cell also a held check, which no figure "
          "includes: its launches' lambdas all run while the stream is held, then their kernels).")



def render(doc: dict) -> str:
    s = doc["metadata"]["settings"]
    head = (f"Launch overhead on torch_npu's own runtime (released wheels over the host ACL library, a test double of "
            f"CANN): per cell and child {s['rounds']} rounds of {s['launches']} free-running and {s['gated']} gated "
            f"launches ({s['warmup']} warm-up), grid {GRID} blocks, TASK_QUEUE_ENABLE=1; {s['repeats']} alternating "
            f"repeats; medians over the batches. A synchronous aclrtMemcpy copies at once, waiting for no stream, as "
            f"CANN's does.")
    return "\n".join([head, table(doc["rows"]), LEGEND, "goals (issues 30, 39):", *(f"  {g}" for g in doc["goals"]),
                      f"total {doc['metadata']['duration_s']} s"])


