"""``python -m torch_npu._inductor.patchset selftest [--device npu|cuda|cpu] [--json] [--report FILE]``.

The acceptance kit: does the fix work on THIS machine? Each check ends
``passed``, ``failed`` (with what differed) or ``skipped`` (with why); the
command exits 1 when any check failed, else 0.

* ``status``: versions, and every patch's state (none may have failed; on an
  NPU the launch fix must be in force).
* ``codegen``: every sample kernel's launcher, as this patch set writes it,
  calls the helper exactly when its metadata asks for memory.
* ``simulation``: those launchers, dry-run in the host ACL simulation (a test
  double with a probe kernel; needs a C++ compiler).
* ``flex-backward``: ``torch.compile(..., options={"cpp_wrapper": True},
  dynamic=True)`` of Flex Attention forward + backward with a block mask
  that masks whole query rows out, over several sequence lengths, against
  eager: output and the gradients of q, k, v within the stated tolerances,
  masked rows exactly zero, no recompilation after the first length, and the
  generated C++ wrapper read back (on an NPU: each launch whose kernel asks
  for a workspace or locks calls the helper).
* ``kernels-workspace`` / ``kernels-locks`` / ``kernels-workspace-and-locks``:
  programs meant to make triton-ascend ask for those resources, against eager.
  What its source says (docs/facts.md): the workspace size comes from the
  compiled kernel's ``_infer_workspace_shape_function`` and its workspace
  options are for CV kernels (cube and vector cores: a ``tl.dot`` with
  vector work, here a Triton template matmul with a fused epilogue); a lock
  is put around a ``tl.store`` whose mask its MaskAnalysis cannot express as
  a contiguous range (here a scatter through a data-dependent index, which
  may or may not be one: the NPU run says; Flex Attention's backward has
  both). Values against eager on any device; on an NPU the
  compiled kernels' own metadata says which launches asked for what: each
  must call the helper exactly then, and a check none of whose kernels asked
  is skipped, naming them, rather than passed.

* ``aot-package`` (NPU only): the workspace and locks programs exported and
  packaged with AOTInductor; the package's generated C++ must carry the
  helper inlined once and include nothing by a path of this machine; the
  package is loaded and run in a fresh process with the patch set switched
  off (``TORCH_NPU_PATCHSET_DISABLE=1``), against eager.

Everything device-specific is skipped, with the reason, where it cannot run.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
import traceback
from typing import Callable

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"

#: Stated tolerances (float32 inputs; the compiled kernels reassociate sums).
TOLERANCES = {"float32": {"atol": 2e-3, "rtol": 2e-3}}
#: Sequence lengths of the Flex check; the mask keeps the first (L - MASKED_ROWS) query rows.
#: Only the sequence length varies (not a multiple of 128 twice): every length has two 128-wide mask
#: blocks, because Inductor specialises a BlockMask's block count (torch 2.11 recompiles per count, and a
#: one-block mask is a size-1 dimension), which is not the fix's concern.
FLEX_LENGTHS = (160, 208, 256)
MASKED_ROWS = 40
FLEX_SHAPE = (1, 2, 16)  # batch, heads, head dim
#: Flex Attention's backward is a Triton template: a GPU or NPU compiles it. Inductor's CPU backend does
#: not (torch 2.7.1: IndexError in the lowering with gradients, C++ compile error for the dynamic
#: forward, the same with the patch set disabled), so on cpu the check has nothing of ours to test.
CPU_FLEX_WHY = ("Flex Attention's backward compiles through Triton templates (GPU / NPU); Inductor's CPU "
                "backend does not compile it with gradients and dynamic shapes (torch 2.7.1 fails in its "
                "lowering, with or without this patch set): run with --device cuda or npu")


@dataclasses.dataclass
class Check:
    name: str
    status: str
    detail: str
    data: dict = dataclasses.field(default_factory=dict)
    seconds: float = 0.0

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


class CheckFailed(AssertionError):
    """A check ran and found something wrong (the message says what differed)."""


class CheckSkipped(Exception):
    """A check cannot run here (the message says why)."""


def _run_check(name: str, fn: Callable[[], tuple[str, dict]]) -> Check:
    t0 = time.monotonic()
    try:
        detail, data = fn()
        status = PASSED
    except CheckSkipped as exc:
        status, detail, data = SKIPPED, str(exc), {}
    except CheckFailed as exc:
        status, detail, data = FAILED, str(exc), {}
    except Exception as exc:  # a crash is a failure, with where it happened
        tb = traceback.format_exc().strip().splitlines()
        status, detail, data = FAILED, f"{type(exc).__name__}: {exc}", {"traceback": tb[-12:]}
    return Check(name, status, detail, data, round(time.monotonic() - t0, 1))


# ---- environment ----------------------------------------------------------------------------------
def _npu_available() -> bool:
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)
    except Exception:
        return False
    import torch

    return bool(getattr(torch, "npu", None) and torch.npu.is_available())


def default_device() -> str:
    import torch

    if _npu_available():
        return "npu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def environment(device: str) -> dict:
    import importlib.metadata

    import torch

    from .. import _environment

    env = _environment.describe()
    for dist in ("triton", "triton-ascend"):
        try:
            env[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            env[dist] = None
    env["device"] = device
    if device == "cuda" and torch.cuda.is_available():
        env["device_name"] = torch.cuda.get_device_name(0)
    elif device == "npu" and _npu_available():
        env["device_name"] = torch.npu.get_device_name(0)
    else:
        env["device_name"] = platform.processor() or platform.machine()
    env["compiler"] = shutil.which(os.environ.get("CXX") or "g++") or shutil.which("c++")
    return env


def device_usable(device: str) -> str | None:
    """None when ``device`` can run the end-to-end checks, else why not."""
    import torch

    if device == "npu" and not _npu_available():
        return "no Ascend NPU here (torch_npu missing or torch.npu.is_available() is False)"
    if device == "cuda" and not torch.cuda.is_available():
        return "no CUDA device here"
    return None


# ---- status, codegen, simulation -----------------------------------------------------------------------
def check_status(device: str) -> tuple[str, dict]:
    from .. import _applier

    rows = _applier.apply(import_targets=True)
    states = {r.id: r.label for r in rows}
    failed = {r.id: r.label for r in rows if r.state == "failed"}
    if failed:
        raise CheckFailed(f"patches failed: {failed}")
    if device == "npu":
        launch = next(r for r in rows if r.id == "cpp-wrapper-sync-resources")
        if launch.state != "applied":
            raise CheckFailed(f"on an NPU the launch fix must be applied; it is {launch.label}: {launch.reason}")
    return ", ".join(f"{k}: {v}" for k, v in states.items()), {"patches": [r.to_json() for r in rows]}


def check_codegen() -> tuple[str, dict]:
    from .. import launch_codegen as lc
    from ..launch_plan import plan_from_metadata
    from .sample_kernels import SAMPLES

    wrong = []
    for s in SAMPLES:
        plan = plan_from_metadata(s.metadata, kernel=s.kernel)
        site = lc.LaunchSite(block_clamp=s.block_clamp, has_ffts=s.has_ffts)
        cpp = lc.launcher_source(plan, site, lc.args_from_signature(s.signature))
        calls = cpp.count("acquire_launch_resources(")
        want = 1 if plan.needs_resources and not site.simt(plan) else 0
        if calls != want or "= NULL;" in cpp.replace("ffts_addr = NULL;", ""):
            wrong.append(f"{s.key}: {calls} helper calls (want {want})")
    if wrong:
        raise CheckFailed("; ".join(wrong))
    return f"{len(SAMPLES)} sample kernels: the helper is called exactly where memory is needed", {}


def check_simulation() -> tuple[str, dict]:
    cxx = os.environ.get("CXX") or "g++"
    if shutil.which(cxx) is None:
        raise CheckSkipped(f"no C++ compiler ({cxx}) to build the host ACL simulation")
    from .launcher_cli import run_samples

    rows = run_samples(simulate_them=True)
    bad = {r["sample"]: [p for la in r["launches"] for p in la["problems"]] + r["errors"] for r in rows if not r["ok"]}
    if bad:
        raise CheckFailed(f"simulated launches went wrong: {bad}")
    return (f"{len(rows)} sample kernels, each launched twice in the host ACL simulation (a test double): "
            "every kernel got disjoint, sized, initialised memory", {})


# ---- end to end: helpers ------------------------------------------------------------------------------------
@contextlib.contextmanager
def fresh_compile_caches():
    """No FX / AOT graph cache: every compile below really generates (and so shows) its code.
    (The Inductor cache directory is the run's own, set once by :func:`private_inductor_cache`.)"""
    import torch._functorch.config as fconfig
    import torch._inductor.config as iconfig

    with iconfig.patch({"fx_graph_cache": False}), fconfig.patch(enable_autograd_cache=False):
        yield


@contextlib.contextmanager
def private_inductor_cache():
    """One fresh Inductor cache directory for the whole run (set before anything compiles: Inductor
    remembers paths inside it, e.g. its precompiled header), removed afterwards."""
    old = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="patchset-selftest-") as d:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = d
        try:
            yield d
        finally:
            if old is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = old


