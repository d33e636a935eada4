"""``launcher``: inspect and dry-run one kernel's sync plan; ``launcher --samples`` for a table.

    python -m torch_npu._inductor.patchset launcher --metadata JSON --grid X,Y,Z
        [--signature '*fp32,i32'] [--vector-cores N] [--ffts] [--emit-cpp]
        [--simulate [--real-runtime RELEASE] [--queue on|off] [--inject-fault fill|launch]] [--json]
    python -m torch_npu._inductor.patchset launcher --samples --no-simulate [--json]
    python -m torch_npu._inductor.patchset launcher --scenario list [--json]
    python -m torch_npu._inductor.patchset launcher --samples [--real-runtime RELEASE] [--as-shipped] [--json]
    python -m torch_npu._inductor.patchset launcher --scenario NAME --real-runtime RELEASE [--as-shipped] [--json]

``--metadata`` takes a JSON object (or ``@file``) with triton-ascend's kernel
metadata fields this patch set reads (an unknown key is an error naming the
valid ones). ``--simulate`` compiles the launcher this patch set generates
against a torch_npu release's headers and runs it on that release's own task
queue and caching allocator, with the host ACL library's probe kernel, in a
subprocess over the host ACL library (a test double of CANN that never enters
this process; ``tooling/releases/real_sources.py``): twice back to back on
one stream, reporting per launch what the kernel saw and what the launch
cost. The release: ``--real-runtime RELEASE``, else the installed torch_npu;
with neither, exit 2 naming the flag. Bad input exits 2 with one line on
stderr.

``--samples`` runs the sample launchers, rendered by the release's own codegen, on its own binaries the same way
(``tooling/releases/real_runtime.py``; the release as for ``--simulate``); ``--as-shipped`` runs the release's own launchers, without the patch set;
``--no-simulate`` prints the plans only (no release needed).

``--scenario NAME --real-runtime RELEASE`` runs one of the graph-capture / thread / memory-pressure scenarios
(``--scenario list`` names them) there, on the release's own task queue, caching allocator and NPUGraph
(docs/real-runtime-scenarios.md); a scenario without ``--real-runtime`` is a usage error (exit 2) naming the flag.
The retired simulation's ``--capture`` and ``--devices`` are refused, naming the scenario that does the same.
"""
from __future__ import annotations

import argparse
import difflib
import json
import re
import subprocess
import sys
from pathlib import Path

from ... import launch_codegen
from ...launch_plan import LAYOUT_LEGACY, LAYOUT_PACKED, SIMT_FLAGS, SyncPlan, plan_from_metadata
from ..releases.real_runtime_judge import first_line
from ..sim import launcher_writer as lc
from ..sim.harness import (
    FAULT_APIS,
    MAX_SIMULATED_BLOCKS,
    block_count,
    content_text,
    expected,
    expected_lock_content,
    rle,
)

#: The launcher computes the block count in 32 bits (``uint32_t block_num = grid_0 * grid_1 * grid_2``).
MAX_BLOCKS = (1 << 32) - 1
#: The metadata fields plan_from_metadata reads (``launch_plan``).
METADATA_KEYS = ("name", "mix_mode", "workspace_size", "lock_num", "lock_init_val", "lock_init_value",
                 "sync_block_lock_layout", "auto_tile_and_bind_subblock", *SIMT_FLAGS)


class UsageError(ValueError):
    """Bad input to the command: one line, exit 2."""


# ---- command line -------------------------------------------------------------
def _parse_grid(text: str) -> tuple[int, int, int]:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) > 3 or not all(re.fullmatch(r"-?\d+", p) for p in parts):
        raise argparse.ArgumentTypeError(f"wants up to three positive integers X,Y,Z, got {text!r}")
    vals = [int(p) for p in parts] + [1] * (3 - len(parts))
    if any(v <= 0 or v >= 1 << 31 for v in vals):
        raise argparse.ArgumentTypeError(f"each of X,Y,Z must be in 1..2**31-1 (the argument struct's int32), "
                                         f"got {text!r}")
    return vals[0], vals[1], vals[2]


