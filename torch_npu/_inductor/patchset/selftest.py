"""``python -m torch_npu._inductor.patchset selftest [--device npu|cuda|cpu] [--json] [--report FILE]``.

The acceptance kit: does the fix work on THIS machine? Each check ends
``passed``, ``failed`` (with what differed) or ``skipped`` (with why); the
command exits 1 when any check failed, else 0 (2: bad input, checked before
any work).

* ``device``: the device the end-to-end checks run on, and why that one.
  Without ``--device``: the NPU wherever torch_npu is installed, and a
  torch_npu without a usable NPU is a failure that says why (never a quiet
  run on the CPU); without torch_npu, CUDA where there is a GPU, else the CPU
  (which runs no device launch: the check says so).
* ``status``: every patch's state (none may have failed; on an NPU the
  launch fix must be in force).
* ``codegen``: every sample kernel's launcher, as this patch set writes it,
  read back like a generated wrapper (see ``flex-backward``).
* ``simulation``: those launchers, run on the installed torch_npu's own task
  queue and caching allocator (its installed headers and ``libtorch_npu.so``,
  over the host ACL library, a test double of CANN with a probe kernel, in a
  child process; needs a C++ compiler); skipped, saying why, without
  torch_npu. These two run the verification tooling
  (``tooling/commands/selftest_launchers.py``): in a user's wheel, which does
  not carry it, both are skipped, saying so.
* ``flex-backward``: ``torch.compile(..., options={"cpp_wrapper": True},
  dynamic=True)`` of Flex Attention forward + backward with a block mask
  that masks whole query rows out, over several sequence lengths, against
  eager: output and the gradients of q, k, v within the stated tolerances,
  masked rows exactly zero, no recompilation after the first length, and the
  generated C++ wrapper read back. On an NPU, for each launch whose kernel
  asks for a workspace or locks: its ``torch_npu::inductor::LaunchMemory``
  is taken before the ``launch_call`` lambda, handed back right after
  ``launchKernel(...)`` (``handed``: kept for the thread's next launch on the
  stream), and nothing inside
  the lambda allocates or touches the owning object; a launch that needs
  nothing takes nothing.
* ``kernels-workspace`` / ``kernels-locks`` / ``kernels-workspace-and-locks``:
  three programs of their own, each compiled and run against eager: a
  Triton template matmul with a fused epilogue (a ``tl.dot`` with vector
  work: a CV kernel, whose workspace triton-ascend sizes through
  ``_infer_workspace_shape_function``, docs/facts.md), a ``tl.store``
  through a data-dependent index (a mask MaskAnalysis may not express as a
  contiguous range: triton-ascend puts a lock around it), and the two in one
  graph (two launches that each take and release their memory in turn).
  Values against eager on any device; on an NPU the compiled kernels' own
  metadata says which launches asked for what, the wrapper is read back as
  above, and a check none of whose kernels asked is skipped, naming them,
  rather than passed.
* ``aot-package`` (NPU only): the workspace and locks programs exported and
  packaged with AOTInductor; the package's generated C++ must carry the
  helper inlined once, include nothing by a path of this machine and read
  back as above; the package is loaded and run in a fresh process with the
  patch set switched off (``TORCH_NPU_PATCHSET_DISABLE=1``), against eager.

The report's header says what was asked (the command line) and found: the
device and why, versions (torch, torch_npu, triton, triton-ascend, CANN, the
NPU driver, the C++ compiler Inductor uses), the ``TORCH_NPU_PATCHSET_*`` /
``TORCH_NPU_LAUNCH_*`` settings in force and any autoload failure.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from . import _tooling
from ._check import FAILED, PASSED, SKIPPED, Check, CheckFailed, CheckSkipped, run_check  # noqa: F401
from ._read_back import launches_in, read_back  # noqa: F401

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


# ---- the device, and what is installed ------------------------------------------------------------
def torch_npu_installed() -> str | None:
    """torch_npu's version where a real torch_npu is installed, else None. (This project's own
    ``torch_npu/`` is a namespace portion holding only the patch set: not torch_npu.)"""
    import importlib.metadata
    import importlib.util

    for dist in ("torch-npu", "torch_npu"):
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    try:
        spec = importlib.util.find_spec("torch_npu")
    except (ImportError, ValueError):
        return None
    return "(version unknown: no distribution metadata)" if spec is not None and spec.origin else None


def npu_problem() -> str | None:
    """None when an Ascend NPU is usable here, else why not."""
    if torch_npu_installed() is None:
        return "torch_npu is not installed"
    try:
        import torch_npu  # noqa: F401  (registers torch.npu)
    except Exception as exc:
        return f"importing torch_npu raised {type(exc).__name__}: {exc}"
    import torch

    npu = getattr(torch, "npu", None)
    if npu is None or not hasattr(npu, "is_available"):
        return "torch_npu imported, but torch.npu is missing"
    try:
        if npu.is_available():
            return None
        count = npu.device_count()
    except Exception as exc:
        return f"torch.npu.is_available() raised {type(exc).__name__}: {exc}"
    hints = [f"torch.npu.device_count() = {count}"]
    if "ASCEND_RT_VISIBLE_DEVICES" in os.environ:
        hints.append(f"ASCEND_RT_VISIBLE_DEVICES={os.environ['ASCEND_RT_VISIBLE_DEVICES']!r}")
    if not any(Path("/dev").glob("davinci[0-9]*")):
        hints.append("no /dev/davinci<N> device file")
    return f"torch.npu.is_available() is False ({'; '.join(hints)})"


def device_problem(device: str) -> str | None:
    """None when ``device`` can run the end-to-end checks, else why not."""
    if device == "npu":
        return npu_problem()
    if device == "cuda":
        import torch

        return None if torch.cuda.is_available() else "torch.cuda.is_available() is False"
    return None


def device_usable(device: str) -> str | None:
    """None when ``device`` can run the end-to-end checks, else why not (the reason a check skips)."""
    why = device_problem(device)
    return None if why is None else f"no usable {'Ascend NPU' if device == 'npu' else device} here: {why}"


@dataclasses.dataclass(frozen=True)
class DeviceChoice:
    device: str
    why: str  # why this device: asked for, or the default here and why
    problem: str | None  # why it cannot run the end-to-end checks, or None


def choose_device(asked: str | None) -> DeviceChoice:
    """The device of the end-to-end checks: ``asked``, else the NPU wherever torch_npu is installed
    (usable or not: the device check fails then), else CUDA where there is a GPU, else the CPU."""
    if asked:
        return DeviceChoice(asked, f"asked for (--device {asked})", device_problem(asked))
    version = torch_npu_installed()
    if version is not None:
        return DeviceChoice("npu", f"the default where torch_npu is installed (torch_npu {version})", npu_problem())
    import torch

    if torch.cuda.is_available():
        return DeviceChoice("cuda", "the default without torch_npu: torch_npu is not installed and a CUDA device is "
                            "available", None)
    return DeviceChoice("cpu", "the default without torch_npu or CUDA: torch_npu is not installed and "
                        "torch.cuda.is_available() is False", None)


def check_device(choice: DeviceChoice) -> tuple[str, dict]:
    data = {"device": choice.device, "why": choice.why}
    if choice.problem:
        raise CheckFailed(f"{choice.device}, {choice.why}, is not usable: {choice.problem}. The end-to-end checks "
                          "are skipped: this run says nothing about the fix on this machine")
    if choice.device == "cpu":
        return (f"cpu, {choice.why}: the end-to-end checks compile with Inductor's CPU backend, which launches "
                "no device kernel: nothing of the launch fix runs (run on an NPU for that)", data)
    return f"{choice.device}, {choice.why}", data


def _device_name(choice: DeviceChoice) -> str:
    import torch

    try:
        if choice.problem is None and choice.device == "cuda":
            return torch.cuda.get_device_name(0)
        if choice.problem is None and choice.device == "npu":
            return torch.npu.get_device_name(0)
    except Exception as exc:
        return f"name not readable ({type(exc).__name__}: {exc})"
    if choice.device == "cpu":
        return platform.processor() or platform.machine()
    return "not usable"


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[0] if lines else ""


def cpp_compiler() -> str:
    """The C++ compiler Inductor will use (its ``cpp_builder.get_cpp_compiler()``), with its version."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        cxx = get_cpp_compiler()
    except Exception as exc:
        return f"not found: Inductor's get_cpp_compiler() raised {type(exc).__name__}: {_first_line(str(exc))}"
    path = shutil.which(cxx) or cxx
    try:
        proc = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        version = _first_line(proc.stdout or proc.stderr) or f"--version exited {proc.returncode}"
    except (OSError, subprocess.TimeoutExpired) as exc:
        version = f"version not readable ({type(exc).__name__})"
    return f"{cxx} ({path}): {version}"


