"""A released torch_npu wheel's own binaries over the host ACL library, in a subprocess.

The host ACL library (``tooling/sim/host_library.py``, ``sim/acl_sim/host/``) is a TEST DOUBLE of CANN's
runtime libraries: this module builds it for one wheel and runs Python code in a subprocess that loads
the wheel, unchanged, over it (chosen through ``LD_LIBRARY_PATH``). It never touches the calling
process, and nothing here is ever loaded into a user's process.

Interface (the real-runtime tier builds on it):
    extracted_wheel(release) -> Path          the whole wheel, extracted once (atomic, cached)
    needs(release) -> WheelNeeds              what the wheel asks of CANN (releases/wheel_needs.py)
    host_library(release) -> HostLibrary      the double built for the wheel (cached)
    runtime_dir(release) -> Path              folder holding the double under every needed file name
    subprocess_env(release, extra=None) -> dict
    python_for(release) -> str                the interpreter of the release's own torch line (line_python.py)
    run_python(release, code, *, env_extra=None, timeout=300, python=None) -> subprocess.CompletedProcess
                                              (+ .reports: what the child passed to send_report(), REPORT_SNIPPET)
    inventory(release) -> dict                imports / runtime_lookups / implemented / stated_noops / missing
    IMPORT_CHECK                              the import check's code (one report)

From the subprocess, the double's control surface (``acl_host_report_json``, ``acl_host_reset``, ...:
``sim/acl_sim/host/host_acl.h``) is reached with ctypes through :data:`CONTROL_SNIPPET`.

Command line::

    python -m torch_npu._inductor.patchset.tooling.releases.host_runtime inventory RELEASE [--json]
    python -m torch_npu._inductor.patchset.tooling.releases.host_runtime import-check RELEASE [--task-queue N]
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from functools import lru_cache
from pathlib import Path

from ..sim import host_library
from . import line_python, wheel_needs, wheels

__all__ = ["extracted_wheel", "needs", "host_library_for", "runtime_dir", "subprocess_env", "run_python",
           "inventory", "import_check", "IMPORT_CHECK", "CONTROL_SNIPPET", "REPORT_SNIPPET", "torch_lib_dir",
           "python_for"]

_RELEASE = re.compile(r"^\d+\.\d+\.\d+(?:\.post\d+)?$")


def _check_release(release: str) -> str:
    """A released version; or any version whose installed files serve it (a local build: ``2.7.1+git...``)."""
    if not _RELEASE.match(release or "") and wheels.installed_site(release) is None:
        raise wheels.WheelUnavailable(f"{release!r} is not a torch_npu release (e.g. 2.7.1.post10)")
    return release


def extracted_wheel(release: str) -> Path:
    """The whole wheel of ``release`` (``torch_npu/``, its dist-info, ...), extracted once beside the
    wheel cache's Python-only extraction, into a folder of its own then renamed into place (the installed
    files instead, within ``real_artifacts.installed``: ``wheels.installed_site``)."""
    _check_release(release)
    site = wheels.installed_site(release)
    if site is not None:
        return site
    dest = wheels.cache_dir() / "extracted-whole" / release
    if (dest / ".complete").exists():
        return dest
    wheel = wheels.wheel_path(release)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{release}-", dir=dest.parent))
    try:
        with zipfile.ZipFile(wheel) as zf:
            zf.extractall(tmp)
        for so in tmp.rglob("*.so*"):  # zip members lose their mode bits
            so.chmod(0o755)
        (tmp / ".complete").write_text(wheel.name + "\n")
        try:
            os.rename(tmp, dest)
        except OSError:
            if not (dest / ".complete").exists():
                raise
    except zipfile.BadZipFile as exc:
        raise wheels.WheelUnavailable(f"{wheel} is not a valid wheel ({exc}); delete it to download again") from exc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


@lru_cache(maxsize=None)
def torch_lib_dir(python: str | None = None) -> Path:
    """The ``torch/lib`` of ``python``'s torch (this interpreter's by default), found without importing torch."""
    if python is None or python == sys.executable:
        spec = importlib.util.find_spec("torch")
        where = list(spec.submodule_search_locations)[0] if spec and spec.submodule_search_locations else None
    else:
        proc = subprocess.run([python, "-c", "import importlib.util as u; s = u.find_spec('torch'); "
                               "print(list(s.submodule_search_locations)[0] if s else '')"],
                              capture_output=True, text=True, timeout=120)
        where = proc.stdout.strip() or None
    if not where:
        raise RuntimeError(f"torch is not installed for {python or sys.executable}")
    return Path(where) / "lib"


@lru_cache(maxsize=None)
def python_for(release: str) -> str:
    """The interpreter that runs ``release`` on its own torch line (releases/line_python.py); raises
    ``line_python.LineUnavailable`` (one line: why) where none can here."""
    return line_python.python_for(release)


@lru_cache(maxsize=None)
def needs(release: str) -> wheel_needs.WheelNeeds:
    """What the wheel asks of CANN, beside the torch it runs on (this interpreter's where its line has
    none here: the double is still built and checked, only not imported)."""
    try:
        python = python_for(release)
    except line_python.LineUnavailable:
        python = None
    return wheel_needs.read_needs(extracted_wheel(release), torch_lib_dir(python))


@lru_cache(maxsize=None)
def host_library_for(release: str) -> host_library.HostLibrary:
    n = needs(release)
    return host_library.build(n.root / "torch_npu" / "include", n.imports,
                              [*n.lookup_candidates, *n.launcher_calls], n.library_names)


def runtime_dir(release: str) -> Path:
    """Folder holding the host ACL library under every file name the wheel needs (built if needed)."""
    return host_library_for(release).folder


def subprocess_env(release: str, extra: dict | None = None) -> dict:
    """A copy of os.environ for a subprocess that loads ``release`` over the double: its folder first
    on LD_LIBRARY_PATH, the extracted wheel first on PYTHONPATH (``import torch_npu`` and torch's
    autoload of it find the wheel), autoload on. ``extra`` is applied last."""
    folder = runtime_dir(release)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join([str(folder), *filter(None, [env.get("LD_LIBRARY_PATH")])])
    env["PYTHONPATH"] = os.pathsep.join([str(extracted_wheel(release)), *filter(None, [env.get("PYTHONPATH")])])
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "1"
    env["ACL_HOST_LIBRARY"] = str(folder / host_library.LIBRARY)
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def run_python(release: str, code: str, *, env_extra: dict | None = None, timeout: float = 300,
               python: str | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` in a subprocess over the double, with ``python`` (default :func:`python_for`: this
    interpreter, the leg's, when its torch is the release's line). Its working directory is an empty
    folder: ``python -c`` puts the working directory first on sys.path, and a torch_npu checkout there
    would shadow the wheel."""
    env = subprocess_env(release, env_extra)
    with tempfile.TemporaryDirectory(prefix="host-runtime-") as cwd:
        reports = Path(cwd) / "reports.jsonl"
        env[REPORT_ENV] = str(reports)
        proc = subprocess.run([python or python_for(release), "-c", code], capture_output=True, text=True,
                              timeout=timeout, env=env, cwd=cwd)
        proc.reports = [json.loads(x) for x in reports.read_text().splitlines()] if reports.exists() else []
        return proc


