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

import re

from ..upstream import test_text

#: The patches a case shows the effect of (it runs a second time with them switched off; "all": the patch set off).
MASKED_LOADS = "npu-flex-attention-masked-loads"
SYMBOLIC_MODULUS = "npu-codegen-symbolic-modulus"
#: The C++ wrapper's settings for a backward compiled at its first call (static shapes).
LAZY_BACKWARD = "cpp-wrapper-lazy-backward-config"
#: The backward grid patches: off, the user's call (its templates' loads corrected) stops at the seed's assertion.
GRID = ("flex-attention-backward-symbolic-grid", "npu-flex-attention-backward-grid")

#: name -> case. A case without "mode" is the upstream test's ``flex_attention_steps(**case)`` (its defaults: bf16,
#: one length of 384, B=2, H=4, D=64, a causal mask, dynamic shapes); "graph": that job's compiled forward and
#: backward captured into a torch.npu.NPUGraph and replayed; "train": a tiny attention model (nn.Linear projections)
#: trained a few optimizer steps, its loss and the loss's mean compiled with the model, as users write it
#: (flex_job.run_training); "upstream": torch_npu's own dynamic Flex Attention backward test's job as it is written
#: there (flex_job.run_upstream). Every case calls flex_attention as users do: no kernel_options.
CASES: dict[str, dict] = {
    **test_text.NPU_CASES,  # the upstream test's, as its NPU test runs them
    "upstream-test": {"mode": "upstream"},
    "npu-graph": {"mode": "graph", "lengths": ((257, 257),)},
    "training": {"mode": "train", "steps": 2, "lengths": ((40, 40),)},
}
#: The upstream function's defaults, for the tier's own modes and its reports (B=2, H=4 are fixed there).
DEFAULTS = {"lengths": ((384, 384),), "dtype": "bfloat16", "kv_heads": None, "mask": "causal", "score_mod": None,
            "dim": 64, "dynamic": True}
BATCH, HEADS = 2, 4

#: The cases a first run of the demo shows (the rest with --matrix): the seed's job, lengths off the grid, the head
#: size whose wrong gradients were silent, and a static length (each a minute or two; torch_npu's own test's job and
#: the training loop compile a loss's reduction hundreds of times over: --matrix).
FIRST = ("float32", "off-grid", "head-16", "static")

#: The cases whose runs take longest (each 10 to 20 minutes on a 2-core machine, against 1 to 4 for the others: each
#: compiles its loss's reduction for some 300 configs, and its pointwise kernels run one element per iteration in the
#: interpreter, torch_npu's tiling for them), started first by tier.run_cases.
LONGEST = ("upstream-test", "training")

#: case -> the patches switched off in its second run, whose outcome the demo and the tests state beside the case's.
WITHOUT: dict[str, tuple[str, ...]] = {
    "float32": GRID,
    "static": (LAZY_BACKWARD,),
    "off-grid": (MASKED_LOADS,),
    "head-16": (MASKED_LOADS,),
    "head-80": (MASKED_LOADS,),
    "upstream-test": (SYMBOLIC_MODULUS,),
}

#: Largest error allowed against eager in float64, relative to the reference's largest magnitude (at least 1): the
#: executor computes float32 as IEEE float32 (errors of a few 1e-6 measured), and 16-bit jobs as the NPU does, with
#: 16-bit storage and float32 arithmetic, so their error is the 16-bit rounding of inputs to each dot and of outputs.
#: torch_npu's own test (the "upstream-test" case) asserts its gradients within 8e-2 and its loss within 2e-2.
TOLERANCE = {"float32": 1e-4, "bfloat16": 3e-2, "float16": 4e-3}
CASE_TOLERANCE = {"upstream-test": 8e-2}


def tolerance(name: str) -> float:
    return CASE_TOLERANCE.get(name, TOLERANCE[{**DEFAULTS, **CASES[name]}["dtype"]])


def steps_args(case: dict) -> dict:
    """The upstream test function's arguments of a case (its mode and training steps are the tier's)."""
    return {k: v for k, v in case.items() if k not in ("mode", "steps")}


#: Inductor compiles a case makes (AOTAutograd's): one, but for training, whose loss and optimizer step compile apart.
#: torch_npu's own test's job compiles once on post10 too: its second call (batch 6, (129, 257), a new block mask)
#: runs on the first compile (measured); that test asserts a recompile on its own branch's rewritten templates.
COMPILES = {"training": 2}

#: Where a case stops with post10 and triton-ascend 3.2.0, whose code stops it, and the needle its error carries
#: (docs/facts.md, "The user's job end to end", has the evidence). A stop elsewhere is a failure.
KNOWN_STOPS: dict[str, tuple[str, str]] = {}


#: An exception's repr inside a wrapped one's text (``ValueError('Cannot broadcast ...')``, quotes escaped at any depth).
_INNER = re.compile(r"\b([A-Z]\w*(?:Error|Exception))\(\\*['\"]([^'\"\\]+)")


