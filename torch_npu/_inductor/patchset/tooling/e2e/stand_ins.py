"""Every stand-in on the end-to-end path, in one place, and the folders the child runs with.

What runs for real: torch 2.7.1 (Dynamo, AOTAutograd, Inductor), the wheel's own Python Inductor
backend (lowering, its Flex Attention templates, Triton codegen, ``CppWrapperNpu``), triton-ascend's
front end (``ast_to_ttir``, its own ``triton-adapter-opt`` writing the adapter MLIR, the metadata read
from the compiler's library), Inductor's C++ build of the wrapper against the wheel's headers, and the
wheel's ``libtorch_npu.so`` (task queue, caching allocator) over the host ACL library, which every
launch reaches, and the compiled kernels' own Triton source, run. What stands in is below; none of it decides a value the patch set computes or checks
(a kernel's workspace and lock needs come from the compiler stand-in through triton-ascend's own code,
the way the real compiler's arrive; sizes, the grid and the lock content are the patch set's).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ..releases import host_runtime, real_artifacts

TRITON_ASCEND = "triton-ascend==3.2.0"
#: triton-ascend needs these without declaring them (pybind11: its driver's builds; psutil: torch_npu's
#: own inductor imports it from 2.7.1.post11 on).
TRITON_ASCEND_UNDECLARED = ("pybind11", "psutil")

#: What the kernel executor needs beside triton-ascend: NumPy's bfloat16 type (exact.py), installed apart as well.
EXECUTOR_NEEDS = ("ml_dtypes==0.5.4",)

#: (what stands in, what it replaces, why the patch set's values do not depend on it)
STAND_INS: tuple[tuple[str, str, str], ...] = (
    ("triton-ascend 3.2.0 from the package index",
     "the triton-ascend 2.7.1.post10 was built for (not on the index)",
     "its front end and adapter are the real ones; the two names post10 uses that 3.2.0 lacks are the shims below"),
    ("version shim tl.extra.cann.extension",
     "a module of the newer triton-ascend that post10's kernels import",
     "fails loudly on any use; none of the job's kernels uses it"),
    ("version shim triton._C.libtriton.ascend.ir",
     "the newer triton-ascend's dialect loader, used by post10's compile check",
     "load_dialects does nothing (3.2.0's ir.load_dialects loaded its dialects); any other use fails loudly"),
    ("bisheng (compiler_stand_in.py)", "CANN's bisheng, asked only -print-targets by triton-ascend's driver",
     "answers that an NPU target exists; decides nothing else"),
    ("bishengir-compile (compiler_stand_in.py)",
     "CANN's compiler from the adapter MLIR to kernel.o and libkernel.so",
     "its libkernel.so reports the workspace and locks the tier chose for the kernel's mode: these are the "
     "compiler's values, read by triton-ascend's own code; kernel.o is a host ACL probe that checks, at each "
     "launch, the memory the patch set gave it, and asks the kernel executor to run the kernel's source"),
    ("npu_utils (runtime_stand_ins.NpuUtils)",
     "triton-ascend's driver utilities, built at run time against CANN's headers",
     "reports Ascend910B1 with 24 cube cores; its kernel handles are never launched"),
    ("compile-time launcher (runtime_stand_ins.CompileTimeLauncher)",
     "triton-ascend's Python launcher, built at run time against CANN's headers",
     "the compile-time autotune block's launches are not run: their timings pick a config only; every launch "
     "of the compiled C++ wrapper runs"),
    ("untimed autotune candidates (runtime_stand_ins._untimed_candidates)",
     "the NPU's time for each candidate config torch_npu's autotuner launches and compares",
     "no NPU runs the candidates, so every one is timed 0 and torch_npu keeps the first, the same in every run (its "
     "events would time the host's noise); the configs, the grid and the launch memory of the one kept are torch_npu's "
     "and the patch set's. An NPU keeps the fastest: docs/facts.md, \"The compiled loss's kernels and their autotune "
     "candidates\", says which candidates compute the loss wrong"),
    ("rand_strided on the CPU (runtime_stand_ins)",
     "random example inputs made on the device by the compile-time autotune block",
     "the host ACL library has no random operator; the values feed only the launches that are not run"),
    ("block mask made on the CPU (flex_job.py)", "create_block_mask on the device",
     "its eager operators are absent from the host ACL library; the mask's tensors are copied to the device, "
     "where the compiled graphs read them"),
    ("kernel executor (executor.py, acl_host_set_executor)", "the NPU running kernel.o",
     "a process of its own runs, at each launch of a kernel whose binary asks for it (execute=<token>), the Triton "
     "source that kernel's compile was asked for, with triton-ascend 3.2.0's own interpreter, over every program of "
     "the grid the launch got, on the device memory itself (the host ACL library's shared memory file, mapped there); "
     "it decides no size, grid, address or lock value (all come from the launch's argument struct), has no access to "
     "the lock or workspace region (a Triton kernel has no such argument; the probe's checks around it are unchanged "
     "and would report a write there), and every device range it read or wrote is checked by the host ACL library "
     "as its copies are (bounds, use after free, uninitialised bytes). It computes exactly or refuses (exact.py): "
     "float32 as IEEE float32 (not the NPU's cube unit, whose float32 dot may round its inputs), bf16 and fp16 with "
     "16-bit storage and float32 arithmetic rounded to the type at each 16-bit operation, dots accumulated in "
     "float32; an operation, element type or argument not on its list of known-exact ones, an address outside "
     "device memory or a signature it cannot match fails the launch, named (the matrix's verdict: refused)"),
    ("compile observer (runtime_stand_ins._recording_compile)", "nothing of CANN: the link from kernel.o to its source",
     "around each triton.compile call it tells the compiler stand-in (through the environment) which Triton function, "
     "constants and signature the compile was asked for; triton.compile runs unchanged"),
    ("interpreter adaptations (executor.Executor, exact.py)", "nothing: triton-ascend 3.2.0's interpreter as shipped",
     "one-element arrays converted to int as NumPy 2 requires; bf16 values typed ml_dtypes.bfloat16 (the "
     "interpreter kept their bits as uint16 and computed on them); maxnum/minnum, unordered compares, fma and "
     "float casts given the IR's meaning; int1 given the IR's meaning (the type maker get_int1_ty, which the "
     "interpreter lacks; + and - modulo 2, signed reads of true as -1, all ones; exact.py); integer sums kept in their "
     "width; triton-ascend's tl.max/tl.min combine functions reduced by one NumPy "
     "fmax/fmin/maximum reduction (the values their element-by-element form gives); the language patched once"),
    ("document ids and block masks made on the CPU (the upstream test's flex_attention_steps)",
     "torch.arange and create_block_mask on the device",
     "the host ACL library has no arithmetic operator; the tensors are made on the CPU and copied to the device, "
     "where the compiled kernels read them (the upstream test does the same on an NPU)"),
    ("compiled optimizer step (flex_job.run_training)", "torch.optim.SGD.step run eagerly on the NPU",
     "the host ACL library has no arithmetic operator: the step is compiled (dynamic, cpp_wrapper) like the loss, "
     "its kernels executed; eager SGD in float64 on the CPU is the reference it is checked against"),
    ("ASCEND_HOME_PATH (prepare_ascend_home)", "a CANN install",
     "include/ holds only the stand-in runtime/runtime/rt.h (releases/real_artifacts.STAND_IN_HEADERS), lib64/ "
     "the host ACL library; runtime/, compiler/ and opp/ are empty folders torch_npu checks exist"),
)

#: Each kernel mode's needs, as the compiler stand-in reports them (bytes per program, int64 slots, slot value).
#: "mix" kernels (cube and vector, the Flex templates) get a workspace and locks; "aiv" ones none.
KERNEL_NEEDS = {"mix": {"workspace_size": 6144, "lock_num": 2, "lock_init_val": 0},
                "aiv": {"workspace_size": 0, "lock_num": 0, "lock_init_val": 0}}


def _cache() -> Path:
    return real_artifacts.CACHE_ROOT / "e2e"


def _publish(build, final: Path) -> Path:
    """Make ``final`` with ``build(tmp)`` once: built beside it, renamed into place (two workers may race)."""
    if final.exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=final.name + ".", dir=final.parent))
    try:
        build(tmp)
        try:
            tmp.rename(final)
        except OSError:
            if not final.exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def triton_ascend_dir() -> Path:
    """triton-ascend (and what it needs undeclared), installed apart from the leg's own triton."""
    def build(tmp: Path) -> None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp),
                        TRITON_ASCEND, *TRITON_ASCEND_UNDECLARED], check=True, capture_output=True, text=True)
    return _publish(build, _cache() / TRITON_ASCEND.replace("==", "-"))


