"""``bash .ci/demo``: the fix on two real torch_npu releases, before and after, without an NPU.

    python -m torch_npu._inductor.patchset.tooling.commands.demo [--versions 2.7.1.post10 2.7.1.post11] [--sample both] [--json]

For each release (its wheel downloaded once and cached by ``releases.wheels``; every step
says so on stderr, so that a first run is never silent):

1. the wheel's own Inductor code renders every sample kernel's launcher, as
   shipped and after ``patchset.apply()`` (``wheel_harness``, run in a fresh
   interpreter and cached by ``real_artifacts.harness_json``);
2. the status rows the patch set reports on that code;
3. the lines of one sample kernel's launcher that the patch set changed;
4. both launchers run twice on the release's own binaries (``releases.real_runtime``): compiled against the
   wheel, linked against its ``libtorch_npu.so``, called in a subprocess that imported the wheel over the host
   ACL library (a test double of CANN, never in this process), so that torch_npu's own task queue and caching
   allocator serve them; the probe kernel reports the pointers, sizes, overlaps and lock content it actually
   received; the verdict names what is wrong (NULL pointers, aliasing regions, a blocking copy on the queue
   thread) or says ``clean``.

Then the user's own job (``tooling/e2e``): ``torch.compile(flex_attention, dynamic=True,
options={"cpp_wrapper": True})``, forward and backward, through 2.7.1.post10's own Inductor backend, as
shipped (the backward does not compile) and patched (every length runs; what each backward launch received; the
kernels executed, the gradients of q, k and v against CPU eager), and the cases users run
(``tooling/e2e/matrix.py``: a first few, ``--matrix`` all), each said as it finishes: ran (its largest error),
refused or stopped (where), and, where a patch decides it, the same case with that patch off.

Each release runs on its own torch line (2.7.1.* here).
"""
from __future__ import annotations

import argparse
import difflib
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from ..e2e import matrix
from ..e2e import tier as e2e_tier
from ..releases import real_artifacts, real_runtime, wheels
from ..sim.samples import BY_KEY

#: 2.7.1.post10 hands the kernel NULL; 2.7.1.post11 carries upstream's own allocation (two requests that alias).
DEFAULT_VERSIONS = ("2.7.1.post10", "2.7.1.post11")
DEFAULT_SAMPLE = "both"  # workspace + locks: the case both upstream releases get wrong
E2E_RELEASE = "2.7.1.post10"  # the seed's reproduction ran on this line



class DemoError(RuntimeError):
    """A release could not be shown (wheel unavailable, rendering failed)."""


def render(version: str) -> dict:
    """The wheel harness's JSON for ``version`` (real classes, before and after apply; cached)."""
    try:
        data = real_artifacts.harness_json(version, sys.executable)
    except real_artifacts.TierError as exc:
        raise DemoError(f"torch_npu {version}: {exc}") from exc
    if not data.get("loaded"):
        raise DemoError(f"torch_npu {version}: wheel not loaded: {data.get('error')}")
    if data.get("error"):
        raise DemoError(f"torch_npu {version}: {data['error']}")
    return data


def changed_lines(before: str, after: str, kernel: str) -> list[str]:
    """The launcher lines the patch set changed (unified diff, no context), kernel names made equal."""
    a = before.replace(f"{kernel}_upstream", kernel).splitlines()
    b = after.replace(f"{kernel}_patched", kernel).splitlines()
    out = []
    for line in difflib.unified_diff(a, b, "upstream", "patched", n=0, lineterm=""):
        if line.startswith(("---", "+++")):
            continue
        if line.startswith(("-", "+")) and not line[1:].strip():
            continue  # blank-line churn says nothing
        out.append(line)
    return out


