"""What the sync resources (workspace + locks) cost per launch: this helper against another.

``--real-runtime`` (all other options then belong to it: ``--real-runtime --help``) runs instead on torch_npu's
own runtime, released wheels over the host ACL library: the floor, torch_npu's own fix and the patch set side by
side (``torch_npu/_inductor/patchset/tooling/releases/real_runtime_bench.py``). What follows is the simulation-only
run, kept for what that cannot show (benchmarks/README.md says what).

Runs, in the host ACL simulation (``acl_sim``), the launchers ``launch_codegen``
writes, in the shape torch_npu's C++ wrapper has (``call_<kernel>``: the lambda
handed to ``launchKernel``, i.e. ``OpCommand::RunOpApiV2``, which torch_npu's
simulated task queue runs on its own thread), and measures per launch:

* host time on the calling thread (the ``call_<kernel>`` call) and on the queue
  thread (the lambda: the simulation times every queued task);
* the simulation's counters: allocator calls (caching + workspace allocator),
  device synchronisations, host-blocking calls, page-locked allocations, host
  heap allocations by the calling thread;
* a verdict from the probe kernel and the simulation's error reports.

Strategies: ``null`` (a plan needing nothing: NULL pointers, the floor; the same
code in every build, so its spread between builds is noise) and ``patchset``
(the layout's launcher). Cells: layouts (workspace + legacy locks; packed
unordered locks; legacy locks with init value 7) x simulated kernel time (0, 20, 100 us).

    python benchmarks/launch_overhead.py [--quick] [--json PATH]
    python benchmarks/launch_overhead.py --baseline-helper DIR [--repeats N] [--quick] [--json PATH]

``--baseline-helper DIR`` builds the same benchmark a second time against the
helper in ``DIR`` and runs both builds alternately, ``--repeats`` times per
cell, in one run, printing both side by side with the ratios. A helper without
``LaunchMemory`` (the one of commit b45157f) gets the launcher shape its
generator wrote: ``acquire_launch_resources`` inside the lambda.

No torch import; needs a C++17 compiler (``sim_build``).
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PATCHSET = ROOT / "torch_npu" / "_inductor" / "patchset"
CPP_SOURCE = HERE / "cpp" / "launch_overhead.cpp"
GENERATED_HEADER = "launch_overhead_launchers.h"

STRATEGIES = ("null", "patchset")
KERNEL_US = (0, 20, 100)
SIGNATURE = "*fp32,*fp32,i32"  # the benchmark kernel's own arguments (the probe skips them)
BLOCK_CLAMP = 48  # auto-blockify clamp (vector cores of an Ascend 910B); the grid stays below it
GRID = 4  # launched blocks: the probe runs each block on the stream thread

# The two layouts benchmarked, as triton-ascend's compiler reports them.
# The layouts benchmarked. BiSheng reports lock init value 0 (docs/facts.md): the first two are what
# compilers produce (one zero fill; one zero fill + one fill for P); the third, an init value no known
# compiler reports, costs one more fill per slot.
LAYOUTS = {
    "ordered": {
        "title": "workspace 256 B/block + 16 legacy (ordered) lock slots, init 0",
        "metadata": {"name": "bench_ordered aiv", "mix_mode": "aiv", "workspace_size": 256, "lock_num": 16},
    },
    "unordered": {
        "title": "workspace 256 B/block + packed layout, 1 unordered lock (P = blocks)",
        "metadata": {"name": "bench_unordered aiv", "mix_mode": "aiv", "workspace_size": 256,
                     "sync_block_lock_layout": 1 << 32},
    },
    "init7": {
        "title": "workspace 256 B/block + 16 legacy lock slots, init 7 (no known compiler reports it)",
        "metadata": {"name": "bench_init7 aiv", "mix_mode": "aiv", "workspace_size": 256,
                     "lock_num": 16, "lock_init_val": 7},
    },
}

FULL = {"launches": 10000, "rounds": 5, "warmup": 200}
QUICK = {"launches": 1000, "rounds": 2, "warmup": 50}


# --------------------------------------------------------------------------- loading
def _load_patchset():
    """The pure-Python modules used here: the plan, the code generator, the simulation's build."""
    from torch_npu._inductor.patchset import launch_codegen, launch_plan
    from torch_npu._inductor.patchset.tooling.sim import build as sim_build
    from torch_npu._inductor.patchset.tooling.sim import harness as launcher_cli

    return launch_plan, launch_codegen, sim_build, launcher_cli


