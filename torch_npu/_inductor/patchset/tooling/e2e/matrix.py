"""The user's job as the cases users run (issue 48): one tier run per case, each compiled once, each against eager.

    CASES                     name -> the case: the upstream test's NPU_CASES (``flex_attention_steps``' arguments),
                              then the tier's own modes (an NPU graph, a training loop)
    TOLERANCE                 by dtype: how far from eager (float64, on the CPU) the executed kernels may be
    verdict(result) -> dict   one case's outcome: ran (largest error, tolerance), refused (what) or stopped (where)

Each case keeps B and H above 1 (with 1 Dynamo specialises) and lengths whose mask block counts differ from B, H
and the head size (Dynamo's duck sizing would otherwise guard them equal). The float32 case is the seed's job, three
lengths from one compile; the others run one length each (the executor's time grows with the square of it).
"""
from __future__ import annotations

from ..upstream import test_text

#: name -> case. A case without "mode" is the upstream test's ``flex_attention_steps(**case)`` (its defaults: bf16,
#: one length of 384, B=2, H=4, D=64, a causal mask); "graph": that job's compiled forward and backward captured into
#: a torch.npu.NPUGraph and replayed; "train": a tiny attention model trained a few optimizer steps, its loss's mean
#: on the CPU or ("loss": "compiled") compiled with the model, as users write it (flex_job.run_training).
CASES: dict[str, dict] = {
    **test_text.NPU_CASES,  # the upstream test's, as its NPU test runs them
    "npu-graph": {"mode": "graph"},
    "training": {"mode": "train", "steps": 3},
    "training-compiled-mean": {"mode": "train", "steps": 3, "loss": "compiled"},
}
#: The upstream function's defaults, for the tier's own modes and its reports (B=2, H=4, D=64 are fixed there).
DEFAULTS = {"lengths": ((384, 384),), "dtype": "bfloat16", "kv_heads": None, "mask": "causal", "score_mod": None}
BATCH, HEADS, DIM = 2, 4, 64

#: Largest error allowed against eager in float64, relative to the reference's largest magnitude (at least 1): the
#: executor computes float32 as IEEE float32 (errors of a few 1e-6 measured), and 16-bit jobs as the NPU does, with
#: 16-bit storage and float32 arithmetic, so their error is the 16-bit rounding of inputs to each dot and of outputs.
TOLERANCE = {"float32": 1e-4, "bfloat16": 3e-2, "float16": 4e-3}


def steps_args(case: dict) -> dict:
    """The upstream test function's arguments of a case (its mode and training steps are the tier's)."""
    return {k: v for k, v in case.items() if k not in ("mode", "steps", "loss")}


#: Inductor compiles a case makes (AOTAutograd's): one, but for training, whose loss and optimizer step compile apart.
COMPILES = {"training": 2, "training-compiled-mean": 2}

#: Where a case stops with post10 and triton-ascend 3.2.0, whose code stops it, and the needle its error carries
#: (docs/facts.md, "The user's job end to end", has the evidence). A stop elsewhere is a failure.
KNOWN_STOPS = {
    "off-grid": ("Cannot broadcast", "post10's Flex backward template: with IS_DIVISIBLE false (lengths off the 128 "
                 "grid) its '# pta' kT/vT pointers are [N, D] while load_checked_2d masks them [D, N] ([1, 16] against "
                 "[16, 64]); triton's front end rejects the load when post10 compiles the backward kernel, before "
                 "the compiler stand-in or any launch"),
    "training-compiled-mean": ("transform_dims_in_indexing", "post10's codegen (ir.py, transform_dims_in_indexing): "
                               "the loss graph's reductions over symbolic sizes have indices it cannot analyse "
                               "(gcd of a symbolic modulus, or 'Can not split expression' for the mean of every "
                               "element) and it raises on Ascend910B-class SoCs (only Ascend950 falls back to SIMT), "
                               "before any kernel compiles"),
}


def verdict(result: dict) -> dict:
    """One case's outcome: "ran" (every result within the tolerance; the largest error relative to the reference's
    magnitude), "refused" (a launch the executor could not compute exactly, named), "stopped" (where KNOWN_STOPS
    says, and whose code) or "FAILED" (anything else: an error elsewhere, a host ACL error, a result out of
    tolerance)."""
    name = result.get("case", "float32")
    case = {**DEFAULTS, **CASES[name]}
    runs = result.get("runs", [])
    host = result.get("host", {})
    refused = [e for e in host.get("executions", []) if not e["ok"]]
    found = [(k, e) for run in runs for k, e in (run.get("errors") or {}).items()]
    worst = max(found, key=lambda ke: ke[1]["max_abs"] / max(1.0, ke[1]["max_ref"]), default=None)
    out = {"case": name, "dtype": case["dtype"], "tolerance": TOLERANCE[case["dtype"]], "seconds": result.get("seconds"),
           "lengths": [(r["seq_len"], r.get("kv_len")) for r in runs], "compiles": result.get("compiles")}
    if worst is not None:
        out["largest"] = {"result": worst[0], "max_abs": worst[1]["max_abs"], "max_ref": worst[1]["max_ref"],
                          "relative": worst[1]["max_abs"] / max(1.0, worst[1]["max_ref"])}
    errors = [r["error"] for r in runs if r.get("error")]
    what = f"{refused[0]['name']}: {refused[0]['error']}" if refused else None
    if errors:  # a known stop is the case's outcome; a launch refused before it is said beside it
        needle, where = KNOWN_STOPS.get(name, (None, None))
        tail = " ".join(r.get("traceback_tail", "") + r["error"] for r in runs if r.get("error"))
        if needle is not None and needle in tail:
            return {**out, "outcome": "stopped", "where": where, "error": errors[0],
                    "forward": runs[0].get("forward") == "ok", "refused": what}
        if not refused:
            return {**out, "outcome": "FAILED", "error": errors[0]}
    if refused:
        return {**out, "outcome": "refused", "what": what}
    ok = (result.get("done") and runs and not host.get("errors") and found
          and all(e["close"] and e["finite"] for _, e in found) and result.get("compiles") == COMPILES.get(name, 1))
    if not ok:
        return {**out, "outcome": "FAILED", "error": f"host errors {len(host.get('errors', []))}, results "
                f"{[k for k, e in found if not e['close']]} out of tolerance, done {result.get('done')}, "
                f"{result.get('compiles')} compiles"}
    return {**out, "outcome": "ran"}


def line(v: dict) -> str:
    """The demo's line for one case."""
    head = f"{v['case']:<15} {v['dtype']:<9} " + " ".join(f"{s}x{n}" for s, n in v["lengths"])
    if v["outcome"] == "ran":
        big = v["largest"]
        return (f"{head}: ran, {v['compiles']} compile{'s' if v['compiles'] != 1 else ''}; largest error {big['max_abs']:.1e} ({big['result']}, "
                f"{big['relative']:.1e} of |ref| {big['max_ref']:.1f}), tolerance {v['tolerance']:.0e}")
    if v["outcome"] == "refused":
        return f"{head}: refused: {v['what']}"
    if v["outcome"] == "stopped":
        ran = ("forward launched, refused by the executor (" + v["refused"].split(": ", 1)[1][:160] + "), "
               if v.get("refused") else "forward ran, ") if v["forward"] else ""
        return f"{head}: {ran}{'backward ' if v['forward'] else ''}stopped: {v['where']}"
    return f"{head}: FAILED: {v['error']}"