@contextlib.contextmanager
def captured_code():
    """Collect the source of every graph Inductor generates meanwhile (its ``save_output_code``
    hook, as torch's ``run_and_get_code`` does, but without resetting Dynamo: recompiles stay visible)."""
    from unittest import mock

    from torch._inductor.graph import GraphLowering

    if not hasattr(GraphLowering, "save_output_code"):
        raise CheckSkipped("this torch's GraphLowering has no save_output_code hook to read the generated code")
    sources: list[str] = []
    with mock.patch.object(GraphLowering, "save_output_code", staticmethod(sources.append)):
        yield sources


def compare(name: str, got, want, atol: float, rtol: float) -> str | None:
    """None when close, else what differed (max abs error and where)."""
    import torch

    if got.shape != want.shape:
        return f"{name}: shape {tuple(got.shape)} != eager {tuple(want.shape)}"
    if not torch.isfinite(got).all():
        return f"{name}: {int((~torch.isfinite(got)).sum())} non-finite values (eager has {int((~torch.isfinite(want)).sum())})"
    diff = (got.float() - want.float()).abs()
    bound = atol + rtol * want.float().abs()
    if bool((diff > bound).any()):
        idx = tuple(int(i) for i in torch.nonzero(diff > bound)[0])
        return (f"{name}: max |compiled - eager| = {diff.max().item():.3g} (atol {atol}, rtol {rtol}); "
                f"first at {idx}: {got[idx].item():.6g} vs {want[idx].item():.6g}")
    return None


