"""Run the user's job (flex_job.py) in a child over a released wheel and the host ACL library.

    run_job(release, patched=True, one_pass=True) -> dict

The verdict: the child's result (each sequence length's forward and backward, the frames compiled, the
host ACL library's report), the C++ wrappers Inductor generated, and what the compiler stand-in
reported for each kernel it compiled. Cached per process: the tests of one file share a run.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from functools import lru_cache
from pathlib import Path

from . import compiler_stand_in, stand_ins

JOB = Path(__file__).with_name("flex_job.py")
RUNTIME_STAND_INS = Path(__file__).with_name("runtime_stand_ins.py")
#: Multiples of 128 (see flex_job.py), several, to show one compile serves them; their mask block counts
#: (5, 6, 8) differ from the batch and head counts, which Dynamo would otherwise guard equal ("duck sizing").
SEQ_LENS = (640, 768, 1024)


@lru_cache(maxsize=None)
def run_job(release: str, *, patched: bool, one_pass: bool, seq_lens: tuple[int, ...] = SEQ_LENS,
            batch: int = 2, heads: int = 4, dim: int = 64, timeout: float = 1200) -> dict:
    with tempfile.TemporaryDirectory(prefix="e2e-flex-") as tmp:
        work = Path(tmp)
        out, log = work / "result.json", work / "compiled.jsonl"
        spec = {"out": str(out), "batch": batch, "heads": heads, "dim": dim, "seq_lens": list(seq_lens),
                "one_pass": one_pass, "stand_ins": str(RUNTIME_STAND_INS)}
        (work / "spec.json").write_text(json.dumps(spec))
        env = stand_ins.child_env(release, patched=patched, work=work)
        env[compiler_stand_in.KERNELS_ENV] = json.dumps(stand_ins.KERNEL_NEEDS)
        env[compiler_stand_in.LOG_ENV] = str(log)
        (work / "cwd").mkdir()
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, str(JOB), str(work / "spec.json")], cwd=work / "cwd", env=env,
                              capture_output=True, text=True, timeout=timeout)
        result = json.loads(out.read_text()) if out.exists() else {"done": False}
        result.update(release=release, patched=patched, one_pass=one_pass, returncode=proc.returncode,
                      seconds=round(time.perf_counter() - started, 1), stderr_tail=proc.stderr[-4000:])
        result["compiled"] = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
        result["wrappers"] = {str(p.relative_to(work)): p.read_text()
                              for p in sorted((work / "inductor").rglob("*.cpp")) if "launchKernel" in p.read_text()}
        return result


def summary(result: dict) -> str:
    """One line per length, for messages."""
    runs = "; ".join(f"S={r['seq_len']}: " + (r.get("error") or f"forward {r.get('forward')}, backward "
                                               f"{r.get('backward')}") for r in result.get("runs", []))
    return (f"{result['release']} patched={result['patched']} one_pass={result['one_pass']} "
            f"rc={result['returncode']} done={result.get('done')} ({result['seconds']} s): {runs}")


if __name__ == "__main__":  # python -m ...tooling.e2e.tier RELEASE [unpatched] [two-pass]
    r = run_job(sys.argv[1], patched="unpatched" not in sys.argv, one_pass="two-pass" not in sys.argv)
    print(summary(r))
    print(r["stderr_tail"][-1500:] if not r.get("done") else "", file=sys.stderr)
    os._exit(0)