def inventory(release: str) -> dict:
    """Per wheel: what it imports and resolves at run time, and what the double does with each."""
    n, lib = needs(release), host_library_for(release)
    m = lib.manifest
    undeclared = set(m["undeclared_lookups"])
    operators = sorted({c[:-len("GetWorkspaceSize")] for c in n.lookup_candidates
                        if c.startswith("aclnn") and c.endswith("GetWorkspaceSize")})
    return {
        "release": release,
        "imports": n.imports,
        "runtime_lookups": sorted(set(n.lookup_candidates) - undeclared),
        "launcher_calls": n.launcher_calls,
        "implemented": m["implemented"],
        "stated_noops": m["stated_noops"],
        "missing": m["missing"],
        "missing_cannot_fail": m["missing_cannot_fail"],
        "missing_without_prototype": m["missing_without_prototype"],
        # names no header declares: absent from the double (dlsym answers NULL); op-api operators apart
        "undeclared_lookups": sorted(u for u in undeclared if not u.startswith("aclnn")),
        "opapi_operators": {"named": len(operators),
                            "implemented": [o for o in operators if o in m["implemented"]]},
        "imports_not_c": n.imports_not_c,
        "library_names": m["library_names"],
        "dlopened": n.dlopened,
        "unclassified_libraries": n.unclassified_libraries,
        "skipped_objects": wheel_needs.SKIPPED_OBJECTS,
        "prototype_source": m["prototype_source"],
        "runtime_dir": str(lib.folder),
    }