_CALL_DEF = re.compile(r"\bvoid\s+call_(\w+)\s*\(")


def launches_in(source: str) -> dict[str, str]:
    """``{kernel: text of its call_<kernel> function}`` in a generated C++ wrapper."""
    defs = list(_CALL_DEF.finditer(source))
    out = {}
    for i, m in enumerate(defs):
        end = defs[i + 1].start() if i + 1 < len(defs) else len(source)
        out[m.group(1)] = source[m.start():end]
    return out


def kernel_plans() -> dict:
    """``{kernel: SyncPlan}`` of every kernel Inductor saved for the C++ wrapper in this process."""
    from torch._inductor.codecache import CudaKernelParamCache

    from ..launch_plan import plan_from_params

    plans = {}
    for name, params in list(getattr(CudaKernelParamCache, "cache", {}).items()):
        if isinstance(params, dict):
            plans[name] = plan_from_params(params, name)
    return plans


def helper_calls(sources: list[str], plans: dict) -> dict:
    """For each launch in the wrappers: does it call the helper, and should it (its kernel's plan)?"""
    found = {}
    for src in sources:
        for kernel, body in launches_in(src).items():
            plan = plans.get(kernel)
            found[kernel] = {
                "calls_helper": "acquire_launch_resources(" in body,
                "needs": None if plan is None else {"workspace": plan.needs_workspace, "locks": plan.needs_locks},
            }
    return found