def run_on_own_runtime(version: str, sample_key: str) -> dict:
    """Both launchers of ``sample_key`` (as shipped and patched) on ``version``'s own runtime, task queue on:
    {tag: {"launches": [...], "errors": [], "ok": ...}} in the shape :func:`verdict` reads."""
    try:
        outs = real_runtime.run_tags(version, {"patched": ("1",), "upstream": ("1",)}, samples=[sample_key])
    except real_runtime.RealRuntimeError as exc:
        raise DemoError(str(exc)) from exc
    judged = {}
    for tag, out in outs.items():
        row = out["samples"][0]
        run = row["runs"]["1"]
        if run.get("failure") or not run["launches"]:
            raise DemoError(f"torch_npu {version}: {tag} {sample_key}: {run.get('failure') or 'no launch recorded'}")
        judged[tag] = {"launches": run["launches"], "errors": [], "ok": row["ok"]}
    return judged


#: (words, what in a judge problem says it), most telling first.
_DEFECTS = (
    ("NULL pointers", ("null",)),
    ("aliasing: lock and workspace regions overlap", ("overlap",)),
    ("workspace overrun", ("past the end", "bytes, the kernel uses")),
    ("wrong lock content", ("lock content",)),
    ("blocking copy on torch_npu's queue thread", ("blocking aclrtMemcpy",)),
    ("allocator inside the lambda", ("device allocations on torch_npu's task-queue thread",)),
    ("extra allocator request / blocking host copy", ("synchronous copy", "allocator request", "host-blocking")),
)


def verdict(judged: dict) -> list[str]:
    """Short words for what the kernel got: ["clean"], or each kind of defect the probe saw."""
    problems = [p for launch in judged["launches"] for p in launch["problems"]]
    words = [w for w, needles in _DEFECTS if any(n in p for p in problems for n in needles)]
    known = {p for p in problems for _, needles in _DEFECTS if any(n in p for n in needles)}
    words += sorted({p for p in problems if p not in known and "disturbed" not in p and "host ACL library" not in p})
    if judged["errors"]:
        words.append(f"{len(judged['errors'])} simulation error reports")
    return words or (["clean"] if judged["ok"] else ["not ok"])


def _bytes(n: int) -> str:
    return f"{n} B" if n < 1 << 20 else f"{n} B ({n / (1 << 20):.1f} MiB)"


def evidence(judged: dict) -> list[str]:
    """What the probe kernel received on the steady-state launch, a line per thing it needs:
    the pointer's room (bytes from it to the end of the device allocation it lies in, or to the other region), the
    bytes the kernel needs, the lock content it found, and what the launch cost."""
    la = judged["launches"][-1]
    rows = []
    for what, key in (("workspace", "workspace"), ("locks", "lock")):
        got, need = la[f"{key}_bytes"], la[f"promised_{key}_bytes"]
        null = la[f"{key}_region"]["kind"] == "none" and got == 0
        rows.append(f"{what + ':':<11}{'NULL' if null else _bytes(got) + ' usable':<15} kernel needs {_bytes(need)}")
    values = la["lock_values_at_start"]
    rows[-1] += f"; slots hold {', '.join(map(str, values))} at launch" if values else ""
    # Counted while torch_npu's queue still held the lambda: what the calling thread asked for.
    rows.append(f"{'cost:':<11}caching-allocator requests on the calling thread {la['allocator_calls']}, "
                f"blocking copies {la['sync_copies']}, regions overlap: {'yes' if la['regions_overlap'] else 'no'}")
    if la.get("thread"):
        rows.append(f"{'where:':<11}launched from {la['thread']}")
    return rows


def show(version: str, sample_key: str, data: dict) -> dict:
    """One release's part of the demo, from its harness JSON (:func:`render`)."""
    s = BY_KEY[sample_key]
    up, ours = data["upstream"][sample_key], data["patched"][sample_key]
    result = {
        "version": version,
        "layout": data["layout"],
        "status": data["status"],
        "sample": sample_key,
        "diff": changed_lines(up.get("cpp", ""), ours.get("cpp", ""), s.kernel),
    }
    for tag, judged in run_on_own_runtime(version, sample_key).items():
        result[tag] = {"verdict": verdict(judged), "evidence": evidence(judged), "ok": judged["ok"]}
    return result