#: Where CANN is looked for when neither variable names it (the installer's defaults).
CANN_DEFAULT_ROOTS = ("/usr/local/Ascend/ascend-toolkit/latest", "/usr/local/Ascend/cann")
CANN_VARIABLES = ("ASCEND_HOME_PATH", "ASCEND_TOOLKIT_HOME")
NPU_DRIVER_VERSION_FILE = "/usr/local/Ascend/driver/version.info"
#: A CANN package's install record (``ascend_toolkit_install.info``, ...): ``version=<release>``.
_INSTALL_INFO = re.compile(r"ascend_\w*_install\.info")


def _version_key(path: Path) -> str | None:
    """The value of a ``version=`` line (any case; not ``innerversion``) in ``path``."""
    try:
        for line in path.read_text(errors="replace").splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip().lower() == "version" and value.strip():
                return value.strip()
    except OSError:
        return None
    return None


def _cann_in(root: Path) -> tuple[str, Path] | None:
    """(version, file) of the CANN under ``root``: the toolkit's install record first, then any other
    package's, at most two folders deep (``<arch>-linux/``), then a ``version.cfg`` / ``version.info``."""
    found: list[Path] = []
    base = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        if len(Path(dirpath).parts) - base >= 2:
            dirnames[:] = []
        dirnames.sort()
        found += [Path(dirpath) / f for f in sorted(filenames) if _INSTALL_INFO.fullmatch(f)]
    found.sort(key=lambda p: (p.name != "ascend_toolkit_install.info", len(p.parts), str(p)))
    for path in found + [root / "version.cfg", root / "version.info"]:
        version = _version_key(path) if path.is_file() else None
        if version:
            return version, path
    return None


