"""Run the user's job (flex_job.py) in a child over a released wheel and the host ACL library.

    run_job(release, patched=True, one_pass=None, case="float32") -> dict     one case of matrix.CASES

The verdict: the child's result (each sequence length's forward and backward, the frames compiled, the
host ACL library's report), the C++ wrappers Inductor generated, and what the compiler stand-in
reported for each kernel it compiled. Cached by everything that decides it (the patch set's runtime, this
tier's files, the host ACL library built for the wheel, torch, the job's sizes): the tests and the demo
share one run of the same code.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from functools import lru_cache
from pathlib import Path

from ..releases import host_runtime, real_artifacts
from ..upstream import test_text
from . import compiler_stand_in, matrix, stand_ins

JOB = Path(__file__).with_name("flex_job.py")
RUNTIME_STAND_INS = Path(__file__).with_name("runtime_stand_ins.py")
EXECUTOR = Path(__file__).with_name("executor.py")
#: The seed's job (matrix.CASES["float32"]): several lengths, on the 128 grid and off it, to show one compile serves
#: them; their mask block count (3) differs from the batch and head counts, which Dynamo would otherwise guard equal
#: ("duck sizing") and recompile for the next length.
SEQ_LENS = tuple(q for q, _ in matrix.CASES["float32"]["lengths"])
#: Batch and heads (the upstream function's): above 1, so that Dynamo keeps them symbolic; the head size is the case's.
BATCH, HEADS = matrix.BATCH, matrix.HEADS


def _key(*parts) -> str:
    """What decides a run: the patch set's runtime files, this tier's, the host ACL library's build, torch."""
    patchset = real_artifacts.PATCHSET_DIR
    files = sorted(p for p in patchset.rglob("*") if p.is_file() and p.suffix in (".py", ".h")
                   and ("tooling" not in p.relative_to(patchset).parts or p.parent == JOB.parent
                        or p == Path(test_text.__file__))  # the job's body is the upstream test's
                   and p.name != "matrix.py")  # its verdicts read a run; the case and its tolerance are in parts
    h = hashlib.sha256(repr(parts).encode())
    for p in files:
        h.update(str(p.relative_to(patchset)).encode() + p.read_bytes())
    import torch
    h.update(f"{host_runtime.runtime_dir(parts[0])}|{torch.__version__}|{stand_ins.KERNEL_NEEDS}|"
             f"{sorted(real_artifacts.STAND_IN_HEADERS.items())}".encode())  # the stand-in CANN headers it builds with
    return h.hexdigest()[:16]


@lru_cache(maxsize=None)
def run_job(release: str, *, patched: bool, one_pass: bool | None, case: str = "float32", execute: bool = True,
            disable: tuple[str, ...] = (), timeout: float = 1800) -> dict:
    """``one_pass``: ``triton.autotune_at_compile_time`` (None: torch's default, which is one pass when triton is
    there); ``case``: a name of matrix.CASES; ``execute``: the compiled kernels run (the executor stand-in,
    executor.py) and the results are compared with eager; ``disable``: patch ids switched off
    (TORCH_NPU_PATCHSET_DISABLE; ``patched=False`` switches them all off). One run per verdict key at a time: a
    second process asking for the same run (the demo beside the tests) waits for the first's verdict and reads it."""
    spec = {**matrix.DEFAULTS, **matrix.CASES[case]}
    disable = ("all",) if not patched else tuple(disable)
    key = _key(release, patched, one_pass, sorted(spec.items()), matrix.tolerance(case), execute, disable)
    cached = real_artifacts.CACHE_ROOT / "e2e" / "results" / (key + ".json")
    cached.parent.mkdir(parents=True, exist_ok=True)
    with open(cached.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cached.exists():
            return {**json.loads(cached.read_text()), "cached": True}
        result = _run(release, disable, one_pass, case, spec, execute, timeout)
        if result.get("done") or result.get("runs"):  # a verdict; a child that died early is never kept
            tmp = cached.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(result))
            os.replace(tmp, cached)
    return {**result, "cached": False}