def job_view(r: dict) -> dict:
    """The user's job, as the demo shows it: each length's outcome, the compiles, what each backward launch got."""
    runs = [{"seq_len": x["seq_len"], "forward": x.get("forward"), "backward": x.get("backward"),
             "error": matrix.cause(x) or None, "grad_errors": x.get("errors")} for x in r.get("runs", [])]
    needs = {c["name"]: c for c in r.get("compiled", [])}
    launches = [{"kernel": p["name"], "grid": p["grid"], "workspace_bytes": p["workspace_bytes"],
                 "workspace_size": needs[p["name"]]["workspace_size"], "lock_null": p["lock_ptr"] == 0,
                 "workspace_null": p["workspace_ptr"] == 0, "lock_slots": p["lock_slots_at_start"],
                 "overrun": p["workspace_overrun"] + p["lock_overrun"], "overlap": p["regions_overlap"]}
                for p in r.get("host", {}).get("probe_records", [])
                if p["name"].startswith("triton_tem_fused_zeros") and p["name"] in needs]
    return {"runs": runs, "graphs": r.get("compiles"), "host_errors": len(r.get("host", {}).get("errors", [])),
            "backward_launches": launches, "cached": r.get("cached", False)}


#: Where the user's call stops as shipped: post10's backward template, whose loads triton refuses (docs/facts.md).
AS_SHIPPED_STOP = "Cannot broadcast"