def cann_version(environ=None, default_roots=CANN_DEFAULT_ROOTS) -> str:
    """``<version> (<file it came from>)``, or ``not found (<where it was looked for>)``."""
    environ = os.environ if environ is None else environ
    roots = [(f"{var}={environ[var]}", environ[var]) for var in CANN_VARIABLES if environ.get(var)]
    roots += [(root, root) for root in default_roots]
    looked = []
    for where, root in roots:
        if not Path(root).is_dir():
            looked.append(f"{where}: no such folder")
            continue
        found = _cann_in(Path(root).resolve())
        if found:
            return f"{found[0]} ({found[1]})"
        looked.append(f"{where}: no version file")
    unset = [var for var in CANN_VARIABLES if not environ.get(var)]
    return f"not found ({'; '.join(looked)}{'; unset: ' + ', '.join(unset) if unset else ''})"


def npu_driver_version(path: str = NPU_DRIVER_VERSION_FILE) -> str:
    version = _version_key(Path(path)) if Path(path).is_file() else None
    if version:
        return f"{version} ({path})"
    return f"not found ({path}: {'no version line' if Path(path).is_file() else 'no such file'})"


def environment(choice: DeviceChoice) -> dict:
    import importlib.metadata

    from . import _environment

    env = _environment.describe()
    for dist in ("triton", "triton-ascend"):
        try:
            env[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            env[dist] = None
    env.update(device=choice.device, device_why=choice.why, device_problem=choice.problem,
               device_name=_device_name(choice), compiler=cpp_compiler(), cann=cann_version(),
               npu_driver=npu_driver_version())
    return env


# ---- status, codegen, simulation -----------------------------------------------------------------------
def check_status(device: str) -> tuple[str, dict]:
    from . import _applier

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
    """Each sample kernel's launcher, as the tooling writes it around this patch set's lines, read back as a
    generated wrapper is (``tooling/commands/selftest_launchers.py``)."""
    return _sample_launchers().check_codegen()


def _sample_launchers():
    """The tooling's checks on the sample launchers, or CheckSkipped where the tooling is not installed (a user's
    wheel carries the runtime and this command; the samples and the launcher writer live in the repository)."""
    if not _tooling.installed():
        raise CheckSkipped(f"the sample launchers {_tooling.NEEDS_CHECKOUT}")
    from .tooling.commands import selftest_launchers

    return selftest_launchers


def installed_runtime_library() -> Path | None:
    """The installed torch_npu's ``lib/libtorch_npu.so``, found without importing torch_npu; None without one."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch_npu")
    except (ImportError, ValueError):
        return None
    for where in (spec.submodule_search_locations or []) if spec is not None else []:
        if (Path(where) / "lib" / "libtorch_npu.so").is_file():
            return Path(where) / "lib" / "libtorch_npu.so"
    return None


def check_simulation() -> tuple[str, dict]:
    """The sample launchers, as this patch set writes them, on the installed torch_npu release's own runtime (its
    task queue and caching allocator) over the host ACL library, a test double of CANN loaded only into the child
    process ``releases/real_sources.py`` starts: never into this one."""
    version = torch_npu_installed()
    if version is None:
        raise CheckSkipped("torch_npu is not installed: the sample launchers run on a torch_npu release's own runtime "
                           "(launcher --samples --real-runtime RELEASE runs them on a released wheel)")
    library = installed_runtime_library()
    if library is None:
        raise CheckSkipped(f"the installed torch_npu {version} has no lib/libtorch_npu.so to run the launchers on")
    return _sample_launchers().check_simulation(version, library)


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


def kernel_plans() -> dict:
    """``{kernel: SyncPlan}`` of every kernel Inductor saved for the C++ wrapper in this process."""
    from torch._inductor.codecache import CudaKernelParamCache

    from .launch_plan import plan_from_params

    plans = {}
    for name, params in list(getattr(CudaKernelParamCache, "cache", {}).items()):
        if isinstance(params, dict):
            plans[name] = plan_from_params(params, name)
    return plans


def read_back_wrappers(sources: list[str], plans: dict) -> dict:
    """For each launcher in the wrappers: its kernel's needs (None: no saved params) and the read-back."""
    found = {}
    for src in sources:
        for kernel, body in launches_in(src).items():
            plan = plans.get(kernel)
            needs = None if plan is None else plan.needs_resources
            found[kernel] = {
                "needs": None if plan is None else {"workspace": plan.needs_workspace, "locks": plan.needs_locks},
                **read_back(body, needs),
            }
    return found