def cause(run: dict) -> str:
    """A stopped run's error: its first line and, where Triton's compile errors wrap another, the innermost one (the
    message that says why: ``ValueError: Cannot broadcast ...`` under ``NoTritonConfigsError ... CompilationError``)."""
    error = run.get("error") or ""
    inner = _INNER.findall(run.get("traceback_tail", ""))
    if inner and inner[-1][1] not in error and inner[-1][0] != "CompilationError":
        return f"{error} ... {inner[-1][0]}: {inner[-1][1]}"
    return error


def _scale(error: dict) -> float:
    """What a result's error is measured against: the reference's largest magnitude, at least 1 (at least 0 where the
    case says so: the compared values are far below 1)."""
    return error.get("scale", max(1.0, error["max_ref"]))


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
    worst = max(found, key=lambda ke: ke[1]["max_abs"] / _scale(ke[1]), default=None)
    out = {"case": name, "dtype": case["dtype"], "dim": case["dim"], "tolerance": tolerance(name),
           "seconds": result.get("seconds"), "lengths": [(r["seq_len"], r.get("kv_len")) for r in runs],
           "compiles": result.get("compiles")}
    if worst is not None:
        out["largest"] = {"result": worst[0], "max_abs": worst[1]["max_abs"], "max_ref": worst[1]["max_ref"],
                          "relative": worst[1]["max_abs"] / _scale(worst[1])}
    errors = [cause(r) for r in runs if r.get("error")]
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


def without(result: dict) -> dict:
    """What a case gives with some patches switched off (``result["disabled"]``): "stopped" (the error's line),
    "wrong" (it ran and a result is out of tolerance: the largest error said), "refused", or "ran" (within tolerance:
    then the case does not show those patches' effect)."""
    runs = result.get("runs", [])
    found = [(k, e) for run in runs for k, e in (run.get("errors") or {}).items()]
    refused = [e for e in result.get("host", {}).get("executions", []) if not e["ok"]]
    out = {"case": result.get("case"), "disabled": result.get("disabled"), "seconds": result.get("seconds")}
    errors = [r for r in runs if r.get("error")]
    if errors:
        return {**out, "outcome": "stopped", "error": cause(errors[0]), "forward": errors[0].get("forward") == "ok"}
    if refused:
        return {**out, "outcome": "refused", "what": f"{refused[0]['name']}: {refused[0]['error']}"}
    if not found:
        return {**out, "outcome": "stopped", "error": f"no result (done {result.get('done')})", "forward": False}
    worst = max(found, key=lambda ke: ke[1]["max_abs"] / _scale(ke[1]))
    bad = [k for k, e in found if not (e["close"] and e["finite"])]
    return {**out, "outcome": "wrong" if bad else "ran", "wrong": bad,
            "largest": {"result": worst[0], "max_abs": worst[1]["max_abs"], "max_ref": worst[1]["max_ref"],
                        "relative": worst[1]["max_abs"] / _scale(worst[1])}}


def head(v: dict) -> str:
    return (f"{v['case']:<22} {v['dtype']:<9} D={v['dim']:<4}"
            + " ".join(f"{s}x{n}" for s, n in v["lengths"]))


def line(v: dict) -> str:
    """The demo's line for one case."""
    start = head(v)
    if v["outcome"] == "ran":
        big = v["largest"]
        return (f"{start}: ran, {v['compiles']} compile{'s' if v['compiles'] != 1 else ''}; largest error "
                f"{big['max_abs']:.1e} ({big['result']}, {big['relative']:.1e} of |ref| {big['max_ref']:.2g}), "
                f"tolerance {v['tolerance']:.0e}")
    if v["outcome"] == "refused":
        return f"{start}: refused: {v['what']}"
    if v["outcome"] == "stopped":
        ran = ("forward launched, refused by the executor (" + v["refused"].split(": ", 1)[1][:160] + "), "
               if v.get("refused") else "forward ran, ") if v["forward"] else ""
        return f"{start}: {ran}{'backward ' if v['forward'] else ''}stopped: {v['where']}"
    return f"{start}: FAILED: {v['error']}"


def without_line(w: dict) -> str:
    """The line said under a case for its run with patches off."""
    off = "the patch set off" if w["disabled"] == ["all"] else f"{', '.join(w['disabled'])} off"
    if w["outcome"] in ("ran", "wrong"):
        big = w["largest"]
        said = (f"ran, WRONG: {', '.join(w['wrong'])} out of tolerance, largest error {big['max_abs']:.1e} "
                f"({big['result']}, {big['relative']:.1e} of |ref| {big['max_ref']:.2g})" if w["outcome"] == "wrong"
                else f"ran within tolerance (largest {big['max_abs']:.1e})")
    elif w["outcome"] == "refused":
        said = f"refused: {w['what'][:200]}"
    else:
        said = f"{'forward ran, backward ' if w['forward'] else ''}stopped: {w['error'][:240]}"
    return f"{'':<24}with {off}: {said}"