# --------------------------------------------------------------------------- codegen
def in_lambda_launcher(cg, plan, site, kargs) -> str:
    """The launcher in the shape b45157f's launch_codegen wrote it (``git show
    b45157f:torch_npu/_inductor/patchset/launch_codegen.py``, ``resource_lines``): the block count and
    lock layout, ``acquire_launch_resources`` and its two pointers, all inside the lambda; nothing
    before it, no release after it. Made from today's launcher by moving those lines."""
    src = cg.launcher_source(plan, site, kargs)
    code = cg.resource_code(plan, site)
    if not code.before:  # a kernel that needs nothing: the same code in both shapes
        return src
    p, g0, g1, g2 = site.prefix, *site.grid
    setup = [ln for ln in code.before if not ln.startswith("//") and f"{p}memory" not in ln
             and f"{p}regions" not in ln and not ln.startswith("    ")]
    workspace = plan.workspace_per_block if plan.needs_workspace else 0
    old = setup + [
        f"{cg.HELPER_NAMESPACE}::LaunchResources {p}resources;",
        f"aclError {p}status = {cg.HELPER_NAMESPACE}::acquire_launch_resources(",
        f"    {cg.c_string(plan.kernel)}, {site.stream}, {g0}, {g1}, {g2}, {p}block_num,",
        f"    UINT64_C({workspace}), {p}locks, &{p}resources);",
        f"if ({p}status != ACL_SUCCESS) return {p}status;  // logged by the helper; nothing stays allocated",
        f"void* sync_block_lock = {p}resources.locks();",
        f"void* workspace_addr = {p}resources.workspace();",
    ]
    lines = src.splitlines()
    drop = {"    " + ln for ln in code.before + code.after}
    out, lambda_lines = [], ["        " + ln for ln in code.in_lambda]
    i = 0
    while i < len(lines):
        if lines[i : i + len(lambda_lines)] == lambda_lines:
            out += ["        " + ln for ln in old]
            i += len(lambda_lines)
            continue
        if lines[i] not in drop:
            out.append(lines[i])
        i += 1
    text = "\n".join(out) + "\n"
    assert "LaunchMemory" not in text and "acquire_launch_resources(" in text, text
    return text


def launchers_header(helper_dir: Path | None = None) -> str:
    """The generated header: null + patchset launchers per layout, from launch_codegen (including the
    helper of ``helper_dir`` instead of this package's, in the shape that helper takes)."""
    plan_mod, cg, _, lcli = _load_patchset()
    site = cg.LaunchSite(block_clamp=BLOCK_CLAMP)
    kargs = cg.args_from_signature(SIGNATURE)
    in_lambda = helper_dir is not None and not lcli.helper_has_launch_memory(Path(helper_dir))
    way = ("memory taken inside the launch lambda (acquire_launch_resources)" if in_lambda else
           "memory taken on the calling thread (LaunchMemory), raw pointers in the lambda")
    out = [
        "// GENERATED by benchmarks/launch_overhead.py --emit-launchers (launch_codegen); do not edit.",
        "#pragma once",
        cg.includes(),
        "// ---- null: a kernel plan that needs nothing (the pre-fix NULL pointers)",
        cg.launcher_source(plan_mod.SyncPlan(kernel="bench_null"), site, kargs),
    ]
    specs = []
    for key, layout in LAYOUTS.items():
        plan = plan_mod.plan_from_metadata(layout["metadata"])
        out.append(f"// ---- patchset, layout '{key}': {plan.describe()}")
        out.append(in_lambda_launcher(cg, plan, site, kargs) if in_lambda else cg.launcher_source(plan, site, kargs))
        specs.append(
            f'    {{"{key}", UINT64_C({plan.workspace_per_block}), UINT64_C({plan.legacy_slots}), '
            f"{plan.ordered_locks}u, {plan.unordered_locks}u, {plan.participant_factor}u, "
            f"{cg.int64_literal(plan.lock_init_value)}, &{cg.launcher_function_name(plan)}}},")
    out += [
        "namespace bench_gen {",
        "using Launcher = void (*)(aclrtFuncHandle, void*, void*, int32_t, uint32_t, uint32_t, uint32_t, aclrtStream);",
        f"constexpr size_t kOwnArgsBytes = {cg.own_args_bytes(kargs)};",
        f"constexpr uint32_t kBlockClamp = {BLOCK_CLAMP};",
        f"constexpr const char* kHelperWay = {cg.c_string(way)};",
        "struct LayoutSpec {",
        "  const char* key;",
        "  uint64_t workspace_per_block;",
        "  uint64_t legacy_slots;",
        "  uint32_t ordered, unordered, participant_factor;",
        "  int64_t init_value;",
        "  Launcher patchset;",
        "};",
        f"constexpr int kNumLayouts = {len(specs)};",
        "inline const LayoutSpec kLayouts[kNumLayouts] = {",
        *specs,
        "};",
        "inline const Launcher kNullLauncher = &call_bench_null;",
        "}  // namespace bench_gen",
        "",
    ]
    text = "\n".join(out)
    if helper_dir is not None:
        header = (Path(helper_dir).resolve() / cg.HELPER_HEADER)
        if not header.is_file():
            raise FileNotFoundError(f"no {cg.HELPER_HEADER} in {helper_dir}")
        include = f'#include "{cg.HELPER_HEADER}"'
        assert include in text, "launch_codegen.includes() changed: update launchers_header()"
        text = text.replace(include, f'#include "{header.as_posix()}"')
    return text


