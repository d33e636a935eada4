"""The release matrix's ``real runtime`` column: each release line on torch_npu's own runtime.

Per release (``release_matrix.py`` asks, ``.ci/release-matrix`` runs it outside CI): whether the wheel's
``torch_npu`` imports on its own torch line over the host ACL library (``host_runtime.py``: a TEST DOUBLE of
CANN, loaded only into the subprocesses the tier starts, never into a user's process); whether the sample
launchers run clean patched, with every ``TASK_QUEUE_ENABLE`` value; and what the release's own launcher does
as shipped (``real_runtime.run_tags``). A release that cannot run here gets one line that says why.

Which Python: ``line_python.python_for`` (this interpreter when its torch is the release's, else a CPU build of
it); where there is none, the matrix's environment of the torch line (the package index's build, named in the
cell), assigned to the release while it runs. The index's CUDA builds of torch 2.10 and later abort torch_npu's
import (a duplicate allocator key): that is measured, not assumed.

Pure functions decide what the cell says (:func:`cell`, :func:`reason_line`, :func:`shipped_summary`,
:func:`patched_summary`); :func:`measure` is the glue.
"""
from __future__ import annotations

import contextlib
import re
import subprocess

from . import host_runtime, line_python, wheels
from . import real_runtime as rr

#: The renderings the column runs: the patch set with every TASK_QUEUE_ENABLE value, the release as shipped
#: with torch_npu's default queue (the same plan the real-runtime tests run, so their runs answer it too).
PLAN = {"patched": rr.QUEUE_MODES, "upstream": ("1",)}

#: A launch's problem (the judge's words) -> what the column calls it, and whether it is a cause (always named) or
#: a consequence of one (named only for a sample that shows no cause): the first that matches names it.
PHRASES = (
    ("a sync pointer is null", "NULL pointers", True),
    ("regions overlap", "locks and workspace alias", True),
    ("host ACL library: region-overlap", "locks and workspace alias", True),
    ("region has", "a region smaller than the kernel uses", True),
    ("blocking aclrtMemcpy on the torch_npu's task-queue thread", "blocking aclrtMemcpy on the queue thread", True),
    ("blocking aclrtMemcpy", "blocking aclrtMemcpy on the calling thread", True),
    ("device allocations on torch_npu's task-queue thread", "the workspace allocator grows on the queue thread", True),
    ("stream or device synchronisations", "synchronisations during the launch", True),
    ("ran 0 times", "a kernel never ran (torch_npu's queue stopped)", True),
    ("requests to torch_npu's caching allocator", "several allocator requests per launch", True),
    ("the launch threw", "the launch threw", True),
    ("does not implement", "ACL functions the host ACL library does not implement", True),
    ("lock content at start", "lock content not what the kernel expects", False),
    ("locks or workspace were disturbed", "locks or workspace disturbed while the kernel ran", False),
    ("host ACL library: locks-changed", "locks or workspace disturbed while the kernel ran", False),
    ("launched from nowhere", "no launch call", False),
    ("could not be held", "torch_npu's queue could not be held", False),
    ("host ACL library:", None, False),  # named by kind
)

#: Lines of a failed import that say what went wrong, most telling first (torch's and torch_npu's own words).
_TELLING = (r"Duplicated key", r"\b\w*Error\b:", r"terminate called", r"undefined symbol", r"Abort|abort",
            r"[Ee]rror")


def reason_line(text: str, limit: int = 300) -> str:
    """A failure of many lines (a child's stderr, a traceback) as the one line that says most."""
    lines = [ln.strip() for ln in str(text).splitlines()
             if ln.strip() and not ln.lstrip().startswith(("frame #", "<omitting", "File ", "Traceback"))]
    for pattern in _TELLING:
        hit = next((ln for ln in reversed(lines) if re.search(pattern, ln)), None)
        if hit is not None:
            return re.sub(r"^what\(\):\s*", "", hit)[:limit]
    return (lines[-1] if lines else "no output")[:limit]


def phrase(problem: str) -> tuple[str, bool]:
    """What the column calls one problem of a launch (the judge's words, shortened, without counts), and
    whether it is a cause (:data:`PHRASES`; a problem it does not know is one)."""
    for needle, name, cause in PHRASES:
        if needle in problem:
            if name is None:
                kind = re.match(r"host ACL library: ([\w-]+)", problem)
                name = f"host ACL library reports {kind.group(1) if kind else 'an error'}"
            return name, cause
    return re.sub(r" \(launch \d+\)", "", problem)[:120], True


def compact(out: dict) -> dict:
    """One rendering's runs (``run_tags``) as the column keeps them: per sample, ok and what went wrong (each
    problem of its launches and runs once, in the order first seen)."""
    samples = []
    for row in out["samples"]:
        found: list[str] = []
        for run in row["runs"].values():
            for p in [x for launch in run["launches"] for x in launch["problems"]] + [run.get("failure")]:
                if p and p not in found:
                    found.append(p)
        samples.append({"sample": row["sample"], "ok": row["ok"], "problems": found})
    return {"queues": list(out["queues"]), "samples": samples}


