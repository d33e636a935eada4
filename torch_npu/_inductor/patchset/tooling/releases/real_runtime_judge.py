"""The real-runtime tier's verdicts (``real_runtime.py`` runs; this module decides, from what a child saw).

A launch is judged on what its kernel got, by the simulation's own rules (``sim.harness.kernel_problems`` on the
host ACL library's probe record), and on what the launch cost and where its block went, from the host ACL
library's call records (which thread launched, filled, copied, synchronised, allocated) and torch_npu's own
``memory_allocated``. Pure functions: the child's records in, the report's fields (those ``--simulate`` gives,
and the real runtime's own) out.
"""
from __future__ import annotations

from typing import Sequence

from ..sim import harness as sim_harness
from .real_artifacts import first_line  # noqa: F401  (for callers: the judge's messages are in one line)

#: The ACL calls the judge reads from the host ACL library's records.
LAUNCH_CALLS = ("aclrtLaunchKernelWithHostArgs", "rtKernelLaunch")
SYNC_CALLS = ("aclrtSynchronizeDevice", "aclrtSynchronizeDeviceWithTimeout", "aclrtSynchronizeStream",
              "aclrtSynchronizeStreamWithTimeout")
DEVICE_ALLOC_CALLS = ("aclrtMalloc", "aclrtMallocAlign32")


def _calls(host_calls: dict, names: Sequence[str]) -> dict[int, int]:
    """{thread id: calls} of the functions ``names`` in the host ACL library's call accounting."""
    out: dict[int, int] = {}
    for name in names:
        for tid, n in (host_calls.get(name) or {}).get("threads", {}).items():
            out[int(tid)] = out.get(int(tid), 0) + n
    return out


def thread_name(tid: int, caller: int, queue_tid: int) -> str:
    if tid == caller:
        return "calling thread"
    if tid == queue_tid:
        return "torch_npu's task-queue thread"
    return f"thread {tid}"


def probe_view(rec: dict) -> dict:
    """The host ACL library's probe record in the fields ``sim.harness.kernel_problems`` reads."""
    def region(what: str) -> dict:
        ext, ptr = rec[f"{what}_extent"], rec[f"{what}_ptr"]
        return {"kind": ext["kind"], "device": ext["device"], "allocation_bytes": ext["size"],
                "offset_in_allocation": ptr - ext["base"] if ptr and ext["kind"] != "none" else 0,
                "freed": ext["freed"], "available": rec[f"{what}_available"], "overrun": rec[f"{what}_overrun"],
                "align": ptr & -ptr if ptr else 0}

    return {"block_dim": rec["block_dim"], "grid": rec["grid"], "lock_ptr_null": rec["lock_ptr"] == 0,
            "workspace_ptr_null": rec["workspace_ptr"] == 0, "lock_region": region("lock"),
            "workspace_region": region("workspace"), "kernel_device": rec["device"],
            "regions_overlap": rec["regions_overlap"], "overlaps_with_running": rec["overlaps_with_running"],
            "lock_content": sim_harness.rle(rec["lock_slots_at_start"]), "locks_unchanged": rec["locks_unchanged"],
            "workspace_written": rec["workspace_written"], "access_errors": rec["access_errors"],
            "ffts_ok": rec["ffts_ok"], "decoded": rec["decoded"]}


def memory_problems(need: bool, queue: str, m: dict) -> list[str]:
    """Where the launch block went, by the launcher's design (docs/design.md, "When the block goes back"): kept
    for the calling thread's next launch on the stream, never free in the caching allocator while its lambda may
    wait in torch_npu's queue or its kernel may be pending; given back by a calling thread once its kernels have
    finished (here: what torch_npu's free-memory callback does, asked after the device synchronised). From
    torch_npu's own ``memory_allocated`` (``m``: bytes more than before the call ``held`` once it returned;
    ``after`` once the launch completed and the kept blocks were given back; ``carried``, before the call, more
    than before the launcher's first launch: an earlier launch's block that could not be given back;
    ``given_back``, how many went back then; ``early``, with the task queue off, how many went back once the
    kernel had finished, before the wrapper function ended)."""
    problems = []
    if need and m["carried"] > 0:
        problems.append(f"{m['carried']} bytes of an earlier launch still allocated before this one, once its kernel "
                        "had finished and the kept blocks were given back (its lambda never marked it, or owns it)")
    elif need and m["held"] <= 0:
        problems.append("the launch block went back to the allocator inside the call, before its kernel finished "
                        + ("(its lambda had not even run: " if queue != "0" else "(")
                        + "another thread's empty_cache can free it under the launch)")
    if need and queue == "0" and m["held"] > 0 and not m["early"]:
        problems.append("its kernel had finished, yet the calling thread could not give the block back: "
                        + ("it was kept until the end of the wrapper function" if m["after"] == 0
                           else "never handed back"))
    if need and queue != "0" and m["held"] > 0 and m["given_back"] == 0:
        problems.append("the block did not go back through the calling thread once its kernel had finished: " +
                        ("it went back from torch_npu's queue, where the lambda that owned it was destroyed"
                         if m["after"] <= 0 else "still allocated (its lambda never marked it, or owns it)"))
    if m["after"] != 0 and m["carried"] <= 0:
        problems.append(f"{m['after']} bytes more allocated than before the launch once it completed and the calling "
                        f"thread gave its kept blocks back (a leak)")
    return problems


