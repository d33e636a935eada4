"""The kernel executor: a stand-in for the NPU running ``kernel.o`` (see stand_ins.py), in a process of its own.

    python executor.py MANIFEST REQUEST_FD REPLY_FD      started by the job (attach), TRITON_INTERPRET=1

The host ACL library (``acl_host_set_executor``) runs a kernel whose binary says ``execute=<token>``: at each
launch, after the probe's start checks and on the stream's thread, it sends the token, the kernel's name, the
launch id, the grid the launch got and the kernel's own argument bytes, and waits for the answer. This process
finds the Triton source the compile was asked for (the manifest the compiler stand-in wrote, by token), decodes
the argument bytes by the adapter MLIR's types in the order of the Triton signature, and runs the ``@triton.jit``
function with Triton's interpreter over every program of that grid, on the device memory itself: the host ACL
library's device memory is a shared memory file of the job's process, mapped here too, and every load and
store goes to the device address plus the offset of this mapping. It answers with the device ranges the
kernel read and wrote (with the written bytes), which the library checks and marks as its copies do.

Why a process of its own: the library's stream thread must never need the job's GIL (the job's thread may
hold it while it waits for that stream, e.g. in a synchronous copy). The stream thread waits on a pipe; this
process waits on nothing of the job's. A deadlock between them cannot happen.

It decides nothing the patch set computes: the grid, the sizes and the addresses are the launch's own; it
does not touch the lock or workspace region (a Triton kernel has no such argument; the probe's end checks
would report a write there). What it computes, it computes exactly, or the launch fails loudly, naming what it
could not do (exact.py: the 16-bit float types, the operations' meaning, the whitelist of operations and types);
so do an address outside the device memory and a signature it cannot match with the MLIR's.
"""
from __future__ import annotations

import ast
import ctypes
import importlib.util
import json
import os
import struct
import subprocess
import sys
import time
import traceback
from pathlib import Path

ARENA = "/memfd:acl_sim_device (deleted)"  # acl_sim's device memory (acl_runtime.cpp, arena())
_SIZES = {"i1": 1, "i8": 1, "i16": 2, "f16": 2, "bf16": 2, "i32": 4, "f32": 4, "i64": 8, "f64": 8}
_SCALARS = {"i1": "<b", "i8": "<b", "i16": "<h", "i32": "<i", "i64": "<q", "f32": "<f", "f64": "<d"}


def attach(library, manifest: str) -> subprocess.Popen:
    """Start the executor for this process's host ACL library (a ``ctypes.CDLL``) and attach it."""
    req_r, req_w = os.pipe()
    rep_r, rep_w = os.pipe()
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.Popen([sys.executable, __file__, manifest, str(req_r), str(rep_w)], pass_fds=(req_r, rep_w),
                            env=env)
    os.close(req_r)
    os.close(rep_w)
    if library.acl_host_set_executor(req_w, rep_r) != 0:
        raise RuntimeError("acl_host_set_executor refused the executor's pipes")
    return proc


def _open_arena(pid: int) -> int:
    """Open the job's arena through its open descriptor. The job's other threads open and close files while this
    looks, so a descriptor listed a moment ago may be gone: it was not the arena (acl_sim keeps that one open)."""
    for f in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{f}") == ARENA:
                return os.open(f"/proc/{pid}/fd/{f}", os.O_RDWR)
        except FileNotFoundError:
            continue
    raise RuntimeError(f"the job has no open descriptor of {ARENA}")


class Arena:
    """The job's device memory, mapped into this process."""

    def __init__(self, pid: int):
        maps = [line.split() for line in Path(f"/proc/{pid}/maps").read_text().splitlines() if line.endswith(ARENA)]
        dev = [m for m in maps if m[1].startswith("---") and int(m[2], 16) == 0]
        if len(dev) != 1:
            raise RuntimeError(f"the job's device memory is not a shared file here ({len(dev)} protected views of "
                               f"{ARENA}): acl_sim fell back to one private view")
        lo, hi = (int(x, 16) for x in dev[0][0].split("-"))
        fd = _open_arena(pid)
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        prot_rw, map_shared, map_noreserve = 0x1 | 0x2, 0x01, 0x4000
        host = libc.mmap(None, hi - lo, prot_rw, map_shared | map_noreserve, fd, 0)
        if host in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), "mmap of the job's device memory")
        os.close(fd)
        self.lo, self.hi, self.host = lo, hi, host
        self.delta = (host - lo) % (1 << 64)


class Accesses:
    """The device ranges one launch read or wrote: merged [start, end) runs."""

    def __init__(self):
        self.starts, self.ends, self.pending = [], [], 0

    def add(self, addrs, size: int):
        import numpy as np
        if addrs.size == 0:
            return
        s = addrs.astype(np.uint64).ravel()  # repeats are merged with the rest (merge sorts them anyway)
        self.starts.append(s)
        self.ends.append(s + np.uint64(size))
        self.pending += 1
        if self.pending >= 256:
            self.merge()

    def merge(self):
        import numpy as np
        if not self.starts:
            return
        s, e = np.concatenate(self.starts), np.concatenate(self.ends)
        order = np.argsort(s, kind="stable")
        s, e = s[order], e[order]
        reach = np.maximum.accumulate(e)
        new = np.ones(s.size, dtype=bool)
        new[1:] = s[1:] > reach[:-1]
        idx = np.flatnonzero(new)
        self.starts, self.ends, self.pending = [s[idx]], [np.maximum.reduceat(e, idx)], 0

    def runs(self) -> list[tuple[int, int]]:
        self.merge()
        if not self.starts:
            return []
        return [(int(a), int(b - a)) for a, b in zip(self.starts[0], self.ends[0])]


