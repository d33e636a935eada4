"""Every torch_npu release line through the real-artifact tier: ``docs/release-matrix.md``.

Driven by ``.ci/release-matrix`` (which prepares one python per torch line), through
``python -m torch_npu._inductor.patchset.tooling.releases.release_matrix``:

* ``--list-releases``: the releases to check: the newest post release of every X.Y.Z line on the
  index (``pip index versions torch-npu``) from 2.7.1 on, plus :data:`PINNED` (releases the tests
  name: an older layout and the last release without upstream's allocation);
* ``--imports-triton RELEASE``: exit 0 when that wheel's Inductor launch code imports triton;
* otherwise: run the tier (and the real runtime, ``runtime_column.py``, unless ``--no-real-runtime``) for
  ``--releases`` with ``--python X.Y=PATH`` per torch line and write the table to ``--out``. A release that cannot be checked gets a row that says exactly why.
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

from . import aot_sim, rendered, runtime_column
from . import real_artifacts as ra
from . import wheels as uw

FIRST = (2, 7, 1)
#: Releases checked besides the newest of each line: the tests pin them (older codegen layout;
#: the last 2.7.1 release that passes NULL pointers).
PINNED = ("2.7.1.post6", "2.7.1.post10")


def _key(v: str) -> tuple:
    parts = re.match(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?$", v)
    if not parts:
        return ()
    a, b, c, post = parts.groups()
    return int(a), int(b), int(c), int(post) if post is not None else -1


def index_versions() -> tuple[list[str], str]:
    """Versions of torch-npu on the index, and where the list came from."""
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "torch-npu",
                           "--disable-pip-version-check"], capture_output=True, text=True, timeout=600)
    m = re.search(r"Available versions:\s*(.+)", proc.stdout)
    if m:
        return [v.strip() for v in m.group(1).split(",")], "pip index versions torch-npu"
    cached = sorted({re.match(r"torch_npu-([^-]+)-", p.name).group(1)
                     for p in (ra.CACHE_ROOT / "wheels").glob("torch_npu-*.whl")})
    tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
    return cached, f"the wheel cache (pip index versions failed: {tail[0]})"


def releases(versions: list[str]) -> list[str]:
    newest: dict = {}
    for v in versions:
        k = _key(v)
        if not k or k[:3] < FIRST:
            continue
        if k[:3] not in newest or k > _key(newest[k[:3]]):
            newest[k[:3]] = v
    chosen = set(newest.values()) | {p for p in PINNED if p in versions}
    return sorted(chosen, key=_key)


def imports_triton(release: str) -> bool:

    ind = uw.extracted_tree(release) / "torch_npu" / "_inductor"
    files = [ind / "runtime" / "triton_heuristics.py", ind / "codegen" / "cpp_wrapper_npu.py",
             ind / "codegen" / "cpp_wrapper.py", ind / "codegen" / "npu" / "device_op_overrides.py"]
    return any(re.search(r"^(import triton|from triton)\b", f.read_text(), re.M) for f in files if f.exists())


def upstream_launch(release: str) -> tuple[str, str]:
    """(layout, what upstream's C++ wrapper passes for workspace and locks), read from the wheel's source."""

    tree = uw.extracted_tree(release)
    layout = uw.layout_of(tree)
    codegen = tree / "torch_npu" / "_inductor" / "codegen"
    src = (codegen / ("cpp_wrapper_npu.py" if layout == "cpp_wrapper_npu" else "cpp_wrapper.py")).read_text()
    launch = "rtKernelLaunch" if "rtKernelLaunch(" in src else (
        "aclrtLaunchKernelWithHostArgs" if "aclrtLaunchKernelWithHostArgs" in src else "?")
    if src.count("allocate_workspace(") >= 2 and "aclrtMemcpy(" in src:
        what = "two `allocate_workspace` requests + sync `aclrtMemcpy`"
    elif re.search(r"workspace_addr\s*=\s*NULL", src) and re.search(r"sync_block_lock\s*=\s*NULL", src):
        what = "NULL pointers"
    else:
        what = "other (neither NULL pointers nor the two-request allocation)"
    return f"`{layout}` ({launch})", what


def status_cell(harness: dict) -> str:
    rows = {r["id"]: r for r in harness.get("status", [])}
    out = []
    for pid in ("kernel-sync-metadata", "cpp-wrapper-sync-resources"):
        r = rows.get(pid)
        if r is None:
            continue
        detail = r.get("note") or r.get("reason") or ""
        out.append(f"{pid}: **{r['state']}**" + (f" ({detail})" if detail else ""))
    return "<br>".join(out) or "no status rows"


def aot_simulate(release: str, harness: dict) -> tuple[str, list]:
    """The aot_mode launchers as one shared library, each sample run by a host without the patch set
    (``aot_sim``)."""
    try:
        lib = aot_sim.library(release, harness)
    except Exception as exc:
        return "not run: the library did not build", [f"{type(exc).__name__}: {str(exc).strip()[:300]}"]
    return rendered.each_sample(lambda s: aot_sim.run(release, harness, s, [lib]))


def aot_check(release: str, python: str, run_simulation: bool) -> dict:
    """The tier in aot_mode (``real_artifacts.build(aot=True)``), then the AOT library simulation."""
    out: dict = {}
    try:
        out["tier"] = ra.build(release, python=python, aot=True).to_json()
    except ra.TierError as exc:
        out["skip"] = str(exc)
        return out
    except Exception as exc:
        out["skip"] = f"{type(exc).__name__}: {exc}"
        return out
    harness = ra.harness_json(release, python, aot=True)
    row = next((r for r in harness.get("status", []) if r["id"] == "aot-npu-launch-lambda"), None)
    if row is not None:  # whether the aot_mode launches needed keeping on torch_npu's lambda, and why
        out["launch_patch"] = f"{row['state']} ({row.get('note') or row.get('reason') or ''})"
    if run_simulation and out["tier"]["ok"]:
        out["simulation"], out["simulation_problems"] = aot_simulate(release, harness)
    return out


def _aot_cell(aot) -> str:
    if not aot:
        return "not checked"
    if "skip" in aot:
        return f"not built: {_short_reason(aot['skip'])}"
    tier = aot["tier"]
    if not tier["ok"]:
        what = ", ".join(f"`{p}`" for _, p in tier["unresolved"]) or tier["message"].splitlines()[0][:300]
        return f"**FAILED** ({tier['stage']}): {what}"
    cell = (f"ok: rendered in aot_mode, compiled ({tier['info'].get('std')}), linked: {len(tier['accounting'])} "
            "undefined symbols, all provided")
    if "simulation" in aot:
        cell += f"; library without the patch set: {aot['simulation']}"
        if aot.get("simulation_problems"):
            cell += ": " + "; ".join(aot["simulation_problems"][:4])
    if aot.get("launch_patch"):
        cell += f"<br>aot-npu-launch-lambda: {aot['launch_patch']}"
    return cell


# ---- one release -------------------------------------------------------------------------------------
def check(release: str, python: str | None, no_python: str | None, run_simulation: bool,
          run_runtime: bool = True, runtime_python: str | None = None) -> dict:
    row: dict = {"release": release}
    try:
        row["layout"], row["upstream"] = upstream_launch(release)
    except Exception as exc:
        row["layout"] = row["upstream"] = f"not read: {type(exc).__name__}: {exc}"
    try:
        row["torch"] = ra.required_torch(release)
    except Exception as exc:
        row["torch"] = f"? ({exc})"
    if run_runtime:  # first: it may run where the rendering cannot (a CPU build of the line)
        started = time.monotonic()
        try:
            row["runtime"] = runtime_column.measure(release, runtime_python or python, no_python)
        except Exception as exc:
            row["runtime"] = {"cannot_run": f"{type(exc).__name__}: {runtime_column.reason_line(str(exc))}"}
        row["runtime_s"] = round(time.monotonic() - started)
    if python is None:
        row["skip"] = f"no python with torch {ra.line_of(release)}: {no_python or 'none given'}"
        return row
    try:
        harness = ra.harness_json(release, python)
    except Exception as exc:
        row["skip"] = f"the harness did not run: {exc}"
        return row
    row["status"] = status_cell(harness) if harness.get("loaded") else f"wheel not loaded: {harness.get('error')}"
    if "flex" in harness:
        row["flex"] = harness["flex"]
    if harness.get("error"):
        row["harness_error"] = harness["error"]
    try:
        r = ra.build(release, python=python)
        row["tier"] = r.to_json()
    except ra.TierError as exc:
        row["tier_skip"] = str(exc)
    except Exception as exc:
        row["tier_skip"] = f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"
    any_rendered = [e for e in harness.get("patched", {}).values() if "cpp" in e]
    if run_simulation and "patched" in harness and not any_rendered:
        row["simulation"] = "not run: the harness rendered no patched launcher"
    elif run_simulation and "patched" in harness:
        row["simulation"], row["simulation_problems"] = rendered.simulate(release, harness)
    elif "patched" not in harness:
        row["simulation"] = "not run: the harness rendered no patched launchers for this layout"
    row["aot"] = aot_check(release, python, run_simulation)
    return row


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", "<br>")


def _flex_cell(flex) -> str:
    if not isinstance(flex, dict):
        return str(flex)[:300]
    errors = sorted({str(v) for k, v in flex.items() if k.startswith("error")})
    if errors:
        return "not read: " + "; ".join(errors)[:300]
    if "template" not in flex:
        return ""
    return (f"{'torch_npu' if flex.get('own_template') else 'torch'}'s template; symbolic grid as shipped: "
            f"{'yes' if flex.get('grid_is_symbolic') else 'no'}; ours after apply: {'yes' if flex.get('patched') else 'no'}")


def _short_reason(text) -> str:
    """A tier or harness failure, without the per-sample repetition."""
    text = str(text)
    m = re.search(r"the harness could not render \[(.*?)\]: (\{.*\})", text, re.S)
    if m:
        pairs = re.findall(r"'([\w-]+)': (?:\"([^\"]*)\"|'([^']*)')", m.group(2))
        by: dict = {}
        for key, err1, err2 in pairs:
            by.setdefault(err1 or err2, []).append(key)
        if by:
            return "the harness could not render: " + "; ".join(
                f"{len(keys)}/{len(pairs)} samples: {err}" for err, keys in by.items())
    return text[:400]


def render_markdown(rows: list[dict], command: str, source: str) -> str:
    has_flex = any("flex" in r for r in rows)
    gxx = subprocess.run(["g++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    out = [
        "# torch_npu release matrix: the patched launchers against the real artifacts",
        "",
        f"Generated by `{command}` on {datetime.date.today().isoformat()} ({gxx}); do not edit by hand.",
        f"Releases: the newest post release of every X.Y.Z line from 2.7.1 on, from {source}, plus "
        f"{', '.join(PINNED)} (pinned by the tests).",
        "",
        "Columns: **layout** is the wheel's codegen layout (`upstream_wheels.layout_of`) and its launch call; "
        "**upstream** is what the wheel's own C++ wrapper passes for the kernel's workspace and sync locks, read "
        "from its source; **after apply** is the patch set's status rows from `tooling/releases/wheel_harness.py`; "
        "**compile** / **link** are the real-artifact tier (`tooling/releases/real_artifacts.py`): every sample "
        "launcher rendered by the wheel's own wrapper classes after apply, in one translation unit with the "
        "real wrapper header and the helper, compiled against the wheel's `torch_npu/include` and the "
        "matching torch's headers, linked with `-Wl,--no-undefined` against the wheel's `libtorch_npu.so`, "
        "torch's libraries and a `libascendcl` stub generated from the wheel's ACL headers; **simulation** "
        "runs the same patched launchers in the host ACL simulation. **AOT** is the same tier in aot_mode "
        "(`real_artifacts check --aot`): every sample launcher rendered with `V.graph.aot_mode` by the wheel's "
        "own classes after apply, under the wheel's real AOT header (the helper's text inlined, no include path), "
        "with a stand-in for what only a compiled graph defines (the kernels struct and the `AOTInductorModel` "
        "members the wheel's `model.h` declares), compiled and linked with `-Wl,--no-undefined` as above; then "
        "the same launchers built into a shared library, run in the host simulation by a C++ host that never "
        "loaded the patch set (`tooling/releases/aot_sim.py`).",
        "",
    ]
    if any("runtime" in r for r in rows):
        out[-1:] = [
            "**real runtime** runs the same sample launchers on torch_npu's own runtime "
            "(`tooling/releases/runtime_column.py`, `real_runtime.py`): the wheel's `libtorch_npu.so`, task queue, "
            "caching allocator and `OpCommand`, imported on the release's torch over the host ACL library (a test "
            "double of CANN, loaded only into the subprocesses the tier starts, never into a user's process); the "
            "torch is this interpreter's or a CPU build of the release's own (`line_python.py`), else the matrix's "
            "environment of the line (the package index's build, named), with exactly the torch the wheel requires "
            "where the line's environment has another patch release (that torch alone installed over it). Per line: the import, the launchers "
            "patched with `TASK_QUEUE_ENABLE` 1, 0 and 2 (clean = every launch got live, sized, disjoint, "
            "initialised memory from one caching-allocator request, no blocking call, all given back), and what "
            "the release's own launcher does as shipped (`TASK_QUEUE_ENABLE=1`); a line that cannot run says why "
            "in one line.",
            ""]
    has_aot = any("aot" in r for r in rows)
    head = ["release", "torch", "layout", "upstream", "after apply", "compile", "link", "simulation"]
    has_runtime = any("runtime" in r for r in rows)
    if has_runtime:
        head.append("real runtime")
    if has_aot:
        head.append("AOT")
    if has_flex:
        head.append("flex")
    out += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    details = []
    for r in rows:
        tier = r.get("tier")
        if "skip" in r:
            compile_c = link_c = sim = f"not checked: {r['skip']}"
            status = "not checked"
        else:
            status = r.get("status", "")
            if tier is None:
                compile_c = link_c = f"not run: {_short_reason(r.get('tier_skip'))}"
            elif tier["stage"] == "compile":
                compile_c, link_c = "**FAILED**", "not reached"
            else:
                compile_c = f"ok ({tier['info'].get('std')})"
                if tier["ok"]:
                    link_c = f"ok: {len(tier['accounting'])} undefined symbols, all provided"
                elif tier["unresolved"]:
                    link_c = "**FAILED**: " + ", ".join(f"`{p}`" for _, p in tier["unresolved"])
                else:
                    link_c = f"**FAILED** ({tier['stage']})"
            sim = r.get("simulation", "not run")
            if tier is None and r.get("tier_skip") and "could not render" in str(r.get("tier_skip")):
                sim = "not run: no launcher rendered"
            elif r.get("simulation_problems"):
                sim += ": " + "; ".join(r["simulation_problems"][:4])
        cells = [r["release"], r.get("torch", "?"), r.get("layout", "?"), r.get("upstream", "?"), status,
                 compile_c, link_c, sim]
        if has_runtime:
            cells.append(_no_paths(runtime_column.cell(r["runtime"])) if "runtime" in r else "not checked")
        if has_aot:
            cells.append(_aot_cell(r.get("aot")) if "skip" not in r else f"not checked: {r['skip']}")
        if has_flex:
            cells.append(_flex_cell(r.get("flex", "")))
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        if tier:
            info = tier["info"]
            details.append(f"- **{r['release']}**: torch from {_no_paths(info.get('torch'))}; {info.get('std')}; header from "
                           f"{info.get('header_from')}; stand-in headers: "
                           f"{', '.join(info.get('stand_in_headers') or []) or 'none'}; ACL stub: "
                           f"{info.get('acl_stub_functions')} functions from `{_short(info.get('acl_headers'))}`.")
            if tier["accounting"]:
                by: dict = {}
                for _, pretty, provider in tier["accounting"]:
                    by.setdefault(provider, []).append(pretty)
                counts = ", ".join(f"{k} {len(v)}" for k, v in sorted(by.items()))
                npu = "; ".join(f"`{x}`" for x in sorted(by.get("libtorch_npu.so", [])))
                details.append(f"  `nm -D -u` of the linked object, by provider: {counts}. From libtorch_npu.so: {npu}.")
            if not tier["ok"]:
                details.append("  ```\n  " + tier["message"].replace("\n", "\n  ") + "\n  ```")
        aot_tier = (r.get("aot") or {}).get("tier")
        if aot_tier:
            by_aot: dict = {}
            for _, pretty, provider in aot_tier["accounting"]:
                by_aot.setdefault(provider, []).append(pretty)
            npu_aot = "; ".join(f"`{x}`" for x in sorted(by_aot.get("libtorch_npu.so", [])))
            details.append(f"  AOT: header from {aot_tier['info'].get('header_from')}; model stand-in: "
                           f"{aot_tier['info'].get('model_stand_in')}; `nm -D -u` by provider: "
                           + ", ".join(f"{k} {len(v)}" for k, v in sorted(by_aot.items()))
                           + (f". From libtorch_npu.so: {npu_aot}." if npu_aot else "."))
    out += ["", "## Details", "", *details, "",
            "What stands in: `runtime/runtime/rt.h` comes with CANN, not with the wheels. Every wrapper header "
            "includes it; the stand-in (`real_artifacts.STAND_IN_HEADERS`) declares the two profiling types the "
            "kernel driver code names (`MsprofApi`, declared only, and `MsprofCommandHandle`, with the two fields "
            "that code reads) and, for the older layout, the rt* calls its loader and launchers make "
            "(`rtSetDevice`, `rtDevBinaryRegister`, `rtFunctionRegister`, `rtKernelLaunch`, `rtGetC2cCtrlAddr`, "
            "prototypes written from CANN's public documentation, constant values placeholders); those five link "
            "against a `libruntime.so` stub of the same names, so for them the check is by name only. The ACL "
            "stub is generated from each wheel's own headers. The older layout's header includes pybind11: its "
            "Python C API symbols are linked against the interpreter's own `libpython3.11.so`. Everything else "
            "(torch_npu, torch, c10, the C and C++ runtimes) is the real library.", ""]
    return "\n".join(out)


#: An absolute path of the machine that made a document (generated docs must not carry one).
ABSOLUTE_PATH = re.compile(r"(?<![\w.~])/(?:root|home|tmp|work|opt|usr|var|mnt)/[^\s)`'\";,]*")


def _no_paths(text) -> str:
    """``text`` without this machine's paths: "installed torch 2.7.1 (/root/.../python)" -> "installed torch 2.7.1"."""
    return re.sub(r"\s*\(\s*\)", "", ABSOLUTE_PATH.sub("", str(text or ""))).strip()


def _short(path) -> str:
    p = str(path or "")
    return p[p.find("torch_npu/include"):] if "torch_npu/include" in p else p


def add_arguments(p) -> None:
    p.add_argument("--list-releases", action="store_true", help="print the releases to check, one a line")
    p.add_argument("--imports-triton", metavar="RELEASE", help="exit 0 when RELEASE's Inductor code imports triton")
    p.add_argument("--releases", nargs="*", default=None)
    p.add_argument("--python", action="append", default=[], metavar="X.Y=PATH")
    p.add_argument("--no-python", action="append", default=[], metavar="X.Y=REASON")
    p.add_argument("--runtime-python", action="append", default=[], metavar="RELEASE=PATH",
                   help="the real runtime column's python for RELEASE (its exact torch), instead of the line's")
    p.add_argument("--required-torch", metavar="RELEASE", help="print the torch version RELEASE requires")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--no-simulation", action="store_true")
    p.add_argument("--no-real-runtime", action="store_true", help="leave out the real runtime column")
    p.add_argument("--json", type=Path, default=None, help="also write the raw rows here")
    p.add_argument("--command", default=None, help="the command line to name in the document")
    p.add_argument("--from-json", type=Path, default=None, help="re-render --out from a --json of an earlier run")


def run(args) -> int:
    if args.list_releases:
        versions, _ = index_versions()
        print("\n".join(releases(versions)))
        return 0
    if args.required_torch:
        print(ra.required_torch(args.required_torch))
        return 0
    if args.imports_triton:
        return 0 if imports_triton(args.imports_triton) else 1
    if args.from_json:  # re-render the document from a run's raw rows
        data = json.loads(args.from_json.read_text())
        if isinstance(data, list):  # written before the command and source were kept with the rows
            data = {"rows": data, "command": args.command or "bash .ci/release-matrix",
                    "source": "pip index versions torch-npu"}
        text = render_markdown(data["rows"], data["command"], data["source"])
        (args.out.write_text(text) if args.out else print(text))
        return 0
    versions, source = index_versions()
    chosen = args.releases or releases(versions)
    pythons = dict(x.split("=", 1) for x in args.python)
    reasons = dict(x.split("=", 1) for x in args.no_python)
    exact = dict(x.split("=", 1) for x in args.runtime_python)
    rows = []
    for rel in chosen:
        line = ra.line_of(rel)
        print(f"== {rel} (torch {line}: {pythons.get(line) or reasons.get(line)})", flush=True)
        row = check(rel, pythons.get(line), reasons.get(line), not args.no_simulation, not args.no_real_runtime,
                    exact.get(rel))
        if "runtime" in row:
            print(f"   real runtime ({row['runtime_s']} s): {runtime_column.cell(row['runtime'])}", flush=True)
        tier = row.get("tier")
        print(f"   {row.get('skip') or row.get('tier_skip') or tier['message'].splitlines()[0]}", flush=True)
        if row.get("simulation"):
            print(f"   simulation: {row['simulation']}", flush=True)
        if "aot" in row:
            print(f"   AOT: {_aot_cell(row['aot'])[:400]}", flush=True)
        rows.append(row)
    command = args.command or "python -m torch_npu._inductor.patchset.tooling.releases.release_matrix"
    text = render_markdown(rows, command, source)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
        print(f"wrote {args.out}")
    else:
        print(text)
    if args.json:
        args.json.write_text(json.dumps({"command": command, "source": source, "rows": rows}, indent=1, default=str))
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_npu._inductor.patchset.tooling.releases.release_matrix",
                                     description="run every release line; write docs/release-matrix.md")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