def executor_deps_dir() -> Path:
    """ml_dtypes for the kernel executor (exact.py), installed apart from the leg's environment."""
    def build(tmp: Path) -> None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp),
                        *EXECUTOR_NEEDS], check=True, capture_output=True, text=True)
    return _publish(build, _cache() / "-".join(EXECUTOR_NEEDS).replace("==", "-"))


def tools_dir() -> Path:
    """``bin/`` with ``bisheng`` and ``bishengir-compile``, both the compiler stand-in."""
    script = Path(__file__).with_name("compiler_stand_in.py")
    key = hashlib.sha256(script.read_bytes() + sys.executable.encode()).hexdigest()[:12]

    def build(tmp: Path) -> None:
        (tmp / "bin").mkdir()
        for tool in ("bisheng", "bishengir-compile"):
            path = tmp / "bin" / tool
            path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" {tool} "$@"\n')
            path.chmod(0o755)
    return _publish(build, _cache() / f"tools-{key}") / "bin"


def prepare_ascend_home(release: str) -> Path:
    """A folder laid out as CANN's install, holding only what stands in (see STAND_INS)."""
    lib = host_runtime.runtime_dir(release)
    key = hashlib.sha256(str(lib).encode() + repr(sorted(real_artifacts.STAND_IN_HEADERS.items())).encode())
    final = _cache() / f"ascend-{release}-{key.hexdigest()[:12]}"

    def build(tmp: Path) -> None:
        for name, text in real_artifacts.STAND_IN_HEADERS.items():
            (tmp / "include" / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp / "include" / name).write_text(text)
        for folder in ("runtime", "compiler", "opp"):
            (tmp / folder).mkdir()
        (tmp / "lib64").symlink_to(lib)
    return _publish(build, final)