#: The file a child of :func:`run_python` reports to, a JSON object a line. Not stdout: torch_npu's own C++
#: writes there too (from its queue thread, unsynchronised with Python's buffer), and on a loaded machine its
#: warning once landed inside the facts' line (CI, test_host_acl on 2.7.1.post11).
REPORT_ENV = "HOST_RUNTIME_REPORT"
REPORT_SNIPPET = r"""
import json as _json, os as _os
def send_report(obj):
    with open(_os.environ["HOST_RUNTIME_REPORT"], "a") as f:
        f.write(_json.dumps(obj) + "\n")
"""

#: Loads the double's control surface in the subprocess (the object torch_npu loaded: same file).
CONTROL_SNIPPET = REPORT_SNIPPET + r"""
import ctypes, json, os
_acl_host = ctypes.CDLL(os.environ["ACL_HOST_LIBRARY"])
_acl_host.acl_host_report_json.restype = ctypes.c_char_p
def acl_host_report():
    return json.loads(_acl_host.acl_host_report_json().decode())
def acl_host_reset():
    _acl_host.acl_host_reset()
"""

#: The import check: one report.
IMPORT_CHECK = CONTROL_SNIPPET + r"""
import sys, threading
facts = {}
import torch, torch_npu
facts["imported"] = torch_npu.__file__
facts["torch"] = torch.__version__
facts["is_available"] = bool(torch.npu.is_available())
facts["device_count"] = torch.npu.device_count()
torch.npu.set_device(0)
t = torch.empty(1 << 20, device="npu")
facts["allocated"] = torch.npu.memory_allocated()
facts["reserved"] = torch.npu.memory_reserved()
src = torch.arange(1 << 20, dtype=torch.float32)
t.copy_(src.pin_memory(), non_blocking=True)  # torch_npu queues a page-locked copy on its task queue
facts["round_trip"] = bool(torch.equal(t.cpu(), src))
torch.npu.synchronize()
del t
torch.npu.empty_cache()
facts["reserved_after_empty_cache"] = torch.npu.memory_reserved()
report = acl_host_report()
main = threading.get_native_id()
def callers(name):
    return sorted(int(k) for k in report["calls"].get(name, {}).get("threads", {}))
work = [n for n in ("aclrtMemcpyAsync", "aclrtMemcpy", "aclrtMemsetAsync", "aclrtLaunchKernelWithHostArgs")]
facts["work_threads"] = sorted({t for n in work for t in callers(n)})
facts["queue_thread_ran_work"] = any(t != main for t in facts["work_threads"])
facts["main_thread"] = main
facts["malloc"] = {n: report["calls"].get(n, {}).get("calls", 0) for n in ("aclrtMalloc", "aclrtMallocAlign32")}
facts["frees"] = report["calls"].get("aclrtFree", {}).get("calls", 0)
facts["missing_calls"] = report["missing_calls"]
facts["errors"] = report["errors"]
send_report(facts)
"""


