"""``bash .ci/demo``: the fix on two real torch_npu releases, before and after, without an NPU.

    python -m torch_npu._inductor.patchset.tooling.commands.demo [--versions 2.7.1.post10 2.7.1.post11] [--sample both] [--json]

For each release (its wheel downloaded once and cached by ``upstream_wheels``):

1. the wheel's own Inductor code renders every sample kernel's launcher, as
   shipped and after ``patchset.apply()`` (``wheel_harness``, run in a fresh
   interpreter and cached by ``real_artifacts.harness_json``);
2. the status rows the patch set reports on that code;
3. the lines of one sample kernel's launcher that the patch set changed;
4. both launchers compiled against the host ACL simulation (a test double,
   not an NPU) and run twice with the probe kernel, which reports the
   pointers, sizes, overlaps and lock content it actually received; the
   verdict names what is wrong (NULL pointers, aliasing regions, a blocking
   copy) or says ``clean``.

Releases run on their own torch line only (2.7.1.* here).
"""
from __future__ import annotations

import argparse
import difflib
import json
import sys
from concurrent.futures import ThreadPoolExecutor

from ..releases import real_artifacts, rendered
from ..sim.samples import BY_KEY

#: 2.7.1.post10 hands the kernel NULL; 2.7.1.post11 carries upstream's own allocation (two requests that alias).
DEFAULT_VERSIONS = ("2.7.1.post10", "2.7.1.post11")
DEFAULT_SAMPLE = "both"  # workspace + locks: the case both upstream releases get wrong



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


def simulate_rendered(version: str, sample_key: str, data: dict, tag: str) -> dict:
    """Compile the launcher ``tag`` ("upstream" or "patched") of ``version`` against the host ACL
    simulation, run it twice on one stream, and judge what the probe kernel received."""
    entry = data[tag][sample_key]
    if "error" in entry:
        raise DemoError(f"torch_npu {version}: rendering {sample_key} ({tag}) failed: {entry['error']}")
    return rendered.simulate_sample(version, data, BY_KEY[sample_key], tag=tag)


#: (words, what in a judge problem says it), most telling first.
_DEFECTS = (
    ("NULL pointers", ("null",)),
    ("aliasing: lock and workspace regions overlap", ("overlap",)),
    ("workspace overrun", ("past the end", "bytes, the kernel uses")),
    ("wrong lock content", ("lock content",)),
    ("extra allocator request / blocking host copy", ("synchronous copy", "allocator request", "host-blocking")),
)


def verdict(judged: dict) -> list[str]:
    """Short words for what the kernel got: ["clean"], or each kind of defect the probe saw."""
    problems = [p for launch in judged["launches"] for p in launch["problems"]]
    words = [w for w, needles in _DEFECTS if any(n in p for p in problems for n in needles)]
    known = {p for p in problems for _, needles in _DEFECTS if any(n in p for n in needles)}
    words += sorted({p for p in problems if p not in known and "disturbed" not in p})
    if judged["errors"]:
        words.append(f"{len(judged['errors'])} simulation error reports")
    return words or (["clean"] if judged["ok"] else ["not ok"])


def evidence(judged: dict) -> str:
    """The steady-state launch as the probe kernel measured it."""
    la = judged["launches"][-1]
    ws = "NULL" if la["workspace_region"]["kind"] == "none" and la["workspace_bytes"] == 0 else f"{la['workspace_bytes']} B"
    lk = "NULL" if la["lock_region"]["kind"] == "none" and la["lock_bytes"] == 0 else f"{la['lock_bytes']} B"
    return (f"workspace {ws} (needs {la['promised_workspace_bytes']} B), locks {lk} (needs {la['promised_lock_bytes']} B), "
            f"overlap {la['regions_overlap']}, lock values {la['lock_values_at_start'] or '-'}, "
            f"allocator requests {la['allocator_calls']}, blocking copies {la['sync_copies']}")


def show(version: str, sample_key: str) -> dict:
    data = render(version)
    s = BY_KEY[sample_key]
    up, ours = data["upstream"][sample_key], data["patched"][sample_key]
    result = {
        "version": version,
        "layout": data["layout"],
        "status": data["status"],
        "sample": sample_key,
        "diff": changed_lines(up.get("cpp", ""), ours.get("cpp", ""), s.kernel),
    }
    for tag in ("upstream", "patched"):
        judged = simulate_rendered(version, sample_key, data, tag)
        result[tag] = {"verdict": verdict(judged), "evidence": evidence(judged), "ok": judged["ok"]}
    return result


def format_text(results: list[dict]) -> str:
    out = ["torch-npu-inductor-patches demo: real torch_npu releases' Inductor code (from their wheels,",
           "NPU stand-ins), before and after the patch set; launches dry-run in the HOST ACL SIMULATION",
           "(a test double with a probe kernel, not an NPU).", ""]
    for r in results:
        s = BY_KEY[r["sample"]]
        out.append(f"=== torch_npu {r['version']} (layout {r['layout']})")
        for row in r["status"]:
            label = row["state"] if row["state"] != "failed" else f"failed: {row['reason']}"
            out.append(f"  {row['id']:<39}{label}")
            if row.get("note"):
                out.append(f"  {'':<39}{row['note']}")
        out.append("")
        out.append(f"  sample kernel {s.kernel} ({s.title}): lines of its launcher the patch set changed")
        out += [f"    {line}" for line in r["diff"]] or ["    (none)"]
        out.append("")
        for tag, name in (("upstream", "as shipped"), ("patched", "patched")):
            out.append(f"  simulation, {name:<10} {', '.join(r[tag]['verdict'])}")
            out.append(f"  {'':<22}{r[tag]['evidence']}")
        out.append("")
    return "\n".join(out)


def expected_ok(results: list[dict]) -> bool:
    """The demo's claim: every release is wrong as shipped and clean patched."""
    return all(not r["upstream"]["ok"] and r["patched"]["ok"] for r in results)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_npu._inductor.patchset.tooling.commands.demo",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--versions", nargs="+", default=list(DEFAULT_VERSIONS))
    parser.add_argument("--sample", default=DEFAULT_SAMPLE, choices=sorted(BY_KEY))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        with ThreadPoolExecutor(max_workers=len(args.versions)) as pool:  # each renders in its own interpreter
            results = list(pool.map(lambda v: show(v, args.sample), args.versions))
    except DemoError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    ok = expected_ok(results)
    if args.json:
        print(json.dumps({"releases": results, "ok": ok}, indent=2))
    else:
        print(format_text(results))
        print("as shipped: wrong on both releases; patched: clean" if ok else "demo: UNEXPECTED result (see above)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