@functools.lru_cache(maxsize=None)
def host_vec_isa_ok() -> dict:
    """torch's own check of this host's vector instructions (``cpu_vec_isa``: a C++ build and a Python process that
    loads it, per instruction set), run once per process for every child: {"TORCHINDUCTOR_VEC_ISA_OK": "1"}
    when every set /proc/cpuinfo lists passed it, which is what the children's own checks would find (same torch,
    compiler and CPU); else {} and each child checks for itself. Not a stand-in: the verdict is torch's, shared.
    It runs in a child of its own: importing it prints to stderr where a CUDA toolkit is found without a GPU (CI's
    machine), and the demo's stderr is its progress only."""
    code = ("import json\nfrom torch._inductor import config, cpu_vec_isa as v\n"
            "with config.patch({'cpp.vec_isa_ok': True}):\n    listed = [str(i) for i in v.valid_vec_isa_list()]\n"
            "v.valid_vec_isa_list.cache_clear()\nprint(json.dumps([listed, [str(i) for i in v.valid_vec_isa_list()]]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        return {}
    listed, checked = json.loads(proc.stdout.splitlines()[-1])
    return {"TORCHINDUCTOR_VEC_ISA_OK": "1"} if checked and checked == listed else {}


def child_env(release: str, *, disable: str = "", work: Path) -> dict:
    """The environment of one end-to-end child: the wheel over the host ACL library, triton-ascend
    after the wheel on PYTHONPATH (before the leg's own triton), the stand-ins, caches in ``work``;
    ``disable``: TORCH_NPU_PATCHSET_DISABLE's value ("all": the patch set off; "": every patch on)."""
    home = prepare_ascend_home(release)
    env = host_runtime.subprocess_env(release, {
        "ASCEND_HOME_PATH": str(home), "ASCEND_OPP_PATH": str(home / "opp"),
        # The stand-ins are installed in this process: compile here, not in a pool of workers.
        "TORCHINDUCTOR_COMPILE_THREADS": "1",
        "TORCHINDUCTOR_CACHE_DIR": str(work / "inductor"), "TRITON_CACHE_DIR": str(work / "triton"),
        **host_vec_isa_ok(),  # torch's check of the host CPU, once here rather than in every child's fresh cache
    })
    wheel, *rest = env["PYTHONPATH"].split(os.pathsep)
    env["PYTHONPATH"] = os.pathsep.join([wheel, str(triton_ascend_dir()), str(executor_deps_dir()), *rest])
    env["PATH"] = os.pathsep.join([str(tools_dir()), env.get("PATH", "")])
    env.pop("TORCH_COMPILE_DEBUG", None)
    env.pop("TORCH_NPU_PATCHSET_DISABLE", None)
    if disable:
        env["TORCH_NPU_PATCHSET_DISABLE"] = "1" if disable == "all" else disable
    return env