def expectations(plan, site, grid: Sequence[int]) -> tuple[dict, list, tuple]:
    """(what the kernel needs, the reference lock content as runs, the grid) of one launcher, as the
    simulation's judge has them."""
    exp = sim_harness.expected(plan, site, grid)
    want_locks = sim_harness.rle(sim_harness.expected_lock_content(plan, exp["block_num"])) if not site.simt(plan) else []
    return exp, want_locks, tuple(grid)


def block_problems(record: dict | None, block: int) -> list[str]:
    """Whether the regions the kernel got fit in the block torch_npu's caching allocator gave the launch:
    ``block``, the peak of ``memory_allocated`` over the launch less its value before (the allocator's own
    size of the block, rounded as it rounds). The probe's own extent is the device allocation, a whole
    segment: a region running past the block into a neighbour stays inside that."""
    if record is None:
        return []
    spans = [(record[f"{w}_ptr"], record[f"{w}_ptr"] + record[f"{w}_bytes"])
             for w in ("lock", "workspace") if record[f"{w}_ptr"] and record[f"{w}_bytes"]]
    if not spans:
        return []
    span = max(end for _, end in spans) - min(start for start, _ in spans)
    if span > block:
        return [f"the kernel's regions span {span} bytes, more than the {block}-byte block torch_npu's caching "
                f"allocator gave the launch"]
    return []