def _run(release: str, disable: tuple[str, ...], one_pass: bool | None, name: str, case: dict, execute: bool,
         timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="e2e-flex-") as tmp:
        work = Path(tmp)
        out, log = work / "result.json", work / "compiled.jsonl"
        spec = {"out": str(out), "case": case, "tolerance": matrix.tolerance(name), "batch": BATCH,
                "heads": HEADS, "dim": case["dim"], "one_pass": one_pass, "stand_ins": str(RUNTIME_STAND_INS),
                "upstream_test": str(work / "upstream_test.py"), "executor": str(EXECUTOR) if execute else None,
                "manifest": str(work / "kernels.jsonl")}
        (work / "upstream_test.py").write_text(test_text.text("", ""))  # its test body; no branch file is read
        (work / "spec.json").write_text(json.dumps(spec))
        env = stand_ins.child_env(release, disable=",".join(disable), work=work)
        env[compiler_stand_in.KERNELS_ENV] = json.dumps(stand_ins.KERNEL_NEEDS)
        env[compiler_stand_in.LOG_ENV] = str(log)
        env[compiler_stand_in.MANIFEST_ENV] = spec["manifest"]
        (work / "cwd").mkdir()
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, str(JOB), str(work / "spec.json")], cwd=work / "cwd", env=env,
                              capture_output=True, text=True, timeout=timeout)
        result = json.loads(out.read_text()) if out.exists() else {"done": False}
        result.update(release=release, patched=disable != ("all",), disabled=list(disable), one_pass=one_pass,
                      case=name, returncode=proc.returncode,
                      seconds=round(time.perf_counter() - started, 1), stderr_tail=proc.stderr[-4000:])
        result["compiled"] = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
        sources = {str(p.relative_to(work)): p.read_text() for p in sorted((work / "inductor").rglob("*.cpp"))}
        result["wrappers"] = {name: text for name, text in sources.items() if "launchKernel" in text}
        return result


def run_cases(release: str, names, *, workers: int = 2, say=None) -> list[dict]:
    """Each case of ``names`` patched, and with matrix.WITHOUT's patches off where it has them, ``workers`` runs at a
    time (each a child process); ``say(line)`` as each run finishes: "case k of n", its outcome and seconds. The
    verdicts in ``names``' order, each with its "without" verdicts. The runs that take longest start first
    (matrix.LONGEST), so that the last ones to end are short and every worker stays busy to the end."""
    jobs = [(name, ()) for name in names] + [(name, tuple(w)) for name in names
                                              if (w := matrix.WITHOUT.get(name))]
    jobs.sort(key=lambda job: job[1] != () or job[0] not in matrix.LONGEST)  # stable: the rest keep their order
    done: dict = {}

    def one(job):
        name, off = job
        patched = off != ("all",)
        return job, run_job(release, patched=patched, one_pass=None, case=name, disable=off if patched else ())

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for k, future in enumerate(as_completed([pool.submit(one, j) for j in jobs]), 1):
            (name, off), result = future.result()
            v = matrix.without(result) if off else matrix.verdict(result)
            done[(name, off)] = v
            if say:
                said = f"{name:<22} {matrix.without_line(v).strip()}" if off else matrix.line(v)
                cached = " (cached)" if result.get("cached") else ""
                say(f"run {k} of {len(jobs)}, {result.get('seconds')} s{cached}: {said}")
    return [{**done[(name, ())], "without": [done[(n, off)] for n, off in done if n == name and off]}
            for name in names]


def summary(result: dict) -> str:
    """One line per length, for messages: each step, and each result's comparison with eager where the kernels ran."""
    def errors(r: dict) -> str:
        found = r.get("errors")
        return "" if not found else ", " + " ".join(
            f"{k} {'close' if e['close'] else 'DIFFERS'} (max abs {e['max_abs']:.1e}, rel {e['max_rel']:.1e})"
            for k, e in found.items())
    runs = "; ".join(f"S={r['seq_len']}x{r.get('kv_len')}: " + (r.get("error") or f"forward {r.get('forward')}, "
                                                                f"backward {r.get('backward')}{errors(r)}")
                     for r in result.get("runs", []))
    return (f"{result['release']} {result.get('case')} patched={result['patched']} one_pass={result['one_pass']} "
            f"rc={result['returncode']} done={result.get('done')} ({result['seconds']} s): {runs}")


if __name__ == "__main__":  # python -m ...tooling.e2e.tier RELEASE [CASE ... | matrix] [unpatched] [one-pass | two-pass]
    mode = True if "one-pass" in sys.argv else False if "two-pass" in sys.argv else None
    names = [a for a in sys.argv[2:] if a in matrix.CASES] or (list(matrix.CASES) if "matrix" in sys.argv
                                                                else ["float32"])
    if mode is None and "unpatched" not in sys.argv:
        for v in run_cases(sys.argv[1], names, say=lambda line: print(line, file=sys.stderr, flush=True)):
            print(matrix.line(v), flush=True)
            for w in v["without"]:
                print(matrix.without_line(w), flush=True)
        os._exit(0)
    for name in names:
        r = run_job(sys.argv[1], patched="unpatched" not in sys.argv, one_pass=mode, case=name)
        print(matrix.line(matrix.verdict(r)) if r["patched"] else summary(r), flush=True)
        print(summary(r) if r["patched"] else "", r["stderr_tail"][-1500:] if not r.get("done") else "",
              file=sys.stderr)
    os._exit(0)