def end_to_end(names=matrix.FIRST, workers: int = 2, say=None) -> dict:
    """The user's job on :data:`E2E_RELEASE`, as shipped and patched (torch's default options), side by side, then the
    cases ``names`` of the matrix, each said as it finishes (``say``)."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        shipped, patched = pool.map(lambda p: e2e_tier.run_job(E2E_RELEASE, patched=p, one_pass=None), (False, True))
    s, p = job_view(shipped), job_view(patched)
    # As shipped, the user's call stops in post10's own backward template (its masked loads), before the seed's
    # SymbolicGridFn assertion, which the matrix's float32 case shows with only the grid patches off.
    s["ok"] = bool(s["runs"]) and AS_SHIPPED_STOP in (s["runs"][0]["error"] or "")
    p["ok"] = (len(p["runs"]) == len(e2e_tier.SEQ_LENS) and p["graphs"] == 1 and p["host_errors"] == 0
               and all(x["forward"] == x["backward"] == "ok" for x in p["runs"])
               and all(x["grad_errors"] and all(e["close"] for e in x["grad_errors"].values()) for x in p["runs"])
               and len(p["backward_launches"]) == len(p["runs"])
               and all(not x["lock_null"] and not x["workspace_null"] and not x["overrun"] and not x["overlap"]
                       and x["workspace_bytes"] == x["workspace_size"] * x["grid"][0] * x["grid"][1] * x["grid"][2]
                       for x in p["backward_launches"]))
    if say:
        say(f"the seed's job: as shipped {'its backward does not compile' if s['ok'] else 'UNEXPECTED'}, patched "
            f"{'ran, its gradients those of eager' if p['ok'] else 'FAILED'}")
    cases = e2e_tier.run_cases(E2E_RELEASE, names, workers=workers, say=say)
    not_run = [v["case"] for v in cases if v["outcome"] != "ran"]
    return {"release": E2E_RELEASE, "as_shipped": s, "patched": p, "matrix": cases, "not_run": not_run,
            "matrix_ok": all(v["outcome"] == "ran" or (v["outcome"] == "stopped" and v["case"] in matrix.KNOWN_STOPS)
                             for v in cases)}


def format_job(e2e: dict) -> list[str]:
    def outcome(x):
        if x["error"]:
            return f"forward ok, backward stops: {x['error']}" if x["forward"] == "ok" else x["error"]
        return f"forward {x['forward']}, backward {x['backward']}"
    out = ["=== the user's job: torch.compile(flex_attention, dynamic=True, options={'cpp_wrapper': True}), "
           "forward and backward,", f"    through torch_npu {e2e['release']}'s own Inductor backend and runtime "
           "(stand-ins: tooling/e2e/stand_ins.py)"]
    for tag, name in (("as_shipped", "as shipped:"), ("patched", "patched:")):
        v = e2e[tag]
        out += [f"  {name if i == 0 else '':<13}S={x['seq_len']}: {outcome(x)}" for i, x in enumerate(v["runs"])]
        if tag == "patched":
            out.append(f"  {'':<13}{v['graphs']} compile for {len(v['runs'])} lengths; host ACL library error "
                       f"reports {v['host_errors']}")
            for x in v["runs"]:  # the kernels ran (the executor stand-in): the gradients against CPU eager
                errs = x["grad_errors"] or {}
                close = all(e["close"] for e in errs.values()) if errs else False
                out.append(f"  {'':<13}S={x['seq_len']}: out, dq, dk, dv {'match' if close else 'DO NOT match'} "
                           "eager (float64), largest abs error " +
                           " / ".join(f"{errs[g]['max_abs']:.1e}" for g in ("out", "dq", "dk", "dv") if g in errs))
            for x in v["backward_launches"]:
                blocks = x["grid"][0] * x["grid"][1] * x["grid"][2]
                out.append(f"  {'':<13}{x['kernel']} grid {'x'.join(map(str, x['grid']))}: workspace "
                           f"{_bytes(x['workspace_bytes'])} = {x['workspace_size']} B x {blocks} programs, "
                           f"{len(x['lock_slots'])} lock slots holding {sorted(set(x['lock_slots']))}")
    shown = e2e.get("matrix", [])
    out += ["", f"=== the cases users run (tooling/e2e/matrix.py: {len(shown)} of {len(matrix.CASES)}; --matrix: all), "
            "patched, called as users call", "    flex_attention (no kernel_options), against eager in float64 on the "
            "CPU; tolerance: the largest error relative to max(1, |reference|) (torch_npu's own test's job: to |reference|)"]
    for v in shown:
        out.append(f"  {matrix.line(v)}")
        out += [f"  {matrix.without_line(w)}" for w in v.get("without", [])]
    if e2e.get("not_run"):
        out.append(f"  did not run: {', '.join(e2e['not_run'])}")
    return out + [""]


def format_text(results: list[dict]) -> str:
    out = ["torch-npu-inductor-patches demo: real torch_npu releases (their wheels), before and after the patch",
           "set; the launchers run on each release's own libtorch_npu.so, task queue and caching allocator, over",
           "the HOST ACL LIBRARY (a test double of CANN with a probe kernel, in a subprocess; not an NPU).", ""]
    for r in results:
        s = BY_KEY[r["sample"]]
        out.append(f"=== torch_npu {r['version']} (layout {r['layout']})")
        width = max((len(row["id"]) for row in r["status"]), default=0) + 2  # as the status table's
        for row in r["status"]:
            label = row["state"] if row["state"] != "failed" else f"failed: {row['reason']}"
            out.append(f"  {row['id']:<{width}}{label}")
            if row.get("note"):
                out.append(f"  {'':<{width}}{row['note']}")
        out.append("")
        out.append(f"  sample kernel {s.kernel} ({s.title}): lines of its launcher the patch set changed")
        out += [f"    {line}" for line in r["diff"]] or ["    (none)"]
        out.append("")
        out.append("  on torch_npu's own runtime (what the probe kernel received on its second launch):")
        for tag, name in (("upstream", "as shipped:"), ("patched", "patched:")):
            out.append(f"    {name:<13}{', '.join(r[tag]['verdict'])}")
            out += [f"    {'':<13}{row}" for row in r[tag]["evidence"]]
        out.append("")
    return "\n".join(out)


def expected_ok(results: list[dict], e2e: dict | None = None) -> bool:
    """The demo's claim: every release is wrong as shipped and clean patched; the user's job does not compile as
    shipped and runs patched, with every case shown."""
    return (all(not r["upstream"]["ok"] and r["patched"]["ok"] for r in results)
            and (e2e is None or (e2e["as_shipped"]["ok"] and e2e["patched"]["ok"] and e2e.get("matrix_ok", True))))


#: What a first run costs (an empty cache, torch 2.7.1's environment already made), measured: docs/verification.md.
FIRST_RUN_COST = "about 10 minutes the first time"


def closing(ok: bool, e2e: dict) -> str:
    """The demo's last line: its verdict, naming every case that did not run."""
    if ok:
        return ("as shipped: wrong on both releases and the user's backward does not compile; patched: clean, and the "
                f"user's job and all {len(e2e['matrix'])} cases shown ran, their results those of eager")
    missed = f"; cases that did not run: {', '.join(e2e['not_run'])}" if e2e and e2e.get("not_run") else ""
    return f"demo: UNEXPECTED result (see above){missed}"


