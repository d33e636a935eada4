"""Every protected branch, and the released sources with each launcher shape, through
:func:`.upstream_patch_verify.verify`: ``docs/upstream-patches.md``.

Driven by ``.ci/upstream-patches``, which clones the branch bundle and finds one python per
torch line (the release matrix's venvs):

    python -m torch_npu._inductor.patchset.tooling.upstream.matrix --repo CLONE \\
        --out docs/upstream-patches.md --python 2.7=PATH ... [--no-python 2.9=why] [--branches b1 2.7.1.post11]

A name that is a release (``2.7.1.post11``) is that release's Python source
(:func:`.upstream_patch_verify.release_checkout`), built against its own wheel.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

from . import flex_loads
from . import patch as up
from . import verify as v

BRANCHES = ("master", "v2.7.1", "v2.7.1-26.1.0", "v2.9.0", "v2.9.0-26.1.0", "v2.10.0", "v2.10.0-26.1.0",
            "v2.11.0", "v2.11.0-26.1.0", "v2.12.0", "v2.12.0-26.1.0")
#: Released sources, one per launcher shape the patch knows: cpp_wrapper_npu with NULL pointers
#: (post10), codegen/cpp_wrapper.py (post6), upstream's own allocation on torch 2.7 (post11) and on
#: the newest torch with its newer wrapper API (2.14.0).
RELEASES = ("2.7.1.post10", "2.7.1.post6", "2.7.1.post11", "2.14.0")
_RELEASE = re.compile(r"\d+\.\d+\.\d+(?:\.post\d+)?")


def check(repo: Path, branch: str, pythons: dict, reasons: dict) -> dict:
    if _RELEASE.fullmatch(branch):
        return check_release(repo, branch, pythons, reasons)
    ref = up.branch_ref(repo, branch)
    try:
        patch = up.make_patch(repo, ref=ref, author=v.VERIFY_AUTHOR)
    except up.AlreadyFixed as exc:
        return {"name": branch, "result": "already fixed upstream", "detail": exc.where}
    except up.UpstreamPatchError as exc:
        return {"name": branch, "result": "cannot apply", "detail": str(exc)}
    sha = up._git(repo, "rev-parse", f"{ref}^{{commit}}").strip()
    with tempfile.TemporaryDirectory(prefix="upstream-matrix-") as d:
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(repo), f"{d}/co"], check=True)
        up._git(Path(d) / "co", "checkout", "-q", sha)
        line = v.torch_line(Path(d) / "co", branch)
    python = pythons.get(line)
    if python is None:
        return _unverified(branch, patch, line, reasons)
    return _verified(branch, lambda: v.verify(repo, ref, python, name=branch, line=line, patch=patch,
                                              wheel=v.BRANCH_WHEELS.get(branch)))


def _unverified(name: str, patch, line: str, reasons: dict) -> dict:
    """The row of a patch that applies where no python of its torch line could be had."""
    added, removed = patch.lines
    return {"name": name, "result": "applies (not verified)", "layout": patch.layout, "torch_line": line,
            "files": len(patch.files), "added": added, "removed": removed,
            "detail": f"no python with torch {line}: {reasons.get(line, 'none given')}"}


def _verified(name: str, verify) -> dict:
    """``verify()``'s row with its result in words; a crash of the verifier is a row too, with its traceback."""
    try:
        row = verify()
    except Exception as exc:
        return {"name": name, "result": "verification crashed",
                "detail": f"{type(exc).__name__}: {exc}\n{traceback.format_exc()[-1500:]}"}
    row["result"] = "applies" if row.get("applies") else "does not apply"
    return row


def check_release(repo: Path, version: str, pythons: dict, reasons: dict) -> dict:
    """A release's Python source (with its line's setup.py) as the target, built against its own wheel."""
    from ..releases import real_artifacts as ra

    line = ra.line_of(version)
    python = pythons.get(line)
    with tempfile.TemporaryDirectory(prefix="upstream-matrix-release-") as d:
        try:
            co = v.release_checkout(version, repo, Path(d) / "co")
            patch = up.make_patch(co, author=v.VERIFY_AUTHOR)
        except up.AlreadyFixed as exc:
            return {"name": version, "result": "already fixed upstream", "detail": exc.where}
        except Exception as exc:  # a wheel that cannot be had, an unknown shape: said, not hidden
            return {"name": version, "result": "cannot apply", "detail": f"{type(exc).__name__}: {exc}"}
        if python is None:
            return _unverified(version, patch, line, reasons)
        return _verified(version, lambda: v.verify(co, None, python, name=version, line=line, patch=patch,
                                                   wheel=version))