def check_wrapper(device: str, sources: list[str], plans: dict, what: str) -> tuple[str, dict]:
    """The generated wrappers are C++; on an NPU each launch calls the helper exactly when its kernel needs memory."""
    if not sources:
        raise CheckFailed(f"{what}: no generated code was captured")
    launches = {}
    for src in sources:
        launches.update(launches_in(src))
    if device == "cpu":  # CPU kernels are C++ functions of the wrapper itself: nothing is launched
        cpp = [s for s in sources if "extern \"C\"" in s or "cpp_wrapper" in s or "#include" in s]
        if not cpp:
            raise CheckFailed(f"{what}: the generated code is not a C++ wrapper (is cpp_wrapper on?)")
        return f"{len(cpp)} C++ wrapper module(s) generated (no device launches on cpu)", {"wrappers": len(cpp)}
    if not launches:
        raise CheckFailed(f"{what}: the generated code has no C++ call_<kernel> launchers (is cpp_wrapper on?)")
    data = {"launches": len(launches)}
    if device != "npu":
        return f"{len(launches)} kernel launches in the C++ wrapper (helper calls are checked on an NPU only)", data
    calls = helper_calls(sources, plans)
    wrong = [k for k, c in calls.items() if c["needs"] is not None and c["calls_helper"] != any(c["needs"].values())]
    unknown = [k for k, c in calls.items() if c["needs"] is None]
    data["helper_calls"] = calls
    if wrong:
        raise CheckFailed(f"{what}: launches whose helper call does not match their kernel's metadata: "
                          + ", ".join(f"{k} (needs {calls[k]['needs']}, calls helper {calls[k]['calls_helper']})" for k in wrong))
    needing = sum(1 for c in calls.values() if c["needs"] and any(c["needs"].values()))
    return (f"{len(launches)} launches; {needing} need memory and call the helper"
            + (f"; no saved params for {unknown}" if unknown else ""), data)


def graph_count() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def guard_failure_count(fn) -> int:
    from torch._dynamo.utils import guard_failures

    return len(guard_failures.get(fn.__code__, ()))


def recompile_reasons(fn, since: int, limit: int = 3) -> str:
    """Dynamo's reasons for recompiling ``fn`` after its first ``since`` guard failures, shortened."""
    from torch._dynamo.utils import guard_failures

    reasons = list(guard_failures.get(fn.__code__, ()))[since:]
    text = "; ".join(" ".join(str(r).split())[:160] for r in reasons[:limit])
    return f" (Dynamo: {text})" if text else ""