def judge_launch(expect: tuple, ln: dict, rec: dict, queue: str, caller: int) -> dict:
    """One launch of the child (``rec``; ``expect`` from :func:`expectations`) in the fields ``--simulate``
    gives, with the evidence of torch_npu's own runtime: which thread launched, the caching allocator's bytes
    before / while queued / after, the host ACL library's probe record, fills, blocking copies,
    synchronisations and error reports."""
    exp, want_locks, grid = expect
    host, calls = rec["host"], rec.get("calls_before_sync") or rec["host"].get("calls", {})
    name = ln["kernel_name"].split()[0]
    records = [r for r in host.get("probe_records", []) if r["name"] == name]
    queue_tid = rec.get("queue_tid") or 0
    problems = []
    if rec["call_threw"]:
        problems.append(f"the launch threw on the calling thread: {first_line(rec['call_error'])}")
    if queue != "0" and rec["gate"] != "held":
        problems.append(f"torch_npu's task queue could not be held for the launch ({rec['gate']})")
    launched = _calls(calls, LAUNCH_CALLS)
    view = probe_view(records[0]) if records else None
    if not rec["call_threw"]:
        if len(records) != 1:
            why = f"; torch_npu reported: {first_line(rec['sync_error'])}" if rec.get("sync_error") else ""
            problems.append(f"the probe kernel ran {len(records)} times for this launch (once expected){why}")
        if view is not None:
            problems += sim_harness.kernel_problems(view, exp, want_locks, grid)
        want = "calling thread" if queue == "0" else "torch_npu's task-queue thread"
        where = sorted({thread_name(t, caller, queue_tid) for t in launched})
        if where != [want]:
            problems.append(f"launched from {', '.join(where) or 'nowhere'}, expected from the {want}")
    sync_copies = _calls(calls, ("aclrtMemcpy",))
    syncs = _calls(calls, SYNC_CALLS)
    pinned = _calls(calls, ("aclrtMallocHost",))
    grown = {t: n for t, n in _calls(calls, DEVICE_ALLOC_CALLS).items() if t != caller}
    fills = sum(_calls(calls, ("aclrtMemsetAsync",)).values())
    before, held_m, after = rec["memory_before"], rec["memory_held_while_queued"], rec["memory_after"]
    requests = held_m["requests"] - before["requests"]
    if sync_copies:
        problems.append(f"{sum(sync_copies.values())} blocking aclrtMemcpy on the "
                        f"{', '.join(sorted({thread_name(t, caller, queue_tid) for t in sync_copies}))}")
    if syncs:
        problems.append(f"{sum(syncs.values())} stream or device synchronisations during the launch, on the "
                        f"{', '.join(sorted({thread_name(t, caller, queue_tid) for t in syncs}))}")
    if pinned:
        problems.append(f"{sum(pinned.values())} page-locked allocations")
    if grown:
        problems.append(f"{sum(grown.values())} device allocations on torch_npu's task-queue thread (an allocator "
                        f"inside the launch lambda)")
    if requests > 1:
        problems.append(f"{requests} requests to torch_npu's caching allocator (at most one per launch)")
    need = exp["lock_bytes"] + exp["workspace_bytes"] > 0
    at_end, synced = rec["memory_at_wrapper_end"], rec["memory_after_sync"]
    mem = {"held": held_m["allocated"] - before["allocated"], "at_end": at_end["allocated"] - before["allocated"],
           "after": after["allocated"] - before["allocated"], "given_back": rec["given_back"],
           "early": rec.get("given_back_before_wrapper_end"),
           "carried": before["allocated"] - (rec.get("memory_baseline") or before)["allocated"]}
    if ln["tag"] != "upstream":  # a release's own launcher takes nothing before its queue call
        problems += memory_problems(need, queue, mem)
        problems += block_problems(records[0] if records else None, rec["memory_peak"] - before["allocated"])
    elif mem["after"] != 0:
        problems.append(f"{mem['after']} bytes more allocated than before the launch once it completed (a leak)")
    errors = [f"{e['kind']}: {e['message']}" for e in host.get("errors", [])]
    problems += [f"host ACL library: {e}" for e in errors]
    missing = host.get("missing_calls") or {}
    if missing:
        problems.append(f"torch_npu called ACL functions the host ACL library does not implement: {sorted(missing)}")
    lock = view["lock_region"] if view else {}
    work = view["workspace_region"] if view else {}
    return {
        "phase": "launch", "device": 0, "queue": queue, "acl_code": None, "exception_escaped": None,
        "call_threw": rec["call_threw"], "call_error": rec["call_error"], "sync_error": rec.get("sync_error", ""),
        "thread": ", ".join(sorted({thread_name(t, caller, queue_tid) for t in launched})) or "-",
        "memory_allocated": {"before": before["allocated"], "while_queued": held_m["allocated"],
                             "at_wrapper_end": at_end["allocated"], "after_sync": synced["allocated"],
                             "after": after["allocated"]},
        "blocks_given_back_after": rec["given_back"], "blocks_given_back_before_wrapper_end": mem["early"],
        "block_bytes": rec["memory_peak"] - before["allocated"],
        "live_allocations_after": after["allocated"] - before["allocated"],
        "workspace_bytes": 0 if not view or view["workspace_ptr_null"] else work["available"],
        "lock_bytes": 0 if not view or view["lock_ptr_null"] else lock["available"],
        "promised_workspace_bytes": exp["workspace_bytes"], "promised_lock_bytes": exp["lock_bytes"],
        "lock_region": lock, "workspace_region": work, "block_num": view["block_dim"] if view else None,
        "regions_overlap": bool(view and (view["regions_overlap"] or view["overlaps_with_running"])),
        "lock_content": view["lock_content"] if view else [],
        "lock_values_at_start": sorted({v for v, _ in view["lock_content"]}) if view else [],
        "allocator_calls": requests, "caching_allocator_calls": requests, "workspace_allocator_calls": None,
        "allocator_growths": sum(grown.values()), "device_synchronizations": sum(syncs.values()),
        "sync_copies": sum(sync_copies.values()), "async_copies": sum(_calls(calls, ("aclrtMemcpyAsync",)).values()),
        "memsets": fills, "host_blocking_calls": sum(sync_copies.values()) + sum(syncs.values()),
        "page_locked_allocations": sum(pinned.values()),
        "block_freed_on": ("-" if not need else "calling thread, inside the call"
                           if mem["held"] <= 0 else "calling thread, once its kernel had finished"
                           if rec["given_back"] or mem["early"] else "not by the calling thread"),
        "host_errors": errors, "ok": not problems, "problems": problems,
    }