def _tally(kept: dict) -> tuple[int, int, str]:
    """(samples failed, samples, what failed: each phrase, with how many samples unless all the failed ones)."""
    counts: dict[str, int] = {}
    failed = [s for s in kept["samples"] if not s["ok"]]
    for s in failed:
        named = [phrase(x) for x in s["problems"]]
        causes = [n for n, cause in named if cause]
        for p in dict.fromkeys(causes or [n for n, _ in named]):
            counts[p] = counts.get(p, 0) + 1
    ordered = sorted(counts.items(), key=lambda kv: -kv[1])  # stable: first seen first among equals
    listing = ", ".join(p if n == len(failed) else f"{p} ({n})" for p, n in ordered)
    return len(failed), len(kept["samples"]), listing


def patched_summary(kept: dict) -> str:
    queues = ", ".join(kept["queues"])
    failed, total, listing = _tally(kept)
    if not failed and total:
        return f"patched: {total}/{total} samples clean (TASK_QUEUE_ENABLE {queues})"
    return f"patched: **{failed}/{total} fail** (TASK_QUEUE_ENABLE {queues}): {listing}"


def shipped_summary(kept: dict) -> str:
    failed, total, listing = _tally(kept)
    if not failed:
        return f"as shipped: {total}/{total} samples clean"
    return f"as shipped: {failed}/{total} fail: {listing}"


def from_runs(outs: dict, python_note: str = "") -> dict:
    """The column's facts from ``real_runtime.run_tags(release, PLAN)`` (what the JSON of a matrix run keeps)."""
    patched = outs["patched"]
    first = next(iter(patched["runs"].values()))
    if not first.get("torch"):  # the child never got torch_npu imported
        return {"cannot_run": f"torch_npu did not import over the host ACL library: {first.get('failure')}"}
    return {"torch": first["torch"], "torch_npu": first["torch_npu"], "import_s": first["import_s"],
            "launch_api": patched.get("launch_api"), "python_note": python_note,
            "patched": compact(patched), "upstream": compact(outs["upstream"])}


def cell(result: dict) -> str:
    """The column's text: three facts (import, patched, as shipped), or ONE line saying why it cannot run."""
    if "cannot_run" in result:
        return "cannot run here: " + " ".join(str(result["cannot_run"]).split())
    note = f", {result['python_note']}" if result.get("python_note") else ""
    return "<br>".join([f"imports on torch {result['torch']} ({result['import_s']} s{note})",
                        patched_summary(result["patched"]), shipped_summary(result["upstream"])])


@contextlib.contextmanager
def assigned(release: str, python: str):
    """``python`` runs ``release`` while the block runs (``line_python.assign``), then no longer."""
    line_python.assign(release, python)
    host_runtime.python_for.cache_clear()
    try:
        yield
    finally:
        line_python.unassign(release)
        host_runtime.python_for.cache_clear()


#: Prints the torch version an interpreter has, with its build (``torch/version.py``: "2.10.0+cu128"), without
#: importing torch (an import that aborts is what the column measures, later, over the host ACL library).
_TORCH_VERSION = r'''
import importlib.util, pathlib, re
spec = importlib.util.find_spec("torch")
f = pathlib.Path(list(spec.submodule_search_locations)[0], "version.py") if spec else None
m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", f.read_text()) if f and f.exists() else None
print(m.group(1) if m else "none")
'''


def torch_of(python: str) -> str:
    """The torch version ``python`` has installed, with its build (torch is not imported)."""
    proc = subprocess.run([python, "-c", _TORCH_VERSION], capture_output=True, text=True, timeout=120)
    return proc.stdout.strip() or "none"


def choose_python(release: str, line_env: str | None) -> tuple[str | None, str]:
    """(the interpreter for ``release``, how it was chosen), or (None, why there is none: one line)."""
    try:
        return line_python.python_for(release), ""
    except line_python.LineUnavailable as exc:
        if line_env is None:
            return None, " ".join(str(exc).split())
    return line_env, "the release matrix's environment of the line (the package index's build)"


def measure(release: str, line_env: str | None = None, no_env: str | None = None, timeout: float = 300) -> dict:
    """The column's facts for ``release``: ``line_env`` is the matrix's Python of its torch line (or ``no_env``,
    why there is none), used where ``line_python`` finds no interpreter of the release's own."""
    python, how = choose_python(release, line_env)
    if python is None:
        return {"cannot_run": how + (f"; the matrix made no environment of the line: {no_env}" if no_env else "")}
    torch = torch_of(python)
    want = line_python.required_torch(release)
    note = ("" if not how else f"the package index's build; the wheel requires torch {want}"
            if torch.split("+")[0] != want else "the package index's build")
    try:
        with assigned(release, python):
            facts = host_runtime.import_check(release, timeout=timeout)
            if "error" in facts:
                return {"cannot_run": f"on torch {torch}{f' ({note})' if note else ''} torch_npu does not import over "
                                      f"the host ACL library: {reason_line(facts['error'])}"}
            outs = rr.run_tags(release, PLAN, timeout=timeout)
    except (rr.RealRuntimeError, wheels.WheelUnavailable, line_python.LineUnavailable,
            subprocess.TimeoutExpired) as exc:
        return {"cannot_run": reason_line(str(exc))}
    return from_runs(outs, note)