# ---- end to end: Flex Attention backward ------------------------------------------------------------------
def check_flex_backward(device: str) -> tuple[str, dict]:
    why = device_usable(device)
    if why:
        raise CheckSkipped(why)
    if device == "cpu":
        raise CheckSkipped(CPU_FLEX_WHY)
    import torch

    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError as exc:
        raise CheckSkipped(f"this torch has no Flex Attention ({exc})") from exc
    tol = TOLERANCES["float32"]

    def attend(q, k, v, block_mask):
        return flex_attention(q, k, v, block_mask=block_mask)

    compiled = torch.compile(attend, options={"cpp_wrapper": True}, dynamic=True)
    problems, sources, per_length = [], [], []
    graphs, guards_before = 0, guard_failure_count(attend)
    torch.manual_seed(0)
    valid = torch.tensor(0, device=device)
    mask_mod = rows_kept(valid)
    with fresh_compile_caches():
        for length in FLEX_LENGTHS:
            valid.fill_(length - MASKED_ROWS)  # in place: one mask_mod object, so no guard on a new closure
            block_mask = create_block_mask(mask_mod, None, None, length, length, device=device)
            b, h, d = FLEX_SHAPE
            inputs = [torch.randn(b, h, length, d, device=device, requires_grad=True) for _ in range(3)]
            before = graph_count()
            with captured_code() as codes:
                cout = _forward_backward(compiled, inputs, block_mask)
            graphs += graph_count() - before  # eager flex_attention compiles a wrapper of its own: not counted
            sources += codes
            eout = _forward_backward(attend, inputs, block_mask)
            for name, got, want in zip(("out", "grad q", "grad k", "grad v"), cout, eout):
                bad = compare(f"L={length} {name}", got, want, **tol)
                if bad:
                    problems.append(bad)
            masked = slice(length - MASKED_ROWS, None)
            if cout[0][:, :, masked].abs().max().item() != 0 or cout[1][:, :, masked].abs().max().item() != 0:
                problems.append(f"L={length}: masked-out rows are not zero (output or grad q)")
            per_length.append(length)
    if graphs != 1:
        problems.append(f"{graphs} graphs compiled for lengths {FLEX_LENGTHS} with dynamic=True (want 1: no recompiles)"
                        + recompile_reasons(attend, guards_before))
    if problems:
        raise CheckFailed("; ".join(problems))
    detail, data = check_wrapper(device, sources, kernel_plans(), "flex backward")
    data.update(lengths=per_length, graphs=graphs, tolerances=tol)
    return (f"lengths {per_length} ({MASKED_ROWS} rows masked out each), out and grads q/k/v within "
            f"atol {tol['atol']} rtol {tol['rtol']} of eager, masked rows zero, 1 graph (no recompiles); {detail}",
            data)


def rows_kept(valid):
    """Causal mask that masks out every query row at or past ``valid`` (those rows see nothing)."""

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx < valid) & (kv_idx <= q_idx)

    return mask_mod


def _cuda_context_current(grad):
    """Runs on autograd's device thread before the backward graph: a CUDA runtime call there makes the
    device's primary context current. torch's CUDA C++ wrapper loads and launches kernels through the
    driver API, which needs a current context, and that thread has none yet (without this, torch 2.11
    on an H200: "CUDA driver error: invalid device context"). Not ours to fix; only CUDA needs it."""
    import torch

    torch.cuda.synchronize(grad.device)
    return grad


def _forward_backward(fn, inputs, block_mask):
    import torch

    leaves = [x.detach().clone().requires_grad_(True) for x in inputs]
    out = fn(*leaves, block_mask)
    if out.device.type == "cuda":
        out.register_hook(_cuda_context_current)
    grad_out = torch.linspace(-1, 1, out.numel(), device=out.device).reshape(out.shape)
    out.backward(grad_out)
    return [out.detach()] + [x.grad for x in leaves]


# ---- end to end: kernels that ask for a workspace / locks -------------------------------------------------------
def _mm_epilogue(a, b, bias):
    """A Triton template matmul (``tl.dot``: a mix kernel on triton-ascend) with a fused epilogue."""
    import torch

    return torch.relu(a @ b + bias)


def _masked_scatter(x, idx, keep):
    """A ``tl.store`` (not an atomic: triton-ascend locks stores only) through a data-dependent index;
    dropped elements all write 0 to one spare slot, so the result does not depend on write order."""
    import torch

    out = torch.zeros(x.shape[0] * 2 + 1, device=x.device, dtype=x.dtype)
    return out.index_put((torch.where(keep, idx, out.shape[0] - 1),), torch.where(keep, x, 0.0))


def _inputs(kind: str, n: int, device: str):
    import torch

    g = torch.Generator(device="cpu").manual_seed(n)
    if kind == "workspace":
        a, b = (torch.randn(n, 64, generator=g), torch.randn(64, 32, generator=g))
        return [t.to(device) for t in (a, b, torch.randn(32, generator=g))]
    x = torch.randn(n, generator=g)
    idx = torch.randperm(2 * n, generator=g)[:n]  # distinct: no two kept elements race for a slot
    keep = torch.rand(n, generator=g) > 0.3
    return [t.to(device) for t in (x, idx, keep)]