def _workers(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 16:
        raise argparse.ArgumentTypeError(f"--workers takes a number from 1 to 16, not {text!r}")
    return int(text)


def _say(line: str) -> None:
    """Progress on stderr (stdout is the report): a first run downloads and builds for a while."""
    print(f"demo: {line}", file=sys.stderr, flush=True)


def _run(versions: list[str], sample_key: str, names=matrix.FIRST, workers: int = 2) -> tuple[list[dict], dict]:
    started = time.monotonic()
    for v in versions:  # one at a time: each download says what it fetches and how big
        try:
            wheels.wheel_path(v, say=lambda line, v=v: _say(f"  {line}"))
        except wheels.WheelUnavailable as exc:
            raise DemoError(f"torch_npu {v}: {exc}") from exc
    _say(f"rendering the launchers of {', '.join(versions)} through each release's own Inductor classes, "
         "before and after the patch set (a fresh interpreter each; about 15 s the first time, cached after)")
    with ThreadPoolExecutor(max_workers=len(versions)) as pool:
        data = list(pool.map(render, versions))
    _say("compiling them against each wheel and running them on its own runtime over the host ACL library, a "
         "test double of CANN (built once per release: about 40 s the first time, cached after)")
    with ThreadPoolExecutor(max_workers=len(versions)) as pool:
        results = list(pool.map(lambda vd: show(vd[0], sample_key, vd[1]), zip(versions, data)))
    runs = len(names) + sum(1 for n in names if n in matrix.WITHOUT)
    _say(f"the user's job, end to end on {E2E_RELEASE}, as shipped and patched: torch.compile of Flex Attention "
         f"forward and backward through the wheel's own Inductor backend, then {len(names)} of the "
         f"{len(matrix.CASES)} cases users run ({runs} runs, {workers} at a time, each a compile and its kernels "
         f"executed; {FIRST_RUN_COST}; cached after)")
    e2e = end_to_end(names, workers, say=lambda line: _say(f"  {line}"))
    _say(f"done in {time.monotonic() - started:.0f} s")
    return results, e2e


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_npu._inductor.patchset.tooling.commands.demo",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", nargs="+", default=list(DEFAULT_VERSIONS))
    parser.add_argument("--sample", default=DEFAULT_SAMPLE, choices=sorted(BY_KEY))
    parser.add_argument("--matrix", action="store_true", help=f"every case users run ({len(matrix.CASES)}), not "
                        f"only the first run's {len(matrix.FIRST)}")
    parser.add_argument("--workers", type=_workers, default=2, help="end-to-end runs at a time (default 2)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    names = list(matrix.CASES) if args.matrix else list(matrix.FIRST)
    try:
        results, e2e = _run(args.versions, args.sample, names, args.workers)
    except DemoError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    ok = expected_ok(results, e2e)
    if args.json:
        print(json.dumps({"releases": results, "end_to_end": e2e, "ok": ok}, indent=2))
    else:
        print(format_text(results))
        print("\n".join(format_job(e2e)))
        print(closing(ok, e2e))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