def child_failure(res: dict) -> str | None:
    """Why a child did not finish, in one line (None when it did)."""
    if res.get("done"):
        return None
    where = res["steps"][-1] if res.get("steps") else "before importing torch_npu"
    if res.get("timed_out"):
        return f"stopped by its timeout after: {where} (a self-wait or a hang)"
    if res.get("error"):
        return f"{res['error'].splitlines()[0][:300]} (after: {where})"
    tail = (res.get("stderr_tail") or "").splitlines()
    return f"exited {res.get('exit_code')} after: {where}" + (f": {tail[-1][:300]}" if tail else "")



def judge_scenario(expect: tuple, spec: dict, res: dict, *, queue: str, exercises: Sequence[str] = (),
                   larger: tuple | None = None) -> dict:
    """One child's verdict on a scenario: every launch made, reached its kernel and got what it needs (replays
    included); no error report of the host ACL library (a write into memory torch_npu had freed is one); the
    run finished in time; nothing left allocated once the device was synchronised and the calling threads gave
    done blocks back; torch_npu's own operators clean; and the scenario did what it is for (``exercises``:
    "frees": memory really went back with aclrtFree; "refused": device allocations were refused; "devices":
    kernels ran on every device of the spec; "threads": the launches came from the launching threads, or,
    with the task queue on, from torch_npu's queue threads; "operators": torch_npu's operators ran, on the
    queue thread with TASK_QUEUE_ENABLE=2; "replays": the captured launches ran at every replay; "windows": each
    round's window, made by the host ACL library's pauses, opened, with the stream held until it shut;
    "queue-stops": a lambda failed, torch_npu reported it, and the launches after it were made and never ran;
    "held-miss": the launch's cache miss stopped, the allocator's mutex held, before the other thread asked).
    ``larger``: what a launch with a larger grid needs (its records are judged by it)."""
    exp, want_locks, grid = expect
    ln = spec["launchers"][0]
    host = res.get("host") or {}
    kernel = ln["kernel_name"].split()[0]
    records = [r for r in host.get("probe_records", []) if r["name"] == kernel]
    launches = spec["kernels"]
    rows = res.get("calls", [])
    threw = [r for r in rows if r["call_threw"] and not r.get("reports_the_failure")  # (queue-stops)
             and not r.get("expected_refusal")]  # (pluggable-allocator-no-memory: the judge reads its refusal below)
    kernel_issues: dict[str, int] = {}
    clean = 0
    for r in records:
        view = probe_view(r)
        if larger is not None and list(view["grid"]) == list(larger[2]):
            found = sim_harness.kernel_problems(view, *larger)
        else:
            found = sim_harness.kernel_problems(view, exp, want_locks, grid)
        clean += not found
        for p in found:
            kernel_issues[p] = kernel_issues.get(p, 0) + 1
    by_kind: dict[str, int] = {}
    for e in host.get("errors", []):
        by_kind[e["kind"]] = by_kind.get(e["kind"], 0) + 1
    before, after = res.get("memory_before") or {}, res.get("memory_after") or {}
    frees = (host.get("counters") or {}).get("device_frees", 0)
    retries = after.get("retries", 0) - before.get("retries", 0)
    # A device allocation the host ACL library refused (out of memory): torch_npu's allocator then frees what
    # it caches (release_available_cached_blocks, or the retry that release_cached_blocks makes) and tries again.
    refused = sum((host.get("calls", {}).get(f) or {}).get("failed", 0) for f in DEVICE_ALLOC_CALLS)
    problems = []
    failure = child_failure(res)
    if failure:
        problems.append(f"the run did not finish: {failure}")
    problems += res.get("thread_errors", [])
    if threw:
        problems.append(f"{len(threw)} of {len(rows)} launch calls threw, first: {threw[0]['call_error'][:200]}")
    if len(records) != launches:
        problems.append(f"{len(records)} of {launches} launches reached their kernel")
    if clean != len(records):
        problems.append(f"{len(records) - clean} kernels got wrong memory: " +
                        "; ".join(f"{p} (x{n})" for p, n in sorted(kernel_issues.items())[:4]))
    if by_kind:
        problems.append("host ACL library error reports: " + ", ".join(f"{k} x{n}" for k, n in sorted(by_kind.items())))
    if res.get("sync_error"):
        problems.append(f"torch.npu.synchronize() afterwards: {res['sync_error']}")
    if host.get("missing_calls"):
        problems.append(f"torch_npu called ACL functions the host ACL library does not implement: "
                        f"{sorted(host['missing_calls'])}")
    left = (after.get("allocated") or 0) - (before.get("allocated") or 0)
    if "queue-stops" in exercises:  # the kept block stays (never freed while it might be written): one, no more
        if res.get("done") and left > (res.get("block_bytes") or 0):
            problems.append(f"{left} bytes stay allocated after torch_npu's queue stopped, more than one launch's "
                            f"block ({res.get('block_bytes')} bytes): the dropped launches' blocks stay, one each")
    elif res.get("done") and left != 0:
        problems.append(f"{left} bytes more allocated at the end than before, once the device was synchronised and "
                        f"the calling threads gave done blocks back (a leak)")
    operators = host.get("operators") or []
    problems += operator_problems(operators, res, queue)
    problems += graph_problems(records, res)
    problems += retry_problems(res)
    problems += pressure_problems(res)
    r = res.get("refusal")
    if r is not None and (not r["threw"] or "the allocator returned no memory" not in r["error"]):
        problems.append(f"the launch under an allocator that returned no memory was not refused with the helper's "
                        f"error on the calling thread: {r}")
    exercised = not_exercised(exercises, res, spec, queue, records, operators, frees=frees, refused=refused)
    return {"queue": queue, "launches": launches, "calls_made": len(rows), "calls_threw": len(threw),
            "reached_kernel": len(records), "clean_kernels": clean, "host_error_kinds": by_kind,
            "host_errors": [f"{e['kind']}: {e['message']}" for e in host.get("errors", [])][:12],
            "device_frees": frees, "refused_allocations": refused, "alloc_retries": retries,
            "oom_allocations": res.get("oom_allocations"), "oom_failures": res.get("oom_failures", {}),
            "empty_cache_calls": res.get("empty_cache_calls"), "operators_run": len(operators),
            "operator_first_phase_threads": len({o["tid_phase1"] for o in operators}),
            "operators_on_their_own_thread": sum(o["tid_phase1"] == res.get("operator_tid") for o in operators),
            "replays": res.get("replays"), "captured_tasks": res.get("captured_tasks"),
            "eager_during_capture": res.get("eager_during_capture"), "launch_phases": res.get("launch_phases"),
            "user_tensor": res.get("user_tensor"), "windows": res.get("windows"),
            "kernel_devices": sorted({r["device"] for r in records}),
            "timed_out": bool(res.get("timed_out")), "seconds": res.get("seconds"),
            "memory_allocated": {"before": before.get("allocated"), "after": after.get("allocated")},
            "torch_npu": res.get("torch_npu"), "problems": problems, "not_exercised": exercised,
            "ok": not problems and not exercised}