class Executor:
    def __init__(self, manifest: str):
        self.manifest = Path(manifest)
        self.entries: dict = {}
        self.kernels: dict = {}
        self.arena: Arena | None = None
        self.reads = self.writes = None
        import numpy as np
        import triton.language as tl
        from triton.runtime import interpreter

        spec = importlib.util.spec_from_file_location("e2e_runtime_stand_ins", Path(__file__).with_name(
            "runtime_stand_ins.py"))  # by path, as the job loads it
        runtime_stand_ins = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(runtime_stand_ins)
        runtime_stand_ins.install_version_shims()  # the kernels' modules import what the job's do
        spec = importlib.util.spec_from_file_location("e2e_exact", Path(__file__).with_name("exact.py"))
        self.exact = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.exact)
        self.np, self.tl, self.interpreter = np, tl, interpreter
        self.exact.install(interpreter)  # the 16-bit types, the operations' meaning, the reductions
        self._route_memory(interpreter.interpreter_builder)
        self.exact.guard(interpreter.interpreter_builder)  # what is not known exact is refused, named
        patch_tensor = interpreter._patch_lang_tensor

        def patch_lang_tensor(tensor):
            # The interpreter keeps a scalar as an array of one element and converts it with int(), which NumPy 2
            # refuses for an array of one dimension: the same conversion, of its one element.
            patch_tensor(tensor)
            tensor.__index__ = lambda t: int(t.handle.data.reshape(-1)[0]) if t.handle.data.size == 1 \
                else int(t.handle.data)
        interpreter._patch_lang_tensor = patch_lang_tensor
        self._patch_once(interpreter)

    @staticmethod
    def _patch_once(interpreter):
        """``_patch_lang`` patches the same language modules again at every call of a jit function: done once per
        set of modules (the same patching, not repeated)."""
        patch_lang, patched = interpreter._patch_lang, set()

        def patch_lang_once(fn):
            langs = frozenset(id(v) for v in fn.__globals__.values() if v is interpreter.tl or v is interpreter.tl.core)
            if langs not in patched:
                patch_lang(fn)
                patched.add(langs)
        interpreter._patch_lang = patch_lang_once

    def _route_memory(self, builder):
        """Every load and store of the interpreter goes to the mapped device memory, and is recorded."""
        np, interpreter = self.np, self.interpreter
        load, store = builder.create_masked_load, builder.create_masked_store

        def translated(ptrs, mask, accesses, value=None):
            kind = self.exact.np_type(ptrs.get_element_ty())
            if value is not None and value.data.dtype != kind:  # the interpreter would copy value's itemsize
                raise self.exact.NotExact(f"a store of {value.data.dtype} values through {ptrs.dtype} pointers")
            addrs = ptrs.data.astype(np.uint64)
            used = addrs[np.broadcast_to(mask.data, addrs.shape)] if mask is not None else addrs.ravel()
            if used.size and (int(used.min()) < self.arena.lo or int(used.max()) >= self.arena.hi):
                raise RuntimeError(f"an address outside the device memory: [{int(used.min()):#x}, "
                                   f"{int(used.max()):#x}]")
            accesses.add(used, kind.itemsize)
            return interpreter.TensorHandle(addrs + np.uint64(self.arena.delta), ptrs.dtype)

        def masked_load(ptrs, mask, other, *rest):
            return load(translated(ptrs, mask, self.reads), mask, other, *rest)

        def masked_store(ptrs, value, mask, *rest):
            return store(translated(ptrs, mask, self.writes, value), value, mask, *rest)

        builder.create_masked_load, builder.create_masked_store = masked_load, masked_store

    def entry(self, token: str) -> dict:
        if token not in self.entries:
            for line in self.manifest.read_text().splitlines():
                e = json.loads(line)
                self.entries[e["token"]] = e
        if token not in self.entries:
            raise KeyError(f"no compile recorded for token {token} in {self.manifest}")
        return self.entries[token]

    def kernel(self, source: dict):
        """The interpreted ``@triton.jit`` function: the module's imports and jit functions, nothing else run."""
        key = (source["file"], source["function"])
        if key not in self.kernels:
            tree = ast.parse(Path(source["file"]).read_text(), source["file"])
            body = []
            for node in tree.body:
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    body.append(node)
                elif isinstance(node, ast.FunctionDef):
                    node.decorator_list = [d for d in node.decorator_list if ast.unparse(d) == "triton.jit"]
                    if node.decorator_list:
                        body.append(node)
            namespace = {"__file__": source["file"], "__name__": f"executed_{source['function']}"}
            exec(compile(ast.Module(body=body, type_ignores=[]), source["file"], "exec"), namespace)
            fn = namespace[source["function"]]
            if not isinstance(fn, self.interpreter.InterpretedFunction):
                raise RuntimeError("TRITON_INTERPRET=1 did not make the kernel an interpreted function")
            self.kernels[key] = fn
        return self.kernels[key]

    def arguments(self, entry: dict, fn, raw: bytes) -> dict:
        """The kernel's arguments by name: constants as compiled, the rest decoded from the launch's bytes."""
        np, tl, interpreter = self.np, self.tl, self.interpreter
        source, types = entry["source"], list(entry["own_arg_types"])
        annotations = {k: str(v) for k, v in fn.fn.__annotations__.items()}
        args, off = {}, 0
        for name in fn.arg_names:
            if name in source["constants"]:
                value = source["constants"][name]
                args[name] = value if "constexpr" in annotations.get(name, "") else interpreter._implicit_cvt(value)
                continue
            sig = source["signature"].get(name)
            if sig is None or sig == "constexpr" or not types:
                raise RuntimeError(f"cannot match argument {name!r} ({sig}) with the MLIR's {entry['own_arg_types']}")
            mlir = types.pop(0)
            if not mlir.startswith("memref") and mlir not in _SCALARS:
                raise self.exact.NotExact(f"argument {name!r}: a {mlir} scalar, not one the executor decodes exactly")
            size = 8 if mlir.startswith("memref") else _SIZES[mlir]
            off = -(-off // size) * size
            chunk = raw[off:off + size]
            off += size
            ty = tl.str_to_ty(sig)
            if mlir.startswith("memref") != sig.startswith("*"):
                raise RuntimeError(f"argument {name!r}: the signature says {sig}, the MLIR {mlir}")
            if sig.startswith("*"):
                self.exact.np_type(ty.element_ty)  # a pointer to values the executor does not compute: refused
                handle = interpreter.TensorHandle(np.array([struct.unpack("<Q", chunk)[0]], dtype=np.uint64), ty)
            else:
                value = struct.unpack(_SCALARS[mlir], chunk)[0]
                handle = interpreter.TensorHandle(np.array([value], dtype=interpreter._get_np_dtype(ty)), ty)
            args[name] = tl.tensor(handle, ty)
        if types:
            raise RuntimeError(f"the MLIR has arguments the signature lacks: {types}")
        return args

    def run(self, head: str, raw: bytes) -> None:
        token, name, _launch, *grid = head.split()
        grid = [int(g) for g in grid]
        if self.arena is None:
            self.arena = Arena(os.getppid())
        entry = self.entry(token)
        if entry["name"] != name:
            raise RuntimeError(f"token {token} names {entry['name']}, the launch {name}")
        fn = self.kernel(entry["source"])
        args = self.arguments(entry, fn, raw)
        builder = self.interpreter.interpreter_builder
        self.interpreter._patch_lang(fn.fn)
        body = fn.rewrite()
        builder.set_grid_dim(*grid)
        for x in range(grid[0]):
            for y in range(grid[1]):
                for z in range(grid[2]):
                    builder.set_grid_idx(x, y, z)
                    body(**args)

    def serve(self, request_fd: int, reply_fd: int) -> None:
        with os.fdopen(request_fd, "rb", buffering=0) as req, os.fdopen(reply_fd, "wb") as rep:
            while True:
                head = _read(req)
                if head is None:
                    return
                raw = _read(req)
                self.reads, self.writes = Accesses(), Accesses()
                status, message, started = 0, "", time.perf_counter()
                try:
                    self.run(head.decode(), raw)
                except BaseException as exc:  # the launch fails loudly, the executor serves the next one
                    status = 1
                    message = "".join(traceback.format_exception_only(type(exc), exc)).strip()[-2000:]
                    sys.stderr.write(f"executor: {head.decode()}: {traceback.format_exc()[-4000:]}\n")
                message += f" ({time.perf_counter() - started:.2f} s)" if status else ""
                reads, writes = self.reads.runs(), self.writes.runs()
                out = [struct.pack("<II", status, len(message.encode())), message.encode(),
                       struct.pack("<I", len(reads)), *(struct.pack("<QQ", a, n) for a, n in reads),
                       struct.pack("<I", len(writes))]
                for a, n in writes:
                    out += [struct.pack("<QQ", a, n), ctypes.string_at((a + self.arena.delta) % (1 << 64), n)]
                rep.write(b"".join(out))
                rep.flush()


def _read(stream) -> bytes | None:
    def exactly(n: int) -> bytes | None:
        data = b""
        while len(data) < n:
            chunk = stream.read(n - len(data))
            if not chunk:
                return None
            data += chunk
        return data
    size = exactly(4)
    if size is None:
        return None
    n = struct.unpack("<I", size)[0]
    return exactly(n) if n else b""


if __name__ == "__main__":
    Executor(sys.argv[1]).serve(int(sys.argv[2]), int(sys.argv[3]))