def check_wrapper(device: str, sources: list[str], plans: dict, what: str) -> tuple[str, dict]:
    """The generated wrappers are C++; on an NPU each launch takes memory exactly when its kernel
    needs some, in the shape :func:`read_back` checks."""
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
        return (f"{len(launches)} kernel launches in the C++ wrapper (the launch memory is read back on an NPU "
                "only)", data)
    reads = read_back_wrappers(sources, plans)
    data["read_back"] = reads
    wrong = {k: r["problems"] for k, r in reads.items() if r["problems"]}
    if wrong:
        raise CheckFailed(f"{what}: generated launches not in the expected shape: "
                          + "; ".join(f"{k}: {', '.join(p)}" for k, p in wrong.items()))
    unknown = [k for k, r in reads.items() if r["needs"] is None]
    taking = sum(1 for r in reads.values() if r["takes_memory"])
    return (f"{len(launches)} launches; {taking} need memory and take it before the lambda, keep it for the thread's "
            "next launch on the stream, none allocates inside its lambda"
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
                cout = _compiled_forward_backward(compiled, inputs, block_mask)
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


#: torch_npu 2.7.1.post10's own backward template fails this way for any dynamic length unless the patch
#: npu-flex-attention-masked-loads applied (docs/facts.md, "The user's job end to end").
NPU_TEMPLATE_BROADCAST = "Cannot broadcast"


def _compiled_forward_backward(fn, inputs, block_mask):
    try:
        return _forward_backward(fn, inputs, block_mask)
    except Exception as exc:
        if NPU_TEMPLATE_BROADCAST not in str(exc):
            raise
        raise CheckFailed("torch_npu's own Flex Attention backward template does not compile with dynamic "
                          "lengths (IS_DIVISIBLE False: its transposed K/V loads get a mask of the other shape); "
                          "the patch npu-flex-attention-masked-loads corrects those loads: `status` says whether "
                          f"it applied here: {str(exc).splitlines()[0][:200]}") from exc


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


def _mm_then_scatter(a, b, bias, idx, keep):
    """Both in one graph: the template matmul, then a scatter of its first column through a
    data-dependent index; the wrapper's launches take and release their memory one after another."""
    return _masked_scatter(_mm_epilogue(a, b, bias)[:, 0], idx, keep)


def _inputs(kind: str, n: int, device: str):
    import torch

    g = torch.Generator(device="cpu").manual_seed(n)
    out = []
    if kind in ("workspace", "workspace-and-locks"):
        out += [torch.randn(n, 64, generator=g), torch.randn(64, 32, generator=g), torch.randn(32, generator=g)]
    if kind == "locks":
        out.append(torch.randn(n, generator=g))
    if kind in ("locks", "workspace-and-locks"):
        out.append(torch.randperm(2 * n, generator=g)[:n])  # distinct: no two kept elements race for a slot
        out.append(torch.rand(n, generator=g) > 0.3)
    return [t.to(device) for t in out]


_TEMPLATES = {"max_autotune": True, "max_autotune_gemm_backends": "TRITON"}
KERNEL_PROGRAMS = {
    "workspace": (_mm_epilogue, _TEMPLATES),
    "locks": (_masked_scatter, {}),
    "workspace-and-locks": (_mm_then_scatter, _TEMPLATES),
}
#: check -> (its own program, what the program's kernels must ask for on an NPU)
KERNEL_CHECKS = {
    "kernels-workspace": ("workspace", ("workspace",)),
    "kernels-locks": ("locks", ("locks",)),
    "kernels-workspace-and-locks": ("workspace-and-locks", ("workspace", "locks")),
}
#: The programs packaged by the AOT check.
AOT_PROGRAMS = ("workspace", "locks")


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


def check_kernels(name: str, device: str) -> tuple[str, dict]:
    """Compile and run the check's own program on ``device`` against eager; read its wrapper back."""
    why = device_usable(device)
    if why:
        raise CheckSkipped(why)
    kind, wanted = KERNEL_CHECKS[name]
    run = run_program(kind, device)
    if run["problems"]:
        raise CheckFailed("; ".join(run["problems"]))
    detail, data = check_wrapper(device, run["sources"], run["plans"], name)
    values = f"the {kind} program matches eager at 3 sizes, 1 graph"
    if device != "npu":
        return f"{values}; {detail}", data
    # On an NPU: the kernels' own metadata says what they asked for; report the coverage honestly.
    launched = launches_in("\n".join(run["sources"]))
    plans = {k: p for k, p in run["plans"].items() if k in launched}
    asking = {w: sorted(k for k, p in plans.items() if (p.needs_workspace if w == "workspace" else p.needs_locks))
              for w in wanted}
    if not all(asking.values()):
        raise CheckSkipped(f"{values}, but no kernel triton-ascend compiled here for it asked for "
                           f"{' and '.join(w for w in wanted if not asking[w])} "
                           f"(kernels: (workspace, locks) = { {k: (p.needs_workspace, p.needs_locks) for k, p in plans.items()} }); "
                           "the flex-backward check covers the kernels it compiled")
    data["kernels"] = asking
    return f"{values}; kernels asking for {', '.join(f'{w}: {ks}' for w, ks in asking.items())}; {detail}", data


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
    from .launch_codegen import INLINE_BEGIN

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
        for kind in AOT_PROGRAMS:
            fn, extra = KERNEL_PROGRAMS[kind]
            args = _inputs(kind, 160, device)
            package = torch._inductor.aoti_compile_and_package(
                torch.export.export(_as_module(fn), tuple(args)), package_path=os.path.join(d, f"{kind}.pt2"),
                inductor_configs=dict(extra))
            with zipfile.ZipFile(package) as z:
                sources = {n: z.read(n).decode(errors="replace") for n in z.namelist() if n.endswith(".cpp")}
            wrappers = {n: s for n, s in sources.items() if "call_" in s or "launchKernel" in s}
            if not wrappers:
                problems.append(f"{kind}: the package holds no generated wrapper source ({sorted(sources)})")
            plans = kernel_plans()
            for name, src in wrappers.items():
                problems += aot_source_problems(f"{kind}:{name}", src)
                problems += [f"{kind}:{name}: {k}: {', '.join(r['problems'])}"
                             for k, r in read_back_wrappers([src], plans).items() if r["problems"]]
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
    return (f"{len(AOT_PROGRAMS)} packages: helper inlined once, no path of this machine, launch memory read back, "
            f"run without the patch set and match eager; kernels asking for memory: "
            f"{sorted(asking) or 'none (nothing to exercise)'}", data)


# ---- the command ----------------------------------------------------------------------------------------------
def command_line(argv=None) -> str:
    """The command line as typed (as near as the interpreter tells: ``python -m <module>`` or the
    script's name, then the arguments)."""
    argv = list(sys.argv if argv is None else argv)
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if spec is not None and spec.name:
        module = spec.name[: -len(".__main__")] if spec.name.endswith(".__main__") else spec.name
        head = ["python", "-m", module]
    else:
        head = [os.path.basename(argv[0]) if argv else "python"]
    return shlex.join(head + argv[1:])


def run(device: str | None = None, asked: str | None = None) -> dict:
    import torch  # noqa: F401  (before anything reads versions)

    choice = choose_device(device)
    env = environment(choice)
    checks = [
        run_check("device", lambda: check_device(choice)),
        run_check("status", lambda: check_status(choice.device)),
        run_check("codegen", check_codegen),
        run_check("simulation", check_simulation),
    ]
    with private_inductor_cache():
        checks.append(run_check("flex-backward", lambda: check_flex_backward(choice.device)))
        for name in KERNEL_CHECKS:
            checks.append(run_check(name, lambda name=name: check_kernels(name, choice.device)))
        checks.append(run_check("aot-package", lambda: check_aot(choice.device)))
    counts = {s: sum(1 for c in checks if c.status == s) for s in (PASSED, FAILED, SKIPPED)}
    return {"asked": asked or command_line(), "environment": env, "device": choice.device,
            "checks": [c.to_json() for c in checks], "counts": counts, "ok": counts[FAILED] == 0}


def _device_line(env: dict) -> str:
    state = f"NOT USABLE: {env['device_problem']}" if env.get("device_problem") else env.get("device_name")
    return f"{env['device']} ({state}): {env['device_why']}"


def _settings_text(env: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in env.get("settings", {}).items()) or "(none set)"


#: The header rows after "asked" and "device": (label, environment key).
HEADER_ROWS = (("torch", "torch"), ("torch_npu", "torch_npu"), ("triton", "triton"),
               ("triton-ascend", "triton-ascend"), ("CANN", "cann"), ("NPU driver", "npu_driver"),
               ("C++ compiler", "compiler"), ("python", "python"), ("patch set", "patchset"),
               ("autoload", "autoload"))


def _header(result: dict) -> list[tuple[str, str]]:
    env = result["environment"]
    rows = [("asked", result.get("asked", "")), ("device", _device_line(env))]
    rows += [(label, env.get(key) or "not installed") for label, key in HEADER_ROWS]
    rows.append(("settings", _settings_text(env)))
    if env.get("disabled_unknown"):
        rows.append(("unknown ids", f"{', '.join(env['disabled_unknown'])} (in TORCH_NPU_PATCHSET_DISABLE: no such "
                                    f"patch, nothing disabled by them; valid: {', '.join(env.get('patch_ids', []))})"))
    rows += [("autoload failure", f) for f in env.get("autoload_failures", [])]
    return rows


def format_text(result: dict) -> str:
    out = [f"torch-npu-inductor-patches {result['environment']['patchset']} selftest"]
    out += [f"  {label:<16} {value}" for label, value in _header(result)]
    out.append("")
    for c in result["checks"]:
        out.append(f"{c['name']:<30}{c['status']:<8} ({c['seconds']} s)")
        out.append(f"    {c['detail']}")
    n = result["counts"]
    out.append("")
    out.append(f"{n[PASSED]} passed, {n[FAILED]} failed, {n[SKIPPED]} skipped")
    return "\n".join(out)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def format_markdown(result: dict) -> str:
    n = result["counts"]
    out = [f"# torch-npu-inductor-patches selftest: {n[PASSED]} passed, {n[FAILED]} failed, {n[SKIPPED]} skipped", "",
           f"`{result.get('asked', '')}`", "", "| | |", "|---|---|"]
    out += [f"| {label} | {_cell(value)} |" for label, value in _header(result)[1:]]
    out += ["", "| check | result | detail |", "|---|---|---|"]
    for c in result["checks"]:
        out.append(f"| {c['name']} | **{c['status']}** | {_cell(c['detail'])} |")
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


def output_problem(path: str, flag: str = "--report") -> str | None:
    """Why ``path`` cannot be written (checked before any work), else None."""
    target = Path(path)
    folder = target.parent
    if target.is_dir():
        return f"{flag} {path}: is a folder; name a file"
    if not folder.exists():
        return f"{flag} {path}: folder {folder} does not exist"
    if not folder.is_dir():
        return f"{flag} {path}: {folder} is not a folder"
    try:  # the only sure test that a file can be made there (permissions, read-only or special file systems)
        fd, probe = tempfile.mkstemp(prefix=f".{target.name}-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        return f"{flag} {path}: cannot create a file in {folder}: {exc.strerror or exc}"
    return None


def write_whole(path: str, text: str) -> None:
    """``text`` into ``path`` whole or not at all (a temporary file beside it, then renamed)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}-", dir=folder)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def main(args) -> int:
    if args.report:
        why = output_problem(args.report)
        if why:
            print(f"selftest: {why}", file=sys.stderr)
            return 2
    result = run(args.device, asked=getattr(args, "asked", None))
    unwritten = None
    if args.report:
        try:
            write_whole(args.report, format_markdown(result))
        except OSError as exc:  # the folder changed under the run: the results still go to stdout
            unwritten = f"selftest: --report {args.report}: not written: {exc.strerror or exc}"
    if args.json:
        print(json.dumps(result, indent=2, default=str))
    else:
        print(format_text(result))
        if args.report and not unwritten:
            print(f"report written to {args.report}")
    if unwritten:
        print(unwritten, file=sys.stderr)
        return 2
    return 0 if result["ok"] else 1


def add_parser(subparsers):
    p = subparsers.add_parser("selftest", help="acceptance checks on this machine (passed / failed / skipped)",
                              description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("npu", "cuda", "cpu"), default=None,
                   help="device for the end-to-end checks (default: npu wherever torch_npu is installed, "
                        "else cuda where available, else cpu)")
    p.add_argument("--json", action="store_true", help="one JSON object")
    p.add_argument("--report", metavar="FILE", help="also write a short markdown report (paste it into an issue); "
                   "its folder must exist")
    p.set_defaults(func=main)
    return p


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m torch_npu._inductor.patchset.selftest")
    sub = parser.add_subparsers(dest="command")
    add_parser(sub)
    ns = parser.parse_args(["selftest", *sys.argv[1:]])
    sys.exit(main(ns))