def operator_problems(operators: Sequence[dict], res: dict, queue: str) -> list[str]:
    """torch_npu's own operators (the host ACL library's op-api runs): each got a live workspace, touched only
    live memory, overlapped no running kernel, and wrote what the operator thread read back."""
    problems = []
    bad = [o for o in operators if o["access_errors"] or o["overlaps_with_running"] or o["workspace_extent"]["freed"]]
    if bad:
        problems.append(f"{len(bad)} of {len(operators)} torch_npu operators ran on freed or busy memory, first: "
                        f"{bad[0]['op']} (access errors {bad[0]['access_errors']}, overlaps with a running kernel "
                        f"{bad[0]['overlaps_with_running']})")
    for device, got in sorted((res.get("operator_results") or {}).items()):
        if not got["all_equal"]:
            problems.append(f"device {device}: the tensor torch_npu's operators wrote does not hold the last value "
                            f"({got['want']})")
    return problems


def _spans(records: Sequence[dict]) -> list[tuple[int, int]]:
    return [(r[f"{w}_ptr"], r[f"{w}_ptr"] + r[f"{w}_bytes"]) for r in records for w in ("lock", "workspace")
            if r[f"{w}_ptr"] and r[f"{w}_bytes"]]


def graph_problems(records: Sequence[dict], res: dict) -> list[str]:
    """Graphs replayed at the same time on streams of their own (``replay_streams``): each graph's replayed kernels
    on memory of its own, none of it another graph's."""
    streams = res.get("replay_streams") or []
    per = [_spans([r for r in records if r["captured_launch_id"] and r["stream"] == s]) for s in streams]
    shared = sum(1 for i, a in enumerate(per) for b in per[i + 1:] for x in a for y in b if x[0] < y[1] and y[0] < x[1])
    if shared:
        return [f"{shared} pairs of regions of two graphs replayed at the same time overlap (the graphs share memory)"]
    return []