def build(helper_dir: Path | None = None) -> Path:
    """Compile the benchmark with sim_build (cached by content), against ``helper_dir``'s helper if given."""
    _, _, sim_build, _ = _load_patchset()
    header = launchers_header(helper_dir)
    gen = sim_build.build_dir() / f"bench-gen-{hashlib.sha256(header.encode()).hexdigest()[:16]}"
    if not (gen / GENERATED_HEADER).exists():
        gen.mkdir(parents=True, exist_ok=True)
        tmp = gen / f".{GENERATED_HEADER}.{os.getpid()}"
        tmp.write_text(header)
        os.replace(tmp, gen / GENERATED_HEADER)
    extra = [gen] + ([Path(helper_dir).resolve()] if helper_dir is not None else [])
    name = "launch_overhead" if helper_dir is None else "launch_overhead-baseline"
    return sim_build.compile_program(CPP_SOURCE.read_text(), name, extra_include_dirs=extra)


# --------------------------------------------------------------------------- running
def _run_json_lines(cmd: list[str]) -> list[dict]:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


def run(exe: Path, layouts, kernel_us, strategies, settings) -> list[dict]:
    cells: list[dict] = []
    for layout in layouts:
        cmd = [str(exe), "--layout", layout, "--kernel-us", ",".join(map(str, kernel_us)),
               "--strategies", ",".join(strategies), "--launches", str(settings["launches"]),
               "--rounds", str(settings["rounds"]), "--warmup", str(settings["warmup"]), "--grid", str(GRID)]
        cells += _run_json_lines(cmd)
    return cells


def _median(v: list[float]) -> float:
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


MEASURES = ("calling_ns_median", "queue_ns_median")
COUNTERS = ("allocator_calls", "device_synchronizations", "host_blocking_calls", "page_locked_allocations",
            "host_heap_allocs", "frees_on_queue_thread", "peak_live_blocks")


def compare(builds: dict[str, Path], layouts, kernel_us, strategies, settings, repeats: int) -> list[dict]:
    """Every build, alternately (now, base, base, now, ...), ``repeats`` times per layout; per cell
    and build the median over the repeats of each run's median, the counters, the verdicts."""
    samples: dict = {}
    tags = list(builds)
    for layout in layouts:
        for rep in range(repeats):
            for tag in tags if rep % 2 == 0 else tags[::-1]:
                for c in run(builds[tag], [layout], kernel_us, strategies, settings):
                    samples.setdefault((layout, c["kernel_us"], c["strategy"], tag), []).append(c)
            print(f"  {layout:<9} repeat {rep + 1}/{repeats}", file=sys.stderr, flush=True)
    rows = []
    for layout in layouts:
        for kus in kernel_us:
            for strat in strategies:
                row = {"layout": layout, "kernel_us": kus, "strategy": strat}
                for tag in tags:
                    runs = samples.get((layout, kus, strat, tag), [])
                    if not runs:
                        continue
                    for m in MEASURES:
                        row[f"{tag}_{m}"] = _median([c[m] for c in runs])
                        row[f"{tag}_{m}_runs"] = [c[m] for c in runs]
                    row[f"{tag}_total_ns_median"] = row[f"{tag}_calling_ns_median"] + row[f"{tag}_queue_ns_median"]
                    for k in COUNTERS:
                        row[f"{tag}_{k}"] = max(c[k] for c in runs)  # per launch; the worst run
                    verdicts = sorted({c["verdict"] for c in runs})
                    row[f"{tag}_verdict"] = "+".join(verdicts) if verdicts != ["clean"] else "clean"
                    row[f"{tag}_helper_way"] = runs[0]["helper_way"]
                if "baseline" in tags and "current" in tags:
                    for m in ("calling_ns_median", "queue_ns_median", "total_ns_median"):
                        b = row.get(f"baseline_{m}")
                        row[f"{m}_current_vs_baseline"] = row[f"current_{m}"] / b if b else None
                rows.append(row)
    return rows