def import_check(release: str, task_queue: str = "1", timeout: float = 300) -> dict:
    """Run :data:`IMPORT_CHECK` over the double; its facts, or ``{"error": ...}`` with the tail of stderr."""
    proc = run_python(release, IMPORT_CHECK, env_extra={"TASK_QUEUE_ENABLE": task_queue}, timeout=timeout)
    if not proc.reports:
        said = [x for x in proc.stderr.strip().splitlines() if not x.startswith(("frame #", "<omitting"))]
        return {"error": f"exit {proc.returncode}: " + "\n".join(said[-15:])}
    facts = proc.reports[-1]
    facts["stderr_tail"] = proc.stderr.strip().splitlines()[-5:]
    return facts


# ---- command line -----------------------------------------------------------------------------------
def _print_inventory(inv: dict) -> None:
    print(f"torch_npu {inv['release']}: host ACL library in {inv['runtime_dir']}")
    print(f"  library names: {' '.join(inv['library_names'])}")
    print(f"  imports: {len(inv['imports'])}; run-time lookups: {len(inv['runtime_lookups'])}; "
          f"launcher calls: {len(inv['launcher_calls'])}")
    print(f"  implemented: {len(inv['implemented'])}; stated no-ops: {len(inv['stated_noops'])}; "
          f"missing (fail loudly): {len(inv['missing'])}")
    ops = inv["opapi_operators"]
    print(f"  op-api operators the wheel names: {ops['named']}; implemented: {' '.join(ops['implemented']) or 'none'} "
          "(the others absent: op-plugin falls back to aclop, or stops on 'not found': loudly either way)")
    for name, why in sorted(inv["stated_noops"].items()):
        print(f"  no-op {name}: {why}")
    if inv["missing_without_prototype"]:
        print(f"  missing without a prototype: {' '.join(inv['missing_without_prototype'])}")
    if inv["unclassified_libraries"]:
        print(f"  library names not classified: {' '.join(inv['unclassified_libraries'])}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_npu._inductor.patchset.tooling.releases.host_runtime")
    sub = parser.add_subparsers(dest="cmd", required=True)
    inv = sub.add_parser("inventory", help="what the wheel needs of CANN and what the host ACL library does")
    inv.add_argument("release")
    inv.add_argument("--json", action="store_true")
    chk = sub.add_parser("import-check", help="import the wheel over the host ACL library in a subprocess")
    chk.add_argument("release")
    chk.add_argument("--task-queue", default="1", choices=["0", "1", "2"], help="TASK_QUEUE_ENABLE")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        _check_release(args.release)
        if args.cmd == "inventory":
            data = inventory(args.release)
            if args.json:
                print(json.dumps(data, indent=1, sort_keys=True))
            else:
                _print_inventory(data)
            return 0
        facts = import_check(args.release, args.task_queue)
    except wheels.WheelUnavailable as exc:
        print(f"host_runtime: {exc}", file=sys.stderr)
        return 2
    except line_python.LineUnavailable as exc:
        print(f"import-check {args.release}: cannot run here: {exc}")
        return 1
    if "error" in facts:
        print(f"import-check {args.release}: failed: {facts['error']}")
        return 1
    print(f"imported: {facts['imported']} (torch {facts['torch']})")
    print(f"is_available: {facts['is_available']} ({facts['device_count']} devices)")
    print(f"allocator: memory_allocated {facts['allocated']}, memory_reserved {facts['reserved']} "
          f"(after empty_cache {facts['reserved_after_empty_cache']}); device allocations {facts['malloc']}")
    print(f"round trip through the device: {facts['round_trip']}")
    print(f"queue thread seen (TASK_QUEUE_ENABLE={args.task_queue}): {facts['queue_thread_ran_work']} "
          f"(work on threads {facts['work_threads']}, main {facts['main_thread']})")
    print(f"missing functions called: {facts['missing_calls'] or 'none'}; error reports: {len(facts['errors'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