#: Paths of this machine, as the markdown names them instead (it is committed).
def _local_paths() -> list[tuple[str, str]]:
    from ..releases import real_artifacts as ra

    found = [(str(ra.REPO_ROOT), "<repo>"), (tempfile.gettempdir(), "<tmp>"), (str(Path.home()), "~")]
    return sorted(((p, name) for p, name in found if p and p != os.sep), key=lambda x: -len(x[0]))


def scrub(text: str) -> str:
    """``text`` with this machine's paths named as ``<repo>``, ``<tmp>``, ``~``."""
    for path, name in _local_paths():
        text = text.replace(path, name)
    return text


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", "<br>")


def _status_cell(after: dict, before: dict | None = None) -> str:
    from ... import _declarations

    keys = [d.id for d in _declarations.load()]  # every patch the runtime patch set declares
    if "error" in after:
        return f"not read: {after['error']}"
    cell = "<br>".join(f"{k}: **{after.get(k, '?')}**" for k in keys)
    if before:  # the runtime patch set on the unpatched head
        failed = sorted(k for k, v in before.items() if v == "failed")
        cell += "<br>unpatched head: " + (f"**failed** {', '.join(failed)}" if failed else "no `failed` row")
    return cell


def render_markdown(rows: list[dict], command: str) -> str:
    out = [
        "# The upstream patch on every protected torch_npu branch",
        "",
        f"Generated by `{command}` on {datetime.date.today().isoformat()}, from the bundle of torch_npu's "
        "protected branch heads (`shared/upstream/torch_npu-branches.bundle`), and the released Python sources "
        f"of {', '.join(RELEASES)} (each with its line's `setup.py`; built against its own wheel).",
        "",
        "Per branch: the patch `upstream-patch` writes for the branch head; whether `git am` applies it; files "
        "and lines it changes; **renders**: every sample kernel's launcher rendered by the patched code (patch set "
        "off) equals, line for line, what the runtime patch set renders on the unpatched head (include and "
        "versioning lines aside); **compiles / links**: those launchers against the headers of the line's torch_npu "
        "wheel with the patch's `torch_npu/csrc/inductor/` headers where `setup.py` installs them, linked "
        "`-Wl,--no-undefined` against its `libtorch_npu.so`; **runs**: the same launchers, with the helper the patch "
        "installs, on that wheel's own `libtorch_npu.so` (task queue, caching allocator, `OpCommand`) over the host "
        "ACL library (a test double of CANN, in a subprocess) with `TASK_QUEUE_ENABLE` 1, 0 and 2, or, where the "
        "wheel cannot run here (why, in the cell), in the host ACL simulation; **status after**: "
        "`status --against-source` on the patched head; **Flex loads**: where `kernel/flex_attention.py` loads "
        "pointer blocks it builds (torch_npu's own backward template: `kT`, `vT`, `qT`, `do`), each load as the "
        "file writes it, run by Triton's interpreter through its block on a tensor whose extent the block overruns "
        f"({len(flex_loads.CASES)} cases: `IS_DIVISIBLE` and `SAFE_HEAD_DIM` false together and alone, block sides "
        "equal and not), cases masked along the block's own axes, patched and unpatched; the patch reorders the "
        "loads that fail.",
        "",
        "| branch / release | layout | applies | changes | torch / wheel | renders | compiles, links | runs | "
        "status after | Flex loads |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        if "added" not in r:
            out.append(f"| `{r['name']}` | | {_cell(r['result'])} | | | | | | {_cell(r.get('detail', ''))} | |")
            continue
        changes = f"{r['files']} files, +{r['added']} -{r['removed']}"
        applies = "yes" if r.get("applies") else _cell(r.get("result"))
        if "rendered" not in r:
            out.append(f"| `{r['name']}` | {r['layout']} | {applies} | {changes} | {r.get('torch_line', '')} | "
                       f"not run | not run | not run | {_cell(r.get('detail', ''))} | {_loads_cell(r)} |")
            continue
        renders = (f"{r['rendered']}/{r['samples']}, same" if r.get("renders_same") else
                   _cell(f"{r['rendered']}/{r['samples']}: {r.get('render_errors') or r.get('render_diffs')}"))
        b = r.get("build", {})
        build = "yes" if b.get("ok") else _cell(f"no ({b.get('stage')}): {b.get('message', '')[:400]}")
        sim = runs_cell(r)
        out.append(f"| `{r['name']}` | {r['layout']} | {applies} | {changes} | torch {r['torch_line']}, "
                   f"{r.get('wheel')} | {renders} | {build} | {_cell(sim)} | "
                   f"{_status_cell(r['status_after'], r.get('status_before'))} | {_loads_cell(r)} |")
    out.append("")
    return scrub("\n".join(out))


def _loads_cell(r: dict) -> str:
    """Cases right per pointer load of the Flex template, patched and unpatched; where the branch has none, says so."""
    if "flex_loads" not in r:
        return "not run"
    found = r["flex_loads"]
    if found is None:
        return "no such loads"
    return "<br>".join(_cell(f"{when}: {flex_loads.summary(found[when])}") for when in ("patched", "unpatched")
                       if when in found)


def flex_loads_ok(r: dict) -> bool:
    """The patched template's loads (where the branch has them) all came back right."""
    return r.get("flex_loads") is None or r["flex_loads"]["patched"].get("ok", False)


def runs_cell(r: dict) -> str:
    """Where the patched launchers ran and what they got: the wheel's own runtime, else the simulation and why."""
    runtime = r.get("runtime") or {}
    if "summary" in runtime:
        problems = "; ".join(runtime.get("problems", [])[:3])
        return f"on torch_npu {runtime['release']}'s runtime: {runtime['summary']}" + (f": {problems}" if problems else "")
    sim = r.get("simulation", "not run")
    if r.get("simulation_problems"):
        sim += ": " + "; ".join(r["simulation_problems"][:3])
    return f"simulation: {sim}" + (f" (its runtime cannot run here: {runtime['cannot_run']})" if runtime else "")


def _write(args, previous: list, rows: list) -> list:
    fresh = {r["name"]: r for r in rows}
    merged = [fresh.pop(r["name"], r) for r in previous] + list(fresh.values())
    order = BRANCHES + RELEASES
    merged.sort(key=lambda r: order.index(r["name"]) if r["name"] in order else len(order))
    if args.json:
        args.json.write_text(json.dumps(merged, indent=1, default=str))
    if args.out:
        args.out.write_text(render_markdown(merged, args.command))
    return merged


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m torch_npu._inductor.patchset.tooling.upstream.matrix")
    p.add_argument("--repo", required=True, type=Path, help="a clone of the branch bundle")
    p.add_argument("--out", type=Path, help="markdown to write")
    p.add_argument("--json", type=Path, help="rows as JSON")
    p.add_argument("--command", default="bash .ci/upstream-patches")
    p.add_argument("--python", action="append", default=[], metavar="X.Y=PATH")
    p.add_argument("--no-python", action="append", default=[], metavar="X.Y=REASON")
    p.add_argument("--branches", nargs="*", default=list(BRANCHES + RELEASES),
                   help="branches of the bundle and releases (default: all of both)")
    p.add_argument("--merge", action="store_true",
                   help="keep the other branches' rows of the previous --json run (re-check only --branches)")
    args = p.parse_args(argv)
    pythons = dict(a.split("=", 1) for a in args.python)
    reasons = dict(a.split("=", 1) for a in args.no_python)
    previous = json.loads(args.json.read_text()) if args.merge and args.json and args.json.exists() else []
    rows = []
    for b in args.branches:
        print(f"== {b}", flush=True)
        row = check(args.repo, b, pythons, reasons)
        rows.append(row)
        print(f"   {row.get('result')}: renders_same={row.get('renders_same')} build={row.get('build', {}).get('ok')} "
              f"runs={runs_cell(row)} status_after={row.get('status_after')}", flush=True)
        _write(args, previous, rows)  # after every branch: a long run that is stopped keeps what it found
    rows = _write(args, previous, rows)
    good = all(r.get("renders_same") and r.get("build", {}).get("ok") and flex_loads_ok(r) for r in rows)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
