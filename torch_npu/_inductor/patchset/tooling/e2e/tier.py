"""Run the user's job (flex_job.py) in a child over a released wheel and the host ACL library.

    run_job(release, patched=True, one_pass=None) -> dict

The verdict: the child's result (each sequence length's forward and backward, the frames compiled, the
host ACL library's report), the C++ wrappers Inductor generated, and what the compiler stand-in
reported for each kernel it compiled. Cached by everything that decides it (the patch set's runtime, this
tier's files, the host ACL library built for the wheel, torch, the job's sizes): the tests and the demo
share one run of the same code.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path

from ..releases import host_runtime, real_artifacts
from ..upstream import test_text
from . import compiler_stand_in, stand_ins

JOB = Path(__file__).with_name("flex_job.py")
RUNTIME_STAND_INS = Path(__file__).with_name("runtime_stand_ins.py")
EXECUTOR = Path(__file__).with_name("executor.py")
#: Multiples of 128 (see flex_job.py), several, to show one compile serves them; their mask block counts
#: (5, 6, 8) differ from the batch and head counts, which Dynamo would otherwise guard equal ("duck sizing").
SEQ_LENS = (640, 768, 1024)
#: Batch, heads and head size: B and H above 1, so that Dynamo keeps them symbolic (with 1 it specialises).
BATCH, HEADS, DIM = 2, 4, 64


def _key(*parts) -> str:
    """What decides a run: the patch set's runtime files, this tier's, the host ACL library's build, torch."""
    patchset = real_artifacts.PATCHSET_DIR
    files = sorted(p for p in patchset.rglob("*") if p.is_file() and p.suffix in (".py", ".h")
                   and ("tooling" not in p.relative_to(patchset).parts or p.parent == JOB.parent
                        or p == Path(test_text.__file__)))  # the job's body is the upstream test's
    h = hashlib.sha256(repr(parts).encode())
    for p in files:
        h.update(str(p.relative_to(patchset)).encode() + p.read_bytes())
    import torch
    h.update(f"{host_runtime.runtime_dir(parts[0])}|{torch.__version__}|{stand_ins.KERNEL_NEEDS}|"
             f"{sorted(real_artifacts.STAND_IN_HEADERS.items())}".encode())  # the stand-in CANN headers it builds with
    return h.hexdigest()[:16]


@lru_cache(maxsize=None)
def run_job(release: str, *, patched: bool, one_pass: bool | None, seq_lens: tuple[int, ...] = SEQ_LENS,
            batch: int = BATCH, heads: int = HEADS, dim: int = DIM, divisible: bool = True, execute: bool = True,
            timeout: float = 1200) -> dict:
    """``one_pass``: ``triton.autotune_at_compile_time`` (None: torch's default, which is one pass when triton is
    there); ``divisible``: the job says ``IS_DIVISIBLE`` (its lengths must then be multiples of 128); ``execute``:
    the compiled kernels run (the executor stand-in, executor.py) and the gradients are compared."""
    cached = real_artifacts.CACHE_ROOT / "e2e" / "results" / (
        _key(release, patched, one_pass, seq_lens, batch, heads, dim, divisible, execute) + ".json")
    if cached.exists():
        return {**json.loads(cached.read_text()), "cached": True}
    result = _run(release, patched, one_pass, seq_lens, batch, heads, dim, divisible, execute, timeout)
    if result.get("done") or result.get("runs"):  # a verdict; a child that died early is never kept
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(result))
        os.replace(tmp, cached)
    return {**result, "cached": False}


def _run(release: str, patched: bool, one_pass: bool | None, seq_lens: tuple[int, ...], batch: int, heads: int,
         dim: int, divisible: bool, execute: bool, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="e2e-flex-") as tmp:
        work = Path(tmp)
        out, log = work / "result.json", work / "compiled.jsonl"
        spec = {"out": str(out), "batch": batch, "heads": heads, "dim": dim, "seq_lens": list(seq_lens),
                "one_pass": one_pass, "divisible": divisible, "stand_ins": str(RUNTIME_STAND_INS),
                "upstream_test": str(work / "upstream_test.py"), "executor": str(EXECUTOR) if execute else None,
                "manifest": str(work / "kernels.jsonl")}
        (work / "upstream_test.py").write_text(test_text.text("", ""))  # its test body; no branch file is read
        (work / "spec.json").write_text(json.dumps(spec))
        env = stand_ins.child_env(release, patched=patched, work=work)
        env[compiler_stand_in.KERNELS_ENV] = json.dumps(stand_ins.KERNEL_NEEDS)
        env[compiler_stand_in.LOG_ENV] = str(log)
        env[compiler_stand_in.MANIFEST_ENV] = spec["manifest"]
        (work / "cwd").mkdir()
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, str(JOB), str(work / "spec.json")], cwd=work / "cwd", env=env,
                              capture_output=True, text=True, timeout=timeout)
        result = json.loads(out.read_text()) if out.exists() else {"done": False}
        result.update(release=release, patched=patched, one_pass=one_pass, returncode=proc.returncode,
                      seconds=round(time.perf_counter() - started, 1), stderr_tail=proc.stderr[-4000:])
        result["compiled"] = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
        sources = {str(p.relative_to(work)): p.read_text() for p in sorted((work / "inductor").rglob("*.cpp"))}
        result["wrappers"] = {name: text for name, text in sources.items() if "launchKernel" in text}
        return result


def summary(result: dict) -> str:
    """One line per length, for messages: each step, and the gradients' comparison with eager where the kernels ran."""
    def grads(r: dict) -> str:
        errors = r.get("grad_errors")
        return "" if not errors else ", " + " ".join(
            f"{k} {'close' if e['close'] else 'DIFFERS'} (max abs {e['max_abs']:.1e}, rel {e['max_rel']:.1e})"
            for k, e in errors.items())
    runs = "; ".join(f"S={r['seq_len']}: " + (r.get("error") or f"forward {r.get('forward')}, backward "
                                               f"{r.get('backward')}{grads(r)}") for r in result.get("runs", []))
    return (f"{result['release']} patched={result['patched']} one_pass={result['one_pass']} "
            f"rc={result['returncode']} done={result.get('done')} ({result['seconds']} s): {runs}")


if __name__ == "__main__":  # python -m ...tooling.e2e.tier RELEASE [unpatched] [one-pass | two-pass]
    mode = True if "one-pass" in sys.argv else False if "two-pass" in sys.argv else None
    r = run_job(sys.argv[1], patched="unpatched" not in sys.argv, one_pass=mode)
    print(summary(r))
    print(r["stderr_tail"][-1500:] if not r.get("done") else "", file=sys.stderr)
    os._exit(0)