KERNEL_PROGRAMS = {
    "workspace": (_mm_epilogue, {"max_autotune": True, "max_autotune_gemm_backends": "TRITON"}),
    "locks": (_masked_scatter, {}),
}
#: Which resources each check covers: the kernels compiled by its programs must include one asking for them.
KERNEL_CHECKS = {
    "kernels-workspace": ("workspace",),
    "kernels-locks": ("locks",),
    "kernels-workspace-and-locks": ("workspace", "locks"),
}


def run_program(kind: str, device: str) -> dict:
    """Compile ``kind``'s program (cpp_wrapper, dynamic) at three sizes; compare with eager each time."""
    import torch

    fn, extra = KERNEL_PROGRAMS[kind]
    if device == "cpu":  # Triton templates need a GPU or NPU; the CPU backend compiles the plain graph
        extra = {}
    compiled = torch.compile(fn, options={"cpp_wrapper": True, **extra}, dynamic=True)
    tol = TOLERANCES["float32"]
    problems, sources = [], []
    before, guards_before = graph_count(), guard_failure_count(fn)
    with fresh_compile_caches():
        for n in (96, 160, 224):
            args = _inputs(kind, n, device)
            with captured_code() as codes:
                got = compiled(*args)
            sources += codes
            bad = compare(f"{kind} n={n}", got, fn(*args), **tol)
            if bad:
                problems.append(bad)
    graphs = graph_count() - before
    if graphs != 1:
        problems.append(f"{kind}: {graphs} graphs compiled for 3 sizes with dynamic=True (want 1)"
                        + recompile_reasons(fn, guards_before))
    return {"problems": problems, "sources": sources, "graphs": graphs, "plans": kernel_plans()}


def check_kernels(name: str, device: str, runs: dict) -> tuple[str, dict]:
    why = device_usable(device)
    if why:
        raise CheckSkipped(why)
    wanted = KERNEL_CHECKS[name]
    programs = list(KERNEL_PROGRAMS) if len(wanted) > 1 else list(wanted)
    for kind in programs:
        if kind not in runs:
            runs[kind] = run_program(kind, device)
    problems = [p for kind in programs for p in runs[kind]["problems"]]
    if problems:
        raise CheckFailed("; ".join(problems))
    sources = [s for kind in programs for s in runs[kind]["sources"]]
    plans = {}
    for kind in programs:
        plans.update(runs[kind]["plans"])
    detail, data = check_wrapper(device, sources, plans, name)
    values = f"{', '.join(programs)} program(s) match eager at 3 sizes, 1 graph each"
    if device != "npu":
        return f"{values}; {detail}", data
    # On an NPU: the kernels' own metadata says what they asked for; report the coverage honestly.
    launched = launches_in("\n".join(sources))
    asking = [k for k, p in plans.items() if k in launched and all(
        (p.needs_workspace if w == "workspace" else p.needs_locks) for w in wanted)]
    if not asking:
        raise CheckSkipped(f"{values}, but no kernel triton-ascend compiled here asked for {' and '.join(wanted)} "
                           f"(kernels: { {k: (p.needs_workspace, p.needs_locks) for k, p in plans.items() if k in launched} }); "
                           "the flex-backward check covers the kernels it compiled")
    data["kernels"] = asking
    return f"{values}; kernels asking for {' and '.join(wanted)}: {asking}; {detail}", data


# ---- AOTInductor: a package that runs where the patch set is off -------------------------------------------------
_QUOTED_ABSOLUTE_INCLUDE = re.compile(r'#include\s+"(/[^"]+)"')

#: The child process: load the package, run it on the saved inputs, save the outputs (CPU tensors).
_AOT_RUNNER = """
import sys, torch, torch_npu
model = torch._inductor.aoti_load_package(sys.argv[1])
args = [a.to("npu") for a in torch.load(sys.argv[2])]
out = model(*args)
out = out if isinstance(out, (list, tuple)) else [out]
torch.save([o.cpu() for o in out], sys.argv[3])
print("patch set imported:", any(m.startswith("torch_npu._inductor.patchset.fixes") for m in sys.modules))
"""


