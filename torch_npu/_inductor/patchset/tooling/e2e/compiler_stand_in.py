"""Stand-in for CANN's two compilers, run as ``bisheng`` and ``bishengir-compile`` (see stand_ins.py).

triton-ascend lowers each kernel itself (its own ``triton-adapter-opt`` writes the adapter MLIR); CANN's
``bishengir-compile`` then turns that MLIR into ``kernel.o`` and a ``libkernel.so`` whose
``<kernel>_infer_workspace_shape_function``, ``_infer_sync_block_lock_num_function`` and
``_infer_sync_block_lock_init_function`` triton-ascend calls to fill the kernel's ``workspace_size``,
``lock_num`` and ``lock_init_val``. This stand-in writes both files:

* ``libkernel.so``: a real shared object with those three functions, returning the values the tier
  chose for the kernel's mode (``TORCH_NPU_PATCHSET_E2E_KERNELS``: "mix" for a kernel whose MLIR holds a
  matrix multiply, else "aiv"; triton-ascend strips its own ``mix_mode`` attribute before the compiler runs), so
  triton-ascend reads them through its own ``ctypes`` code, as from the real compiler;
* ``kernel.o``: a host ACL probe binary (``sim/acl_sim/host/host_acl.h``) for the kernel: at every
  launch the probe decodes the argument struct by the kernel's own signature (the adapter MLIR's
  arguments: its lock and workspace pointers at ``SyncBlockLockArgIdx`` / ``WorkspaceArgIdx``, then its
  own arguments, then six i32 launch dimensions) and checks the memory it received against what it
  told triton-ascend it needs (``workspace_size`` per program of the grid it got, ``lock_num`` slots).

When the child runs kernels (the tier's executor, ``executor.py``), ``kernel.o``'s line also says
``execute=<token>`` and the stand-in appends to the manifest (``TORCH_NPU_PATCHSET_E2E_MANIFEST``) what the
executor needs to run the kernel: the Triton source the compile was asked for (set by the child around
``triton.compile``, ``TORCH_NPU_PATCHSET_E2E_SOURCE``) and the types of the kernel's own arguments in the
adapter MLIR. The token names that pair; it decides no value.

``bisheng`` answers only ``-print-targets`` (triton-ascend's driver asks it whether an NPU compiler is
installed). Anything else fails loudly.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

KERNELS_ENV = "TORCH_NPU_PATCHSET_E2E_KERNELS"
LOG_ENV = "TORCH_NPU_PATCHSET_E2E_COMPILE_LOG"
SOURCE_ENV = "TORCH_NPU_PATCHSET_E2E_SOURCE"
MANIFEST_ENV = "TORCH_NPU_PATCHSET_E2E_MANIFEST"
#: What a real bishengir-compile's --help shows that triton-ascend 3.2.0 looks for: the newer option
#: (the compiler writes ``kernel.o``, not ``kernel_reloc.o``); no ``reg-based`` (a mem-based target).
HELP = "  --limit-auto-multi-buffer-buffer=<uint> - (stand-in for CANN's bishengir-compile)\n"
_ARG = re.compile(r"%arg(\d+):\s*([^,{)]+)")
_SIZES = {"i1": 1, "i8": 1, "i16": 2, "f16": 2, "bf16": 2, "i32": 4, "f32": 4, "i64": 8, "f64": 8}
LAUNCH_DIMS = 6  # trailing i32 arguments the runtime supplies (grid and program ids), not in the host struct


def own_arg_types(mlir: str, name: str) -> list[str]:
    """The MLIR types of the kernel's own arguments, in order (the adapter's signature without its lock and
    workspace pointers and the trailing launch dimensions)."""
    head = mlir[mlir.index(f"@{name}("):]
    head = head[: head.index(") attributes")]
    types = [t.strip() for _, t in _ARG.findall(head)]
    attrs = re.search(r"attributes \{([^}]*)\}", mlir[mlir.index(f"@{name}("):]).group(1)
    special = {int(v) for v in re.findall(r"(?:SyncBlockLockArgIdx|WorkspaceArgIdx) = (\d+)", attrs)}
    return [t for i, t in enumerate(types[: len(types) - LAUNCH_DIMS]) if i not in special]


def arg_size(mlir_type: str) -> int:
    """Bytes of one argument in the launch struct: a pointer 8, a scalar its size (and aligned to it)."""
    return 8 if mlir_type.startswith("memref") else _SIZES[mlir_type]


def own_args_bytes(mlir: str, name: str) -> int:
    """Bytes of the kernel's own arguments in the launch struct (pointers 8, scalars their size, each
    aligned to its size, as the C++ wrapper packs them), from the adapter MLIR's signature."""
    off = 0
    for t in own_arg_types(mlir, name):
        size = arg_size(t)
        off = -(-off // size) * size + size
    return -(-off // 4) * 4  # the grid's three int32 follow


def compile_kernel(src: Path, out_stem: Path) -> dict:
    mlir = src.read_text()
    name = re.search(r"func\.func\s+@(\w+)", mlir).group(1)
    # triton-ascend strips its mix_mode attribute before the compiler sees the MLIR: the compiler finds
    # the cube work itself. A kernel with a matrix multiply runs on cube and vector cores ("mix").
    mode = "mix" if "linalg.matmul" in mlir or "linalg.batch_matmul" in mlir else "aiv"
    chosen = json.loads(os.environ.get(KERNELS_ENV, "{}")).get(mode, {})
    ws, locks, init = (int(chosen.get(k, 0)) for k in ("workspace_size", "lock_num", "lock_init_val"))
    own = own_args_bytes(mlir, name)
    execute = ""
    if os.environ.get(MANIFEST_ENV) and os.environ.get(SOURCE_ENV):
        source = json.loads(os.environ[SOURCE_ENV])
        token = hashlib.sha256((os.environ[SOURCE_ENV] + mlir).encode()).hexdigest()[:16]
        execute = f" execute={token}"
        with open(os.environ[MANIFEST_ENV], "a") as f:
            f.write(json.dumps({"token": token, "name": name, "own_arg_types": own_arg_types(mlir, name),
                                "source": source}) + "\n")
    Path(f"{out_stem}.o").write_text(
        "ACL_HOST_PROBE_BINARY 1\n"
        f"kernel {name} has_ffts=1 simt_only=0 lock_bytes={locks * 8} workspace_bytes=0 "
        f"workspace_per_program={ws} own_args_bytes={own} sim_time_us=0{execute}\n")
    lib = out_stem.parent / "libkernel.so"
    with tempfile.TemporaryDirectory() as tmp:
        c = Path(tmp, "infer.c")
        c.write_text("".join(f"long long {name}_{fn}(void) {{ return {v}LL; }}\n" for fn, v in (
            ("infer_workspace_shape_function", ws), ("infer_sync_block_lock_num_function", locks),
            ("infer_sync_block_lock_init_function", init))))
        subprocess.run(["cc", "-shared", "-fPIC", "-o", str(lib), str(c)], check=True)
    record = {"name": name, "mix_mode": mode, "workspace_size": ws, "lock_num": locks, "lock_init_val": init,
              "own_args_bytes": own}
    if os.environ.get(LOG_ENV):
        with open(os.environ[LOG_ENV], "a") as f:
            f.write(json.dumps(record) + "\n")
    return record


def main(argv: list[str]) -> int:
    tool, args = argv[0], argv[1:]
    if tool == "bisheng" and args == ["-print-targets"]:
        print("  Registered Targets:\n    hiipu64 - (stand-in for CANN's bisheng)")
        return 0
    if tool == "bishengir-compile" and args == ["--help"]:
        print(HELP)
        return 0
    if tool == "bishengir-compile" and "-o" in args and args[0].endswith(".mlir"):
        compile_kernel(Path(args[0]), Path(args[args.index("-o") + 1]))
        return 0
    print(f"{tool} (stand-in of this project's end-to-end tier): not implemented: {' '.join(args)}",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