def retry_problems(res: dict) -> list[str]:
    """queue-thread-oom-retry: during each round's launches (the queue drained after them), device memory was
    allocated and freed by the launching thread only (its caching allocator's out-of-memory retry there), never by
    torch_npu's queue thread or any other."""
    caller = str((res.get("thread_tids") or {}).get(0, (res.get("thread_tids") or {}).get("0", "")))
    out = []
    for ph in res.get("launch_phases") or []:
        for what, key in (("device allocations", "allocs"), ("aclrtFree calls", "frees")):
            others = {t: n for t, n in ph[key].items() if t != caller}
            if others:
                out.append(f"round {ph['round']}: {sum(others.values())} {what} during the launches on a thread other "
                           f"than the launching one (torch_npu's queue thread: memory taken inside the lambda)")
    return out


def pressure_problems(res: dict) -> list[str]:
    """memory-back-*: the tensor asked for once the launches had finished, which fits only if the launch memory went
    back to torch_npu's allocator when it needed it, was allocated at the first call."""
    t = res.get("user_tensor")
    if not t or t["allocated"]:
        return []
    return [f"a {t['bytes'] >> 20} MiB tensor was refused once every launch had finished, on a "
            f"{t['device_bytes'] >> 20} MiB device with {t['device_bytes_in_use'] >> 20} MiB in use: the launch "
            f"memory did not go back when torch_npu's allocator needed it ({t['error'][:300]})"]


