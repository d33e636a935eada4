"""Step 4 of a release's way (``runtime_build.py`` says the whole): a child started on its own runtime (the
interpreter of its torch line, ``host_runtime.subprocess_env``: the wheel over the host ACL library), waited for while
it progresses. The children's own watchdog is ``child_watch.py``: both bounds are on a stall, never on a run's total
time.
"""
from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

from . import host_runtime
from .runtime_build import line_python

CHILD = Path(__file__).with_name("real_runtime_child.py")
LAUNCHES = 2  # per launcher, back to back on one stream, as --simulate makes them


#: The parent's own bound on a child that stopped making progress (its result file unchanged) and that its watchdog
#: did not stop (a hang holding the GIL): seconds beyond the child's own bounds. A hang bound only: a child that
#: progresses is never stopped by it, however slowly it goes.
PARENT_GRACE_S = 120


def run_child(release: str, spec: dict, *, queue: str = "1", timeout: float = 300,
              env_extra: dict | None = None, child: Path = CHILD) -> dict:
    """``child`` (``real_runtime_child.py``; the explorer's is another) for ``spec`` in the host runtime's environment,
    with ``TASK_QUEUE_ENABLE=queue``:
    its result, ``exit_code`` and, when its watchdog or this parent stopped it, ``timed_out``. ``timeout``: how long
    the child may go without progress once torch_npu is imported and its launchers loaded (its watchdog: a
    self-wait or a hang is stopped ``timeout`` seconds after the child last reported progress, with every thread's
    stack). No bound here is on the run's total time: a loaded machine makes a run slower, never a failure."""
    with tempfile.TemporaryDirectory(prefix="real-runtime-") as tmp:
        out = Path(tmp) / "result.json"
        spec = dict(spec, out=str(out), stall_s=float(timeout))
        if "binary" in spec:
            cubins = Path(tmp) / "cubin"
            cubins.mkdir()
            for name in {ln["cubin"] for ln in spec["launchers"]}:
                (cubins / name).write_text(spec["binary"])
            spec["cubin_dir"] = str(cubins)
        (Path(tmp) / "spec.json").write_text(json.dumps(spec))
        env = host_runtime.subprocess_env(release, {"TASK_QUEUE_ENABLE": queue, **(env_extra or {})})
        code, stderr = start_and_wait(release, child, Path(tmp) / "spec.json", out, env, timeout)
        result = json.loads(out.read_text()) if out.exists() else {"steps": [], "done": False}
    result["exit_code"] = code
    if code is None or result.get("timed_out"):
        result["timed_out"] = True
    if code != 0:
        result["stderr_tail"] = stderr.strip()[-3000:]
    return result


#: real_runtime_child.IMPORT_BOUND_S (the child is never imported here), the benchmark child's ``import_bound_s``.
CHILD_IMPORT_BOUND_S = 900.0


def start_and_wait(release: str, child: Path, spec: Path, out: Path, env: dict, timeout: float,
                   cwd: str | None = None) -> tuple[int | None, str]:
    """``child`` started on ``release``'s own torch line with ``spec``, waited for while it progresses
    (:func:`wait_while_progressing`: its watchdog stops a stall after ``timeout`` seconds; this parent a child
    whose result file ``out`` stopped changing past every bound of the child's own): (exit code or None, stderr)."""
    proc = subprocess.Popen([line_python(release), "-P", str(child), str(spec)], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return wait_while_progressing(proc, out, max(timeout, CHILD_IMPORT_BOUND_S) + PARENT_GRACE_S)


def wait_while_progressing(proc: subprocess.Popen, out: Path, stall: float) -> tuple[int | None, str]:
    """Waits for ``proc``; kills it once its result file ``out`` went ``stall`` seconds unchanged: (exit code or
    None when killed, stderr)."""
    seen, last = None, time.monotonic()
    while True:
        try:
            _, stderr = proc.communicate(timeout=2)
            return proc.returncode, stderr
        except subprocess.TimeoutExpired:
            stamp = out.stat().st_mtime_ns if out.exists() else None
            if stamp != seen:
                seen, last = stamp, time.monotonic()
            elif time.monotonic() - last > stall:
                proc.kill()
                _, stderr = proc.communicate()
                return None, stderr