# --------------------------------------------------------------------------- output
def _c(x: float) -> str:
    return f"{x:g}" if x == int(x) else f"{x:.2f}"


def table(rows: list[dict], tags: list[str]) -> str:
    both = tags == ["current", "baseline"]
    head = ["layout", "k_us", "strategy"]
    if both:
        head += ["call now", "call base", "queue now", "queue base", "total now", "total base", "call n/b",
                 "queue n/b", "total n/b", "alloc n|b", "dsync n|b", "block n|b", "pinned n|b", "heap n|b",
                 "peak n|b", "verdict now | base"]
    else:
        head += ["call ns", "queue ns", "total ns", "alloc", "dsync", "block", "pinned", "heap", "peak", "verdict"]
    out = []
    for r in rows:
        line = [r["layout"], str(r["kernel_us"]), r["strategy"]]
        if both:
            line += [f"{r[f'{t}_{m}']:.0f}" for m in ("calling_ns_median", "queue_ns_median", "total_ns_median")
                     for t in tags]
            line += [f"{r[f'{m}_current_vs_baseline']:.2f}" for m in ("calling_ns_median", "queue_ns_median",
                                                                       "total_ns_median")]
            line += [f"{_c(r[f'current_{k}'])}|{_c(r[f'baseline_{k}'])}" for k in
                     ("allocator_calls", "device_synchronizations", "host_blocking_calls", "page_locked_allocations",
                      "host_heap_allocs", "peak_live_blocks")]
            line.append(f"{r['current_verdict']} | {r['baseline_verdict']}")
        else:
            t = tags[0]
            line += [f"{r[f'{t}_{m}']:.0f}" for m in ("calling_ns_median", "queue_ns_median", "total_ns_median")]
            line += [_c(r[f"{t}_{k}"]) for k in ("allocator_calls", "device_synchronizations", "host_blocking_calls",
                                                   "page_locked_allocations", "host_heap_allocs", "peak_live_blocks")]
            line.append(r[f"{t}_verdict"])
        out.append(line)
    widths = [max(len(h), *(len(r[i]) for r in out)) if out else len(h) for i, h in enumerate(head)]

    def fmt(r):
        return "  ".join(v.rjust(widths[i]) if 1 <= i < len(head) - 1 and i != 2 else v.ljust(widths[i])
                         for i, v in enumerate(r))

    return "\n".join([fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in out])


LEGEND = ("call: host ns per launch on the calling thread (the call_<kernel> call: memory, the queue call, the "
          "release); queue: host ns of the launch lambda on torch_npu's queue thread; total = call + queue "
          "(medians); n/b: now / base. Per launch: alloc = allocator calls (caching + workspace allocator), dsync = "
          "device synchronisations, block = host-blocking calls, pinned = page-locked allocations, heap = host heap "
          "allocations by the calling thread (the std::function torch_npu's launchKernel builds included). Per cell: "
          "peak = launch blocks allocated at once on the stream (held until their kernels finished: at most the "
          "launches in flight; the worst round). verdict: "
          "the probe kernel and the simulation's error reports ('clean', or what they found).")