def aot_source_problems(name: str, source: str) -> list[str]:
    """Why an aot_mode wrapper would not build elsewhere or would launch unpatched: an include of a
    path of this machine, or the helper not inlined exactly once."""
    from ..launch_codegen import INLINE_BEGIN

    problems = [f"{name} includes {path!r} by this machine's path" for path in _QUOTED_ABSOLUTE_INCLUDE.findall(source)]
    copies = source.count(INLINE_BEGIN)
    if copies != 1:
        problems.append(f"{name} carries the inlined helper {copies} times (want 1)")
    return problems


def _as_module(fn):
    """``fn`` as an ``nn.Module`` instance, which ``torch.export`` wants."""
    import torch

    return type(f"Program_{fn.__name__}", (torch.nn.Module,), {"forward": lambda self, *a: fn(*a)})()


def check_aot(device: str) -> tuple[str, dict]:
    if device != "npu":
        raise CheckSkipped(f"the AOT wrapper this patch set changes is torch_npu's; on {device} torch's own "
                           "AOTInductor has nothing of the patch set in it")
    why = device_usable(device)
    if why:
        raise CheckSkipped(why)
    import subprocess
    import zipfile

    import torch

    problems, data = [], {}
    with tempfile.TemporaryDirectory(prefix="patchset-selftest-aot-") as d:
        for kind, (fn, extra) in KERNEL_PROGRAMS.items():
            args = _inputs(kind, 160, device)
            package = torch._inductor.aoti_compile_and_package(
                torch.export.export(_as_module(fn), tuple(args)), package_path=os.path.join(d, f"{kind}.pt2"),
                inductor_configs=dict(extra))
            with zipfile.ZipFile(package) as z:
                sources = {n: z.read(n).decode(errors="replace") for n in z.namelist() if n.endswith(".cpp")}
            wrappers = {n: s for n, s in sources.items() if "call_" in s or "launchKernel" in s}
            if not wrappers:
                problems.append(f"{kind}: the package holds no generated wrapper source ({sorted(sources)})")
            for name, src in wrappers.items():
                problems += aot_source_problems(f"{kind}:{name}", src)
            torch.save([a.cpu() for a in args], os.path.join(d, f"{kind}-in.pt"))
            out_path = os.path.join(d, f"{kind}-out.pt")
            proc = subprocess.run([sys.executable, "-c", _AOT_RUNNER, package, os.path.join(d, f"{kind}-in.pt"),
                                   out_path], capture_output=True, text=True, timeout=900,
                                  env=dict(os.environ, TORCH_NPU_PATCHSET_DISABLE="1"))
            if proc.returncode != 0:
                problems.append(f"{kind}: the package failed in a fresh process without the patch set "
                                f"(exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
                continue
            got = torch.load(out_path)
            want = fn(*args)
            bad = compare(f"{kind} (AOT package)", got[0], want.cpu(), **TOLERANCES["float32"])
            if bad:
                problems.append(bad)
            data[kind] = {"wrappers": sorted(wrappers), "child": proc.stdout.strip()}
    if problems:
        raise CheckFailed("; ".join(problems))
    asking = {k: (p.needs_workspace, p.needs_locks) for k, p in kernel_plans().items()
              if p.needs_workspace or p.needs_locks}
    data["kernels_asking"] = sorted(asking)
    return (f"{len(KERNEL_PROGRAMS)} packages: helper inlined once, no path of this machine, run without the patch "
            f"set and match eager; kernels asking for memory: {sorted(asking) or 'none (nothing to exercise)'}",
            data)


# ---- the command ----------------------------------------------------------------------------------------------
def run(device: str | None = None) -> dict:
    import torch  # noqa: F401  (before anything reads versions)

    device = device or default_device()
    if device == "npu":
        _npu_available()  # imports torch_npu, which registers the device
    env = environment(device)
    checks = [
        _run_check("status", lambda: check_status(device)),
        _run_check("codegen", check_codegen),
        _run_check("simulation", check_simulation),
    ]
    with private_inductor_cache():
        checks.append(_run_check("flex-backward", lambda: check_flex_backward(device)))
        runs: dict = {}
        for name in KERNEL_CHECKS:
            checks.append(_run_check(name, lambda name=name: check_kernels(name, device, runs)))
        checks.append(_run_check("aot-package", lambda: check_aot(device)))
    counts = {s: sum(1 for c in checks if c.status == s) for s in (PASSED, FAILED, SKIPPED)}
    return {"environment": env, "device": device, "checks": [c.to_json() for c in checks], "counts": counts,
            "ok": counts[FAILED] == 0}


def format_text(result: dict) -> str:
    env = result["environment"]
    out = [f"torch-npu-inductor-patches {env['patchset']} selftest on {result['device']} ({env['device_name']})"]
    for key in ("torch", "torch_npu", "triton", "triton-ascend", "python"):
        out.append(f"  {key:<14} {env.get(key) or 'not installed'}")
    out.append("")
    for c in result["checks"]:
        out.append(f"{c['name']:<30}{c['status']:<8} ({c['seconds']} s)")
        out.append(f"    {c['detail']}")
    n = result["counts"]
    out.append("")
    out.append(f"{n[PASSED]} passed, {n[FAILED]} failed, {n[SKIPPED]} skipped")
    return "\n".join(out)


def format_markdown(result: dict) -> str:
    env = result["environment"]
    n = result["counts"]
    out = [f"# torch-npu-inductor-patches selftest: {n[PASSED]} passed, {n[FAILED]} failed, {n[SKIPPED]} skipped", "",
           f"`python -m torch_npu._inductor.patchset selftest --device {result['device']}`", "",
           "| component | version |", "|---|---|"]
    for key in ("patchset", "torch", "torch_npu", "triton", "triton-ascend", "python", "device_name"):
        out.append(f"| {key} | {env.get(key) or 'not installed'} |")
    out += ["", "| check | result | detail |", "|---|---|---|"]
    for c in result["checks"]:
        detail = c["detail"].replace("|", "\\|").replace("\n", " ")
        out.append(f"| {c['name']} | **{c['status']}** | {detail} |")
    status = next((c for c in result["checks"] if c["name"] == "status"), None)
    if status and status["data"].get("patches"):
        out += ["", "| patch | state | note |", "|---|---|---|"]
        for p in status["data"]["patches"]:
            out.append(f"| {p['id']} | {p['state']} | {(p.get('note') or p.get('reason') or '').replace('|', '/')} |")
    failed = [c for c in result["checks"] if c["status"] == FAILED and c["data"].get("traceback")]
    for c in failed:
        out += ["", f"<details><summary>{c['name']}: traceback</summary>", "", "```", *c["data"]["traceback"], "```",
                "", "</details>"]
    return "\n".join(out) + "\n"


def main(args) -> int:
    result = run(args.device)
    if args.report:
        with open(args.report, "w") as f:
            f.write(format_markdown(result))
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print(format_text(result))
        if args.report:
            print(f"report written to {args.report}")
    return 0 if result["ok"] else 1


def add_parser(subparsers):
    p = subparsers.add_parser("selftest", help="acceptance checks on this machine (passed / failed / skipped)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("npu", "cuda", "cpu"), default=None,
                   help="device for the end-to-end checks (default: npu, else cuda, else cpu)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--report", metavar="FILE", help="also write a short markdown report (paste it into an issue)")
    p.set_defaults(func=main)
    return p


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m torch_npu._inductor.patchset.tooling.selftest")
    sub = parser.add_subparsers(dest="command")
    add_parser(sub)
    ns = parser.parse_args(["selftest", *sys.argv[1:]])
    sys.exit(main(ns))