def _load_metadata(text: str) -> dict:
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as exc:
            raise UsageError(f"--metadata {text}: cannot read the file: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"bad metadata: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise UsageError(f"bad metadata: --metadata must be a JSON object, got {type(data).__name__}")
    unknown = [k for k in data if k not in METADATA_KEYS]
    if unknown:
        hints = [f"{k!r} (did you mean {difflib.get_close_matches(k, METADATA_KEYS, 1)[0]!r}?)"
                 if difflib.get_close_matches(k, METADATA_KEYS, 1) else repr(k) for k in unknown]
        raise UsageError(f"bad metadata: unknown key{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; "
                         f"valid keys: {', '.join(METADATA_KEYS)}")
    return data


def describe_plan(plan: SyncPlan) -> str:
    """The plan in one paragraph of plain words."""
    if plan.simt_only:
        return (
            f"{plan.kernel}: SIMT-only kernel: its argument struct has no sync_block_lock or "
            f"workspace_addr field, so nothing is allocated."
        )
    parts = []
    if plan.needs_workspace:
        parts.append(f"workspace of {plan.workspace_per_block} bytes per block x grid_0*grid_1*grid_2")
    if plan.lock_layout == LAYOUT_LEGACY:
        parts.append(f"{plan.legacy_slots} int64 lock slots, each = {plan.lock_init_value}")
    elif plan.lock_layout == LAYOUT_PACKED:
        if plan.ordered_locks:
            init = 0 if plan.unordered_locks else plan.lock_init_value  # zeroed beside unordered locks
            parts.append(f"{plan.ordered_locks} ordered lock(s) of 8 int64 each = {init}")
        if plan.unordered_locks:
            who = "block count after clamping"
            if plan.participant_factor == 2:
                who += f" x 2 (mix_mode {plan.mix_mode!r} with auto_tile_and_bind_subblock)"
            parts.append(
                f"{plan.unordered_locks} unordered lock(s) of (1 + 2P) x 8 int64, slot 0 = P, rest 0, "
                f"P = {who}"
            )
    if not parts:
        text = f"{plan.kernel}: no workspace and no sync locks: both pointers are null."
    else:
        text = f"{plan.kernel}: " + "; ".join(parts) + "."
    if plan.lock_source:
        text += f" Lock layout from {plan.lock_source}."
    return text


def plan_summary(plan: SyncPlan, site: lc.LaunchSite, grid) -> dict:
    exp = expected(plan, site, grid)
    return {**plan.to_dict(), "description": describe_plan(plan), "grid": list(grid), **exp}


def _check_grid(grid, site: lc.LaunchSite, simulate_it: bool) -> None:
    programs = grid[0] * grid[1] * grid[2]
    if programs > MAX_BLOCKS:
        raise UsageError(f"--grid {','.join(map(str, grid))}: {programs} programs; the launcher counts blocks in "
                         f"32 bits (uint32_t block_num = grid_0 * grid_1 * grid_2), at most {MAX_BLOCKS}")
    blocks = block_count(grid, site.block_clamp)
    if simulate_it and blocks > MAX_SIMULATED_BLOCKS:
        raise UsageError(f"--grid {','.join(map(str, grid))}: {blocks} blocks; --simulate runs every block on the "
                         f"host, at most {MAX_SIMULATED_BLOCKS} (--vector-cores N clamps them as auto-blockify does)")


def _costs_text(x: dict) -> str:
    return (f"{x['allocator_calls']} allocator call{'s' if x['allocator_calls'] != 1 else ''}, "
            f"{x['device_synchronizations']} device synchronisations, {x['host_blocking_calls']} host-blocking calls, "
            f"{x['page_locked_allocations']} page-locked allocations; launch blocks freed on: {x['block_freed_on']}")


COUNTERS_LEGEND = ("allocator calls: requests to torch_npu's caching allocator (its memory_stats); host-blocking "
                   "calls: synchronous copies, stream or device synchronisations (the host ACL library's call "
                   "records); page-locked allocations: aclrtMallocHost. Launch block: the memory a launch takes for "
                   "its locks and workspace; it is held until its kernel has finished, then the calling thread's "
                   "next launch gives it back (freed on: who gave it back, - for none).")


def _one(args) -> int:
    try:
        metadata = _load_metadata(args.metadata)
        name = args.kernel or metadata.get("name")
        try:
            plan = plan_from_metadata(metadata, kernel=str(name).split()[0] if isinstance(name, str) and name else None)
        except ValueError as exc:
            raise UsageError(f"bad metadata: {exc}") from None
        try:
            kernel_args = lc.args_from_signature(args.signature)
        except ValueError as exc:
            raise UsageError(f"--signature {args.signature!r}: {exc}") from None
        if args.vector_cores < 0:
            raise UsageError(f"--vector-cores {args.vector_cores}: must be 0 (no clamp) or a positive count")
        site = lc.LaunchSite(block_clamp=args.vector_cores or None, has_ffts=args.ffts)
        _check_grid(args.grid, site, args.simulate)
        if args.simulate:
            args.real_runtime = _release_for(args, "--simulate")
    except UsageError as exc:
        print(f"launcher: {exc}", file=sys.stderr)
        return 2
    out: dict = {"plan": plan_summary(plan, site, args.grid)}
    if args.emit_cpp:
        out["cpp"] = lc.launcher_source(plan, site, kernel_args)
    ok = True
    if args.simulate:
        from ..releases import real_runtime as rr
        from ..releases import real_sources, wheels

        try:
            sim = real_sources.simulate(args.real_runtime, plan, site, kernel_args, args.grid,
                                        queue=QUEUES[args.queue], fault=args.inject_fault, timeout=SIMULATE_TIMEOUT_S)
        except (rr.RealRuntimeError, wheels.WheelUnavailable, RuntimeError, subprocess.TimeoutExpired) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            print(f"launcher: torch_npu {args.real_runtime} could not run the launcher on its own runtime: {first}",
                  file=sys.stderr)
            return 1
        out["launches"], out["errors"] = sim["launches"], sim["errors"]
        out["app_logs"], out["notes"] = sim["app_logs"], sim["notes"]
        out["live_allocations_end"] = sim["live_allocations_end"]
        out["release"], out["torch_npu"], out["queue"] = args.real_runtime, sim["torch_npu"], sim["queue"]
        ok = sim["ok"]
    out["ok"] = ok
    if args.json:
        print(json.dumps(out, indent=2))
        return 0 if ok else 1
    if args.simulate and not args.inject_fault:
        threw = [x for x in out["launches"] if x["phase"] != "replay" and x["call_threw"]]
        if threw and len(threw) == len([x for x in out["launches"] if x["phase"] != "replay"]):
            print(f"launcher: kernel {plan.kernel!r}: every launch fails on the calling thread, before anything is "
                  f"queued: {first_line(threw[0]['call_error'], 600)}", file=sys.stderr)
            return 1
    p = out["plan"]
    content = rle(expected_lock_content(plan, p["block_num"])) if not site.simt(plan) else []
    lines = [describe_plan(plan), ""]
    lines.append(f"  grid              {','.join(map(str, args.grid))}  (block_num {p['block_num']}"
                 + (f", clamped to {site.block_clamp} vector cores)" if site.block_clamp else ")"))
    lines.append(f"  lock layout       {plan.lock_layout}" + (f", init {plan.lock_init_value}" if plan.needs_locks else ""))
    lines.append(f"  lock bytes        {p['lock_bytes']}")
    lines.append(f"  workspace bytes   {p['workspace_bytes']}")
    lines.append(f"  lock content      {content_text(content)}")
    lines.append(f"  launch memory     {launch_codegen.LAUNCH_MEMORY if plan.needs_resources and not site.simt(plan) else 'none'}")
    if args.emit_cpp:
        lines += ["", out["cpp"].rstrip()]
    if args.simulate:
        lines += ["", REAL_RUNTIME_HEAD.format(release=args.real_runtime, how="patched") +
                  f"; probe kernel, TASK_QUEUE_ENABLE={out['queue']}"
                  f"{', fault ' + args.inject_fault if args.inject_fault else ''}:"]
        for i, launch in enumerate(out["launches"], 1):
            head = f"  launch {i} ({launch['phase']}, device {launch['device']}): {'ok' if launch['ok'] else 'NOT OK'}"
            if args.inject_fault and i == 1:
                head += " (the injected fault must make it fail cleanly)"
            error = " ".join(launch["call_error"].split())
            if launch["call_threw"]:
                lines.append(f"{head}; threw on the calling thread: {error}")
            elif launch["acl_code"]:
                lines.append(f"{head}; the lambda returned ACL error {launch['acl_code']}")
            elif launch["acl_code"] is None:
                lines.append(f"{head}; the lambda did not run")
            else:
                lines.append(f"{head}; kernel saw lock content {content_text(launch['lock_content'])}, "
                             f"{launch['workspace_bytes']} workspace bytes reachable, "
                             f"regions {'OVERLAP' if launch['regions_overlap'] else 'disjoint'}")
            if launch["phase"] != "replay":
                lines.append(f"    costs: {_costs_text(launch)}")
            for prob in launch["problems"]:
                lines.append(f"    problem: {prob}")
        for err in out["errors"]:
            lines.append(f"  host ACL library: {err}")
        lines.append(f"  ({COUNTERS_LEGEND})")
        lines.append(f"  ok: {ok}")
    print("\n".join(lines))
    return 0 if ok else 1


def run_samples() -> list[dict]:
    """The bundled samples' plans (``launcher --samples --no-simulate``)."""
    from ..sim.samples import SAMPLES

    rows = []
    for s in SAMPLES:
        plan = plan_from_metadata(s.metadata, kernel=s.kernel)
        site = lc.LaunchSite(block_clamp=s.block_clamp, has_ffts=s.has_ffts)
        rows.append({"sample": s.key, "title": s.title, "plan": plan_summary(plan, site, s.grid)})
    return rows


def _samples(args) -> int:
    rows = run_samples()
    if args.json:
        print(json.dumps({"samples": rows, "ok": True}, indent=2))
        return 0
    head = f"{'sample':<16}{'grid':<9}{'blocks':>6}{'lock B':>8}{'workspace B':>12}  {'lock values at start':<22}"
    out = [head, "-" * len(head)]
    for r in rows:
        p = r["plan"]
        grid = "x".join(map(str, p["grid"]))
        vals = ",".join(map(str, p["lock_values_at_start"])) or "-"
        out.append(f"{r['sample']:<16}{grid:<9}{p['block_num']:>6}{p['lock_bytes']:>8}{p['workspace_bytes']:>12}  {vals}")
    out.append("")
    out += [f"  {r['sample']}: {r['plan']['description']}" for r in rows]
    print("\n".join(out))
    return 0


# ---- torch_npu's own runtime (releases/real_runtime.py) -----------------------------------------------
#: The release the usage error suggests (the tier's reference on the 2.7.1 leg, test_real_runtime.py).
EXAMPLE_RELEASE = "2.7.1.post10"
#: The simulation's scenarios that run on the real runtime under another name.
RETIRED = {"capture-then-grow": "capture-then-empty-cache-grow", "capture-then-empty-cache": "capture-then-empty-cache-grow"}
REAL_RUNTIME_HEAD = ("torch_npu {release} {how}, on its own runtime (its libtorch_npu.so, task queue and caching "
                     "allocator) over the host ACL library, a test double of CANN")


def _real_runtime_usage(args) -> str | None:
    """Why the options do not go together (one line), or None."""
    if args.real_runtime is None and args.scenario not in (None, "list"):
        return (f"--scenario {args.scenario} runs on a torch_npu release's own runtime: add --real-runtime RELEASE "
                f"(e.g. --real-runtime {EXAMPLE_RELEASE})")
    if args.real_runtime is None and args.as_shipped:
        return "--as-shipped goes with --real-runtime RELEASE"
    for flag, given in (("--capture", args.capture), ("--devices", args.devices != 1)):
        if given:
            return (f"{flag} ran on the retired simulation of torch_npu: --scenario {SIM_ONLY[flag]} "
                    f"--real-runtime RELEASE does it on torch_npu's own runtime")
    for flag, given in (("--inject-fault", args.inject_fault), ("--queue", args.queue != "on"),
                        ("--emit-cpp", args.emit_cpp), ("--no-simulate", args.no_simulate)):
        if given:
            return (f"{flag} goes with --metadata ... --simulate, not with "
                    f"{'--samples' if args.samples else '--scenario'}")
    if args.scenario == "list" and args.real_runtime is None:
        return None  # the names need no release
    if not args.samples and args.scenario is None:
        return "--real-runtime RELEASE takes --samples or --scenario NAME"
    if args.samples and args.scenario is not None:
        return "--samples or --scenario NAME, not both"
    return None


def samples_text(out: dict) -> str:
    how = "as shipped (without the patch set)" if out["as_shipped"] else "patched"
    if out.get("mutant"):
        how += f", launcher mutant {out['mutant']}"
    lines = [REAL_RUNTIME_HEAD.format(release=out["release"], how=how) + f"; launches via {out['launch_api']}:"]
    for q, run in out["runs"].items():
        lines.append(f"  TASK_QUEUE_ENABLE={q}: " + (f"torch {run['torch']}, torch_npu {run['torch_npu']} imported in "
                                                      f"{run['import_s']} s" if run["torch"] else "not imported")
                     + (f", {run['processes']} processes (a fresh one after a launcher that failed)"
                        if run["processes"] > 1 else ""))
    qs = list(out["runs"])
    head = (f"{'sample':<16}" + "".join(f"{'TQE=' + q:>7}" for q in qs) + f"  {'launched from':<14}{'allocs':>7}"
            f"{'fills':>6}{'copies':>7}{'held while queued':>19}")
    lines += ["", head, "-" * len(head)]
    for r in out["samples"]:
        first = next((run["launches"][-1] for run in r["runs"].values() if run["launches"]), None)
        cells = "".join(f"{'ok' if run['ok'] else 'NO':>7}" for run in r["runs"].values())
        if first is None:
            lines.append(f"{r['sample']:<16}{cells}  (no launch recorded)")
            continue
        held = first["memory_allocated"]["while_queued"] - first["memory_allocated"]["before"]
        where = {"torch_npu's task-queue thread": "queue thread", "calling thread": "caller"}.get(first["thread"],
                                                                                                  first["thread"])
        lines.append(f"{r['sample']:<16}{cells}  {where:<14}{first['caching_allocator_calls']:>7}{first['memsets']:>6}"
                     f"{first['sync_copies']:>7}{str(held) + ' B':>19}")
    lines += ["", f"(columns from launch {LAUNCHES_SHOWN} with TASK_QUEUE_ENABLE={qs[0]}: launched from = the thread that "
                  "called the ACL launch; allocs = requests to torch_npu's caching allocator; fills = aclrtMemsetAsync; "
                  "copies = blocking aclrtMemcpy; held while queued = memory_allocated more than before the call, while "
                  "the launch waited in torch_npu's queue)"]
    for r in out["samples"]:
        seen: dict[str, list[str]] = {}  # each problem once, with the TASK_QUEUE_ENABLE values it was seen with
        for q, run in r["runs"].items():
            for prob in [p for launch in run["launches"] for p in launch["problems"]] + [run.get("failure")]:
                if prob:
                    queues = seen.setdefault(re.sub(r" \(launch \d+\)", "", prob), [])
                    if q not in queues:
                        queues.append(q)
        lines += [f"  {r['sample']} (TQE={','.join(qs)}): {prob}" for prob, qs in seen.items()]
    lines.append(f"all ok: {out['ok']}")
    return "\n".join(lines)


LAUNCHES_SHOWN = 2


def real_scenario_text(out: dict) -> str:
    how = "as shipped (without the patch set)" if out["as_shipped"] else "patched"
    lines = [f"scenario {out['scenario']}: " + REAL_RUNTIME_HEAD.format(release=out["release"], how=how),
             f"  {out['what']}",
             f"  launch calls made {out['calls_made']} of {out['launches']}, threw {out['calls_threw']}; "
             f"reached their kernel {out['reached_kernel']}, of which clean {out['clean_kernels']}",
             f"  memory returned with aclrtFree: {out['device_frees']} times; device allocations refused (out of "
             f"memory): {out['refused_allocations']}, retries counted by torch_npu: {out['alloc_retries']}"
             + ("; timed out" if out["timed_out"] else "")]
    for q, run in out["runs"].items():
        extra = [f"{k.replace('_', ' ')} {run[k]}" for k in ("empty_cache_calls", "operators_run", "replays")
                 if run.get(k)]
        lines.append(f"  TASK_QUEUE_ENABLE={q}: {run['clean_kernels']} of {run['launches']} kernels clean, kernels on "
                     f"devices {run['kernel_devices']}" + "".join(f", {x}" for x in extra) + f"; ok: {run['ok']}")
    lines += [f"  host ACL library: {e}" for e in out["host_errors"][:6]]
    lines += [f"  problem: {p}" for p in out["problems"]]
    lines += [f"  not exercised: {p}" for p in out["not_exercised"]]
    lines.append(f"  ok: {out['ok']}")
    return "\n".join(lines)


def _release_name_problem(version: str) -> str | None:
    """Why ``version`` names no torch_npu release (one line), or None. Its torch line need not be this
    interpreter's: each release runs on its own (``host_runtime.python_for``), or says why it cannot."""
    from ..releases import wheels
    from ..releases.release_names import RELEASE, unknown_release

    flag = f"--real-runtime {version}"
    if not RELEASE.fullmatch(version):
        return f"{flag}: not a torch_npu release version (like 2.7.1 or 2.7.1.post11)"
    if wheels.release_known(version) is False:
        return unknown_release(flag, version, wheels.index_releases() or [])
    return None


def _real_runtime(args) -> int:
    from ..releases import real_runtime as rr
    from ..releases import wheels

    why = None
    if args.scenario is not None and args.scenario != "list" and args.scenario not in rr.SCENARIOS:
        why = (f"unknown scenario {args.scenario!r} on the real runtime; valid: {', '.join(rr.SCENARIOS)} (or list)"
               + (f"; the simulation's {args.scenario} is part of {RETIRED[args.scenario]}"
                  if args.scenario in RETIRED else ""))
    why = why or _real_runtime_usage(args)
    if why is None and args.scenario != "list":
        why = _release_name_problem(args.real_runtime)
    if why is not None:
        print(f"launcher: {why}", file=sys.stderr)
        return 2
    if args.scenario == "list":
        rows = [{"name": k, "what": v} for k, v in rr.SCENARIOS.items()]
        print(json.dumps({"scenarios": rows}, indent=2) if args.json else
              "\n".join(f"{r['name']:<36}{r['what']}" for r in rows))
        return 0
    try:
        if args.scenario is not None:
            out = rr.run_scenario(args.real_runtime, args.scenario, as_shipped=args.as_shipped)
        else:
            out = rr.run_samples(args.real_runtime, as_shipped=args.as_shipped)
    except (rr.RealRuntimeError, wheels.WheelUnavailable, subprocess.TimeoutExpired) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"launcher: torch_npu {args.real_runtime} could not run on its own runtime: {first}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(real_scenario_text(out) if args.scenario is not None else samples_text(out))
    return 0 if out["ok"] else 1


#: The --simulate child's limit. A launch is made with torch_npu's queue held (real_runtime_child): a launch whose
#: caching-allocator request runs out of memory waits there, in the allocator's retry (it drains the queue), until
#: this ends it; with --queue off it fails at once, as torch_npu's own out-of-memory error.
SIMULATE_TIMEOUT_S = 120
#: --queue: the TASK_QUEUE_ENABLE value a --simulate run's child gets.
QUEUES = {"on": "1", "off": "0"}
#: What the retired simulation's own options became: the scenario that does it on torch_npu's own runtime.
SIM_ONLY = {"--capture": "capture-then-empty-cache-grow", "--devices": "devices-threads-queue-off"}


def _release_for(args, what: str) -> str:
    """``--real-runtime`` or the installed torch_npu's release; :class:`UsageError` (one line: what to pass)."""
    from ..releases import real_sources

    release = args.real_runtime or real_sources.installed_release()
    if release is None:
        raise UsageError(f"{what} runs on a torch_npu release's own runtime and no torch_npu is installed here: add "
                         f"--real-runtime RELEASE (e.g. --real-runtime {EXAMPLE_RELEASE})")
    why = _release_name_problem(release)
    if why is not None:
        raise UsageError(why)
    return release


def _simulate_usage(args) -> str | None:
    """Why ``--metadata`` / ``--simulate`` do not go with the other options given (one line), or None."""
    for flag, given in (("--samples", args.samples), ("--scenario", args.scenario is not None),
                        ("--as-shipped", args.as_shipped)):
        if given:
            return f"{flag} does not go with --metadata / --simulate (one kernel of this patch set)"
    for flag, given in (("--capture", args.capture), ("--devices", args.devices != 1)):
        if given:
            return (f"{flag} ran on the retired simulation of torch_npu; on torch_npu's own runtime it is a scenario: "
                    f"--scenario {SIM_ONLY[flag]} --real-runtime RELEASE (--scenario list names them all)")
    if args.inject_fault == "alloc":
        return ("--inject-fault alloc: torch_npu's own caching allocator retries a failed device allocation; its "
                "out-of-memory path is --scenario queue-thread-oom-retry --real-runtime RELEASE")
    if not args.simulate:
        for flag, given in (("--inject-fault", args.inject_fault), ("--queue", args.queue != "on"),
                            ("--real-runtime", args.real_runtime is not None)):
            if given:
                return f"{flag} goes with --simulate"
    return None


def run(args) -> int:
    if args.metadata is not None or args.simulate:  # one kernel: its plan, its C++, a run of its launcher
        why = _simulate_usage(args) or (None if args.metadata is not None else
                                        "--simulate needs --metadata (or use --samples or --scenario)")
        if why is not None:
            print(f"launcher: {why}", file=sys.stderr)
            return 2
        return _one(args)
    if args.samples and args.no_simulate and args.real_runtime is None and args.scenario is None:
        return _samples(args)  # the plans only: no release needed
    if args.samples and args.real_runtime is None and not args.as_shipped and args.scenario is None:
        if _real_runtime_usage(args) is None:
            try:
                args.real_runtime = _release_for(args, "--samples")
            except UsageError as exc:
                print(f"launcher: {exc}", file=sys.stderr)
                return 2
    if args.real_runtime is not None or args.as_shipped or args.scenario is not None or args.samples:
        return _real_runtime(args)
    print("launcher: --metadata is required (or use --samples or --scenario)", file=sys.stderr)
    return 2


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "launcher",
        help="show the sync plan / generated C++ for a kernel's metadata; dry-run it in the ACL simulation",
        description=__doc__.split("\n\n")[0],
    )
    # "-8,1,1" is a value (a wrong grid), not an option: argparse would take it for one.
    p._negative_number_matcher = re.compile(r"^-\d[\d,]*$")

    def one_line_error(message: str):  # a usage error is one line, not the usage dump
        print(f"launcher: {message}", file=sys.stderr)
        sys.exit(2)

    p.error = one_line_error
    p.add_argument("--metadata", help="kernel metadata as a JSON object, or @FILE; keys: " + ", ".join(METADATA_KEYS))
    p.add_argument("--kernel", help="kernel name for messages (default: the metadata's name)")
    p.add_argument("--grid", type=_parse_grid, default=(1, 1, 1), help="X,Y,Z (default 1,1,1)")
    p.add_argument("--signature", default="*fp32,i32", help="Triton signature of the kernel's own arguments")
    p.add_argument("--vector-cores", type=int, default=0,
                   help="clamp the block count to N (auto-blockify); default: no clamp")
    p.add_argument("--ffts", action="store_true", help="the target has FFTS (ffts_addr field)")
    p.add_argument("--emit-cpp", action="store_true", help="print the generated launcher C++")
    p.add_argument("--simulate", action="store_true",
                   help="compile the launcher against a torch_npu release's headers and run it twice on that "
                        "release's own runtime over the host ACL library, a test double of CANN, in a subprocess "
                        "(--real-runtime RELEASE, or the installed torch_npu)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--devices", type=int, default=1, choices=range(1, 9), metavar="N",
                   help="retired with the simulation: use --scenario devices-threads-queue-off --real-runtime RELEASE")
    p.add_argument("--capture", action="store_true",
                   help="retired with the simulation: use --scenario capture-then-empty-cache-grow --real-runtime "
                        "RELEASE")
    p.add_argument("--queue", choices=("on", "off"), default="on",
                   help="with --simulate: torch_npu's task queue on (TASK_QUEUE_ENABLE=1, default) or off (0)")
    p.add_argument("--inject-fault", choices=sorted(FAULT_APIS), default=None,
                   help="with --simulate: make the first launch's lock fill or kernel launch fail (alloc: see "
                        "--scenario queue-thread-oom-retry)")
    p.add_argument("--samples", action="store_true", help="run the bundled sample kernels and print a table")
    p.add_argument("--no-simulate", action="store_true", help="with --samples: plans only (no release needed)")
    p.add_argument("--scenario", metavar="NAME",
                   help="with --real-runtime RELEASE: run a graph-capture / thread / memory scenario on that "
                        "release's own runtime ('list' names them)")
    p.add_argument("--real-runtime", metavar="RELEASE", default=None,
                   help="with --simulate, --samples or --scenario NAME (default: the installed torch_npu): run the launchers on torch_npu RELEASE's own binaries "
                        "(its libtorch_npu.so, task queue and caching allocator) over the host ACL library, a test "
                        "double of CANN, in a subprocess; each sample with TASK_QUEUE_ENABLE=1, 0 and 2")
    p.add_argument("--as-shipped", action="store_true",
                   help="with --real-runtime: the release's own launchers, without the patch set")
    p.set_defaults(func=run)
    return p