def _machine() -> dict:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {"hostname": platform.node(), "platform": platform.platform(), "cpu": cpu,
            "cpu_count": os.cpu_count(), "python": platform.python_version(),
            "loadavg_at_start": list(load) if load else None}


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--real-runtime" in argv:  # torch_npu's own runtime (tooling/releases/real_runtime_bench.py)
        from torch_npu._inductor.patchset.tooling.releases import real_runtime_bench

        return real_runtime_bench.main([x for x in argv if x != "--real-runtime"])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="same grid, fewer launches")
    ap.add_argument("--json", metavar="PATH", help="write every number as JSON")
    ap.add_argument("--launches", type=int, help="measured launches per cell and run (default 10000, --quick 1000)")
    ap.add_argument("--rounds", type=int, help="interleaved rounds per cell (launches split across them)")
    ap.add_argument("--warmup", type=int, help="warm-up launches per round")
    ap.add_argument("--layouts", default=",".join(LAYOUTS), help="comma list (default: all)")
    ap.add_argument("--kernel-us", default=",".join(map(str, KERNEL_US)), help="comma list (default 0,20,100)")
    ap.add_argument("--strategies", default=",".join(STRATEGIES), help="comma list (default: null,patchset)")
    ap.add_argument("--binary", metavar="PATH", help="run this prebuilt benchmark (the CMake target) instead")
    ap.add_argument("--emit-launchers", metavar="PATH", help="only write the generated launcher header and exit")
    ap.add_argument("--baseline-helper", metavar="DIR",
                    help="also build against the helper in DIR and run both alternately, side by side")
    ap.add_argument("--repeats", type=int, default=5, help="alternating runs per cell and build (default 5)")
    a = ap.parse_args(argv)

    if a.emit_launchers:
        p = Path(a.emit_launchers)
        p.parent.mkdir(parents=True, exist_ok=True)
        text = launchers_header()
        if not p.exists() or p.read_text() != text:
            p.write_text(text)
        return 0

    settings = dict(QUICK if a.quick else FULL)
    for k in ("launches", "rounds", "warmup"):
        if getattr(a, k) is not None:
            settings[k] = getattr(a, k)
    layouts = [x for x in a.layouts.split(",") if x]
    strategies = [x for x in a.strategies.split(",") if x]
    try:
        kernel_us = [int(x) for x in a.kernel_us.split(",") if x]
    except ValueError:
        ap.error(f"--kernel-us wants comma-separated integers, got {a.kernel_us!r}")
    for v, allowed, what in ((layouts, LAYOUTS, "layout"), (strategies, STRATEGIES, "strategy")):
        bad = [x for x in v if x not in allowed]
        if bad:
            ap.error(f"unknown {what}(s) {bad}; choose from {list(allowed)}")
    if a.baseline_helper and not (Path(a.baseline_helper) / "npu_launch_resources.h").is_file():
        ap.error(f"--baseline-helper {a.baseline_helper}: no npu_launch_resources.h there")

    t_start = time.perf_counter()
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    machine = _machine()
    builds = {"current": Path(a.binary) if a.binary else build()}
    if a.baseline_helper:
        builds["baseline"] = build(Path(a.baseline_helper))
    for tag, exe in builds.items():
        print(f"{tag} benchmark binary: {exe}", file=sys.stderr)
    repeats = max(1, a.repeats) if a.baseline_helper else 1
    rows = compare(builds, layouts, kernel_us, strategies, settings, repeats)
    prims = _run_json_lines([str(builds["current"]), "--primitives", "--launches", str(settings["launches"]),
                             "--grid", str(GRID)])[0]
    total_s = time.perf_counter() - t_start
    tags = list(builds)

    print(f"Launch overhead in the host ACL simulation: {settings['launches']} launches per cell and run "
          f"({settings['rounds']} interleaved rounds, {settings['warmup']} warm-up launches each), grid {GRID} "
          f"blocks, task queue on" + (f"; {repeats} alternating runs per build, medians of the runs' medians"
                                      if repeats > 1 else ""))
    for tag in tags:
        way = next((r.get(f"{tag}_helper_way") for r in rows if r.get(f"{tag}_helper_way")), "")
        where = a.baseline_helper if tag == "baseline" else "this package's csrc/"
        print(f"  {'now ' if tag == 'current' else 'base'}: helper in {where}: {way}")
    print(table(rows, tags))
    print(LEGEND)
    print(f"simulation primitives, host ns per call (median; {prims['bytes']} bytes where memory is asked for): "
          + ", ".join(f"{k} {v:.0f}" for k, v in prims["primitives_ns_median"].items()))
    print(f"total {total_s:.1f} s")

    if a.json:
        doc = {
            "rows": rows,
            "metadata": {
                "date": started,
                "machine": machine,
                "settings": settings,
                "repeats": repeats,
                "baseline_helper": a.baseline_helper,
                "grid": [GRID, 1, 1],
                "layouts": {k: LAYOUTS[k] for k in layouts},
                "kernel_signature": SIGNATURE,
                "binaries": {t: str(p) for t, p in builds.items()},
                "duration_s": round(total_s, 2),
            },
        }
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