def not_exercised(exercises: Sequence[str], res: dict, spec: dict, queue: str, records: Sequence[dict],
                  operators: Sequence[dict], *, frees: int, refused: int) -> list[str]:
    """What the scenario is for and did not happen (each a line); nothing when the run did not finish."""
    if not res.get("done"):
        return []
    out = []
    if "frees" in exercises and frees == 0:
        out.append("no memory went back with aclrtFree: empty_cache freed nothing, the window never opened")
    if "refused" in exercises and refused == 0:
        out.append("no device allocation was refused: torch_npu's allocator never ran out of memory")
    if "devices" in exercises and not set(spec["devices"]) <= {r["device"] for r in records}:
        out.append(f"kernels ran on devices {sorted({r['device'] for r in records})}, not on each of {spec['devices']}")
    if "threads" in exercises:
        launchers = set(_calls((res.get("host") or {}).get("calls", {}), LAUNCH_CALLS))
        callers = {int(t) for t in (res.get("thread_tids") or {}).values()}
        if len(callers) != spec["threads"]:
            out.append(f"{len(callers)} launching threads ran, {spec['threads']} expected")
        elif queue == "0" and launchers != callers:
            out.append("with the task queue off the kernels were not launched by the launching threads themselves")
        elif queue != "0" and launchers & callers:
            out.append("with the task queue on a launching thread called the ACL launch itself")
    if "operators" in exercises:
        if not operators:
            out.append("torch_npu's operators never reached the host ACL library's op-api")
        elif queue == "2" and any(o["tid_phase1"] == res.get("operator_tid") for o in operators):
            out.append("an operator's first phase (and its workspace) ran on the operator's thread, not on the queue "
                       "thread")
        elif not set(spec["devices"]) <= {o["device"] for o in operators}:
            out.append(f"operators ran on devices {sorted({o['device'] for o in operators})}, not on each of "
                       f"{spec['devices']}")
    if "replays" in exercises:
        replayed = sum(1 for r in records if r["captured_launch_id"])
        want = spec["replays"] * spec["captured"] * spec.get("graphs", 1)
        if not res.get("captured_tasks") or res.get("replays") != spec["replays"] or replayed != want:
            out.append(f"{res.get('captured_tasks')} tasks captured, {res.get('replays')} of {spec['replays']} "
                       f"replays, {replayed} replayed kernels of {want}")
    if "graphs" in exercises:
        streams = res.get("replay_streams") or []
        per = [sum(1 for r in records if r["captured_launch_id"] and r["stream"] == s) for s in streams]
        if len(streams) != spec["graphs"] or per != [spec["replays"] * spec["captured"]] * spec["graphs"]:
            out.append(f"replayed kernels per replay stream {per}, {spec['replays'] * spec['captured']} on each of "
                       f"{spec['graphs']} expected")
    if "during-capture" in exercises and (res.get("eager_during_capture") or 0) < spec["eager_during"]:
        out.append(f"{res.get('eager_during_capture')} of {spec['eager_during']} eager kernels ran while the other "
                   f"stream captured")
    if "windows" in exercises:
        windows = res.get("windows") or []
        shut = [w["round"] for w in windows if not w["paused"]]
        if len(windows) != spec["rounds"] or shut:
            out.append(f"{len(windows)} of {spec['rounds']} rounds ran; the window did not open (the paused thread "
                       f"never reached its pause) in rounds {shut}")
        early = [w["round"] for w in windows if not w.get("held", True)]
        if early:
            out.append(f"the stream's hold let go by its limit before the window shut in rounds {early}")
    if "queue-stops" in exercises:
        failed = sum((c or {}).get("failed", 0) for f, c in ((res.get("host") or {}).get("calls") or {}).items()
                     if f == spec.get("launch_api"))
        after = [r for r in res.get("calls", []) if r.get("what", "").startswith("after")]
        if not res.get("fault_injected") or failed != 1 or not res.get("fault_report"):
            out.append(f"the lambda's ACL launch did not fail once and get reported (injected "
                       f"{res.get('fault_injected')}, {failed} failed calls, report {res.get('fault_report')!r})")
        if len(after) != spec["after_fault"] or len(records) != spec["before_fault"]:
            out.append(f"{len(after)} of {spec['after_fault']} launches made after the failure; {len(records)} "
                       f"kernels ran, {spec['before_fault']} (those before it) expected")
    if "pressure" in exercises:
        t = res.get("user_tensor") or {}
        if not t or t["device_bytes_in_use"] + t["bytes"] <= t["device_bytes"]:
            out.append(f"the tensor would have fitted without the launch memory: {t.get('device_bytes_in_use')} bytes "
                       f"in use, {t.get('bytes')} asked, {t.get('device_bytes')} on the device")
    if "held-miss" in exercises and not (res.get("window") or {}).get("paused"):
        out.append("the launch's cache miss never stopped: the other thread did not ask while it held the allocator's "
                   "mutex")
    if "caller-retry" in exercises:
        phases = res.get("launch_phases") or []
        if len(phases) != spec["rounds"] or any(p["refused"] == 0 or p["retries"] == 0 for p in phases):
            out.append("not every round's launches had a device allocation refused and torch_npu's out-of-memory "
                       f"retry run: {[(p['round'], p['refused'], p['retries']) for p in phases]} (round, refused, "
                       "retries)")
    return out


_SUMMED = ("launches", "calls_made", "calls_threw", "reached_kernel", "clean_kernels", "device_frees",
           "refused_allocations", "alloc_retries", "operators_run")


def combine_runs(runs: dict[str, dict], **about) -> dict:
    """A scenario's verdict over its children (``runs``: {TASK_QUEUE_ENABLE value: :func:`judge_scenario`}):
    the counts summed, each problem prefixed with its value when there are several, ``ok`` when all are."""
    several = len(runs) > 1

    def tagged(q: str, lines: Sequence[str]) -> list[str]:
        return [f"TASK_QUEUE_ENABLE={q}: {x}" if several else x for x in lines]

    first = next(iter(runs.values()))
    out = {**about, "queues": list(runs), **{k: sum(r[k] or 0 for r in runs.values()) for k in _SUMMED}}
    kinds: dict[str, int] = {}
    for r in runs.values():
        for k, n in r["host_error_kinds"].items():
            kinds[k] = kinds.get(k, 0) + n
    out.update(
        host_error_kinds=kinds, host_errors=[e for q, r in runs.items() for e in tagged(q, r["host_errors"])][:12],
        problems=[p for q, r in runs.items() for p in tagged(q, r["problems"])],
        not_exercised=[p for q, r in runs.items() for p in tagged(q, r["not_exercised"])],
        timed_out=any(r["timed_out"] for r in runs.values()), torch_npu=first["torch_npu"],
        oom_allocations=first["oom_allocations"], oom_failures=first["oom_failures"],
        memory_allocated=first["memory_allocated"], runs=runs, ok=all(r["ok"] for r in runs.values()))
    return out
