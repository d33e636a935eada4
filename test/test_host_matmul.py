"""The host ACL library's matrix multiplies and copy (acl_sim/host/opapi.cpp): aclnnMm, aclnnMatmul, aclnnInplaceCopy.

What torch_npu 2.7.1.post10's op-plugin calls for ``torch.nn.Linear`` (no bias), eagerly and compiled: ``matmul``
and its backward reach ``aclnnMatmul``, Inductor's extern ``mm`` (``aoti_torch_npu_mm_out``) ``aclnnMm``, and the
weight's gradient (a transposed view) and ``.contiguous()`` ``aclnnInplaceCopy``. Each value is checked bit for bit
against a NumPy computation of the contract the double states (docs/facts.md, "The matrix multiplies of the host
ACL library"): 16-bit inputs widened to float32, float32 products, float32 accumulation in k order from +0, one
rounding to nearest even to the output's type; over transposed, offset and strided views whose gaps are never
initialised (a read there would be reported), into an output view whose gaps keep their bytes.

* without torch (ctypes on the library): both phases, the workspace (float32 accumulators), the views, batches and
  1-D operands of aclnnMatmul, the copy with a broadcast, that the result is there only once the stream reached the
  operator, CANN's error codes, and each case the double does not implement refused by name;
* through torch_npu's own eager path (its op-plugin, task queue and allocators): Linear forward and backward in
  float32, bfloat16 and float16, ``torch.mm`` of a transposed view, a batched ``torch.matmul``, and
  ``torch.npu.matmul.allow_hf32`` (HF32, not implemented) refused by name.
"""
from __future__ import annotations

import functools
import json
import subprocess
import sys

import numpy as np
import pytest
import release_wheels
import torch

from torch_npu._inductor.patchset.tooling.releases import host_runtime
from torch_npu._inductor.patchset.tooling.sim import host_library

RELEASE = "2.7.1.post10"
pytestmark = pytest.mark.skipif(release_wheels.LEG != "2.7.1", reason="torch_npu 2.7.1.post10 runs on the 2.7.1 leg")

ACL_FLOAT, ACL_FLOAT16, ACL_INT32, ACL_BF16 = 0, 1, 3, 27
DTYPES = {"float32": ACL_FLOAT, "float16": ACL_FLOAT16, "bfloat16": ACL_BF16}
ITEM = {"float32": 4, "float16": 2, "bfloat16": 2}
INVALID, NULLPTR = 161002, 161001  # ACLNN_ERR_PARAM_INVALID, ACLNN_ERR_PARAM_NULLPTR


# ---- the contract, in NumPy ----------------------------------------------------------------------------------------
def widen(bits: np.ndarray, dtype: str) -> np.ndarray:
    """Stored elements (uint16 / uint32 bit patterns) as float32, exactly."""
    if dtype == "float32":
        return bits.astype(np.uint32).view(np.float32)
    if dtype == "float16":
        return bits.astype(np.uint16).view(np.float16).astype(np.float32)
    return (bits.astype(np.uint32) << 16).view(np.float32)


def narrow(values: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values rounded once, to nearest even, to ``dtype``, as bit patterns (torch's CPU casts round so)."""
    values = np.asarray(values, np.float32)
    if dtype == "float32":
        return values.view(np.uint32)
    if dtype == "float16":
        return values.astype(np.float16).view(np.uint16)
    rounded = torch.from_numpy(np.ascontiguousarray(values)).to(torch.bfloat16).view(torch.int16).numpy()
    return rounded.view(np.uint16).reshape(values.shape)


def same_bits(have: np.ndarray, want: np.ndarray, dtype: str) -> bool:
    """Equal bit patterns, a NaN matching any NaN (which NaN a conversion gives is not the contract: torch's float32
    to bfloat16 on the CPU gave 0xFFFF here, the double gives 0x7FC0)."""
    nan = np.isnan(widen(have, dtype)) & np.isnan(widen(want, dtype))
    return have.shape == want.shape and bool(((have == want) | nan).all())


def contract(a: np.ndarray, b: np.ndarray, dtype: str, accumulate=np.float32) -> np.ndarray:
    """a @ b (float32 operands, torch.matmul's shapes and broadcast) as the double states the cube computes it:
    float32 products, accumulated in k order from +0 (in float32: each addition rounded), then one rounding to
    ``dtype``; its bit patterns."""
    squeeze = []
    if a.ndim == 1:
        a, squeeze = a[None, :], [-2]
    if b.ndim == 1:
        b, squeeze = b[:, None], squeeze + [-1]
    shape = np.broadcast_shapes(a.shape[:-1] + (1,), b.shape[:-2] + (1, b.shape[-1]))
    acc = np.zeros(shape, accumulate)
    for k in range(a.shape[-1]):
        acc = acc + (a[..., :, k:k + 1].astype(accumulate) * b[..., k:k + 1, :].astype(accumulate)).astype(accumulate)
    return narrow(np.squeeze(acc, axis=tuple(squeeze)) if squeeze else acc, dtype)


def random_bits(rng, shape, dtype: str, scale: float = 1.0) -> np.ndarray:
    """Random finite elements of ``dtype``, as bit patterns."""
    values = (rng.standard_normal(shape) * scale).astype(np.float32)
    return narrow(values, dtype)


# ---- without torch: the operators through ctypes ---------------------------------------------------------------------
_OPS = r"""
import ctypes as c, json, sys
import numpy as np
lib = c.CDLL(sys.argv[1])
cases = json.loads(open(sys.argv[2]).read())
lib.aclCreateTensor.restype = c.c_void_p
lib.aclCreateTensor.argtypes = [c.c_void_p, c.c_uint64, c.c_int, c.c_void_p, c.c_int64, c.c_int, c.c_void_p,
                                c.c_uint64, c.c_void_p]
lib.aclDestroyTensor.argtypes = [c.c_void_p]
PHASE1 = {name: getattr(lib, name + "GetWorkspaceSize") for name in ("aclnnMm", "aclnnMatmul", "aclnnInplaceCopy")}
PHASE2 = {name: getattr(lib, name) for name in ("aclnnMm", "aclnnMatmul", "aclnnInplaceCopy")}
for name in ("aclnnMm", "aclnnMatmul"):
    PHASE1[name].argtypes = [c.c_void_p, c.c_void_p, c.c_void_p, c.c_int8, c.POINTER(c.c_uint64), c.POINTER(c.c_void_p)]
PHASE1["aclnnInplaceCopy"].argtypes = [c.c_void_p, c.c_void_p, c.POINTER(c.c_uint64), c.POINTER(c.c_void_p)]
for f in PHASE2.values():
    f.argtypes = [c.c_void_p, c.c_uint64, c.c_void_p, c.c_void_p]
lib.aclrtMemcpy.argtypes = [c.c_void_p, c.c_size_t, c.c_void_p, c.c_size_t, c.c_int]
lib.acl_host_report_json.restype = c.c_char_p
lib.acl_host_stream_hold.restype = c.c_uint64
lib.acl_host_stream_hold.argtypes = [c.c_void_p, c.c_uint32]
lib.acl_host_stream_release.argtypes = [c.c_uint64]
H2D, D2H = 1, 2
lib.aclInit(None)
lib.aclrtSetDevice(0)
stream = c.c_void_p()
lib.aclrtCreateStream(c.byref(stream))
def arr(v):
    return (c.c_int64 * max(1, len(v)))(*v)
def malloc(n):
    p = c.c_void_p()
    assert lib.aclrtMalloc(c.byref(p), c.c_size_t(max(n, 1)), 0) == 0
    return p
def put(ptr, offset_bytes, data):
    data = np.ascontiguousarray(data)
    assert lib.aclrtMemcpy(ptr.value + offset_bytes, data.nbytes, data.ctypes.data, data.nbytes, H2D) == 0
def get(ptr, nbytes):
    out = np.zeros(nbytes, np.uint8)
    assert lib.aclrtMemcpy(out.ctypes.data, nbytes, ptr, nbytes, D2H) == 0
    return out
def positions(t):  # storage offsets of a view's elements, row-major
    idx = np.zeros(t["dims"], np.int64) + t.get("offset", 0)
    for d, (n, s) in enumerate(zip(t["dims"], t["strides"])):
        shape = [1] * len(t["dims"]); shape[d] = n
        idx = idx + (np.arange(n) * s).reshape(shape)
    return idx.reshape(-1)
def tensor(t):
    # the buffer: only the view's elements written (the gaps stay uninitialised), unless "fill" says a byte for all
    item = t["item"]
    ptr = malloc(t["storage"] * item)
    if "fill" in t:
        put(ptr, 0, np.full(t["storage"] * item, t["fill"], np.uint8))
    if "bits" in t:
        bits = np.array(t["bits"], dtype={4: np.uint32, 2: np.uint16}[item])
        for pos, value in zip(positions(t), bits):
            put(ptr, int(pos) * item, value.reshape(1))
    desc = lib.aclCreateTensor(arr(t["dims"]), len(t["dims"]), t["dtype"], arr(t["strides"]), t.get("offset", 0),
                               t.get("format", 2), arr([t["storage"]]), 1, ptr)
    return ptr, desc
def call(case, hold=False):
    made = {k: tensor(case[k]) for k in ("self", "mat2", "out", "src") if k in case}
    size, ex = c.c_uint64(), c.c_void_p()
    if case["op"] == "aclnnInplaceCopy":
        rc1 = PHASE1[case["op"]](made["self"][1], made["src"][1], c.byref(size), c.byref(ex))
        out = "self"
    else:
        rc1 = PHASE1[case["op"]](made["self"][1], made["mat2"][1], made["out"][1], case.get("cube", 0), c.byref(size),
                                 c.byref(ex))
        out = "out"
    got = {"rc1": rc1, "workspace_size": size.value}
    if rc1 == 0:
        ws = malloc(size.value)
        held = lib.acl_host_stream_hold(stream, 60000) if hold else 0
        run_as = case.get("run_as", case["op"])
        got["rc2"] = PHASE2[run_as](ws if size.value else None, c.c_uint64(size.value - case.get("short", 0)), ex,
                                    stream)
        if held:  # the operator waits behind the hold: its output is not written yet
            got["before"] = get(made[out][0], case[out]["storage"] * case[out]["item"]).tolist()
            lib.acl_host_stream_release(held)
        if case.get("again"):
            got["rc2_again"] = PHASE2[run_as](ws, size, ex, stream)
        assert lib.aclrtSynchronizeStream(stream) == 0
        got["out"] = get(made[out][0], case[out]["storage"] * case[out]["item"]).tolist()
    for ptr, desc in made.values():
        lib.aclDestroyTensor(desc)
    return got
results = []
for case in cases:
    lib.acl_host_reset()
    got = call(case, hold=case.get("hold", False))
    report = json.loads(lib.acl_host_report_json())
    got["operators"] = report["operators"]
    got["errors"] = report["errors"]
    results.append(got)
# a null argument: CANN's ACLNN_ERR_PARAM_NULLPTR
size, ex = c.c_uint64(), c.c_void_p()
nulls = [PHASE1["aclnnMm"](None, None, None, 0, c.byref(size), c.byref(ex)),
         PHASE1["aclnnInplaceCopy"](None, None, c.byref(size), c.byref(ex))]
print(json.dumps({"results": results, "nulls": nulls}))
"""


def view(rng, dtype: str, dims, strides=None, offset: int = 0, storage: int | None = None, scale: float = 1.0,
         **extra) -> dict:
    """A view of a device buffer: its elements random bit patterns of ``dtype`` (row-major order of the view)."""
    if strides is None:
        strides, acc = [], 1
        for n in reversed(dims):
            strides.insert(0, acc)
            acc *= n
    reach = offset + sum((n - 1) * s for n, s in zip(dims, strides)) + 1 if all(dims) else offset + 1
    bits = random_bits(rng, tuple(dims), dtype, scale)
    return {"dtype": DTYPES[dtype], "item": ITEM[dtype], "dims": list(dims), "strides": list(strides),
            "offset": offset, "storage": storage or reach, "bits": bits.reshape(-1).tolist(), "_name": dtype,
            **extra}


def out_view(dtype: str, dims, strides=None, offset: int = 0, storage: int | None = None, fill: int = 0xA5) -> dict:
    """An output view, its whole buffer filled with ``fill`` first (its gaps must keep it)."""
    t = view(np.random.default_rng(0), dtype, dims, strides, offset, storage)
    del t["bits"]
    t["fill"] = fill
    return t


def elements_of(t: dict, raw: list) -> np.ndarray:
    """The view's elements (bit patterns, row-major order of the view) out of its buffer's bytes."""
    words = np.array(raw, np.uint8).view({4: np.uint32, 2: np.uint16}[t["item"]])
    idx = np.zeros(t["dims"], np.int64) + t["offset"]
    for d, (n, s) in enumerate(zip(t["dims"], t["strides"])):
        shape = [1] * len(t["dims"])
        shape[d] = n
        idx = idx + (np.arange(n) * s).reshape(shape)
    return words[idx]


def gaps_of(t: dict, raw: list) -> np.ndarray:
    """The bytes of the buffer outside the view."""
    inside = np.zeros(t["storage"] * t["item"], bool)
    idx = np.zeros(t["dims"], np.int64) + t["offset"]
    for d, (n, s) in enumerate(zip(t["dims"], t["strides"])):
        shape = [1] * len(t["dims"])
        shape[d] = n
        idx = idx + (np.arange(n) * s).reshape(shape)
    for i in idx.reshape(-1):
        inside[i * t["item"]:(i + 1) * t["item"]] = True
    return np.array(raw, np.uint8)[~inside]


def operand(t: dict) -> np.ndarray:
    return widen(np.array(t["bits"]).reshape(t["dims"]), t["_name"])


def _cases() -> tuple[list, list]:
    rng = np.random.default_rng(52)
    values = []  # (case, expected bits of the output view)

    def mm(op, dtype, a, b, out, **kw):
        case = {"op": op, "self": a, "mat2": b, "out": out, **kw}
        values.append((case, contract(operand(a), operand(b), dtype)))

    # aclnnMm: float32, mat2 a transposed view (what Linear's weight.t() is)
    mm("aclnnMm", "float32", view(rng, "float32", [24, 64]), view(rng, "float32", [64, 40], [1, 64]),
       out_view("float32", [24, 40]))
    # bfloat16: self transposed at an offset, mat2 a column slice (its gaps never written), out a transposed view
    mm("aclnnMm", "bfloat16", view(rng, "bfloat16", [24, 64], [1, 24], offset=8, storage=8 + 64 * 24 + 5),
       view(rng, "bfloat16", [64, 40], [48, 1]), out_view("bfloat16", [24, 40], [1, 24], offset=3, storage=3 + 960 + 7))
    # float16, values large enough that the float32 sums round, cubeMathType 1 (no effect on 16-bit inputs)
    mm("aclnnMm", "float16", view(rng, "float16", [17, 33], scale=30.0), view(rng, "float16", [33, 9], scale=30.0),
       out_view("float16", [17, 9]), cube=1)
    # aclnnMatmul: batches broadcast (2,3 by 3), 1-D operands, a size-1 batch, K = 0 (zeros)
    mm("aclnnMatmul", "float16", view(rng, "float16", [2, 3, 5, 16]), view(rng, "float16", [3, 16, 7]),
       out_view("float16", [2, 3, 5, 7]))
    mm("aclnnMatmul", "bfloat16", view(rng, "bfloat16", [1, 4, 8]), view(rng, "bfloat16", [3, 8, 2], [16, 1, 8]),
       out_view("bfloat16", [3, 4, 2]))
    mm("aclnnMatmul", "float32", view(rng, "float32", [16]), view(rng, "float32", [16, 7]), out_view("float32", [7]))
    mm("aclnnMatmul", "float32", view(rng, "float32", [3, 5, 16]), view(rng, "float32", [16], [3], storage=48),
       out_view("float32", [3, 5]))
    mm("aclnnMatmul", "bfloat16", view(rng, "bfloat16", [16]), view(rng, "bfloat16", [16]), out_view("bfloat16", []))
    mm("aclnnMatmul", "float32", view(rng, "float32", [4, 0]), view(rng, "float32", [0, 3]), out_view("float32", [4, 3]))
    # the conversions and the rounding: subnormals, the largest and smallest normals, infinities, NaN, -0 (+0 + -0 is
    # +0), each times 1.0 (K = 1); then ties of the float32 sum in the output's type (K = 2: 1 + 2^-7 and 2^-8 is half
    # way between two bfloat16 values, to even is up; truncation or half-up would give another value)
    specials = {"float16": [0x0001, 0x03FF, 0x0400, 0x7BFF, 0x8001, 0x7C00, 0xFC00, 0x7E00, 0x8000, 0x3C01],
                "bfloat16": [0x0001, 0x007F, 0x0080, 0x7F7F, 0x8001, 0x7F80, 0xFF80, 0x7FC0, 0x8000, 0x3F81]}
    one = {"float16": 0x3C00, "bfloat16": 0x3F80}
    for dtype, bits in specials.items():
        a = dict(view(rng, dtype, [len(bits), 1]), bits=bits)
        mm("aclnnMm", dtype, a, dict(view(rng, dtype, [1, 1]), bits=[one[dtype]]), out_view(dtype, [len(bits), 1]))
    ties = {"float16": ([0x3C01, 0x1000, 0x3C03, 0x1000], 0x3C02), "bfloat16": ([0x3F81, 0x3B80, 0x3F83, 0x3B80], 0x3F82)}
    for dtype, (bits, even) in ties.items():
        a = dict(view(rng, dtype, [2, 2]), bits=bits)
        mm("aclnnMm", dtype, a, dict(view(rng, dtype, [2, 1]), bits=[one[dtype]] * 2), out_view(dtype, [2, 1]))
        assert values[-1][1].reshape(-1)[0] == even  # the reference rounds the tie to even
    # the result is there only once the stream reached the operator (a hold queued before it)
    mm("aclnnMm", "float32", view(rng, "float32", [8, 8]), view(rng, "float32", [8, 8]), out_view("float32", [8, 8]),
       hold=True)
    # aclnnInplaceCopy: a transposed bfloat16 view made contiguous; a row broadcast into a strided float32 view
    src = view(rng, "bfloat16", [40, 24], [1, 40])
    values.append(({"op": "aclnnInplaceCopy", "self": out_view("bfloat16", [40, 24]), "src": src},
                   np.array(src["bits"], np.uint16).reshape(40, 24)))
    src = view(rng, "float32", [1, 6])
    values.append(({"op": "aclnnInplaceCopy", "self": out_view("float32", [5, 6], [8, 1], storage=40), "src": src},
                   np.broadcast_to(np.array(src["bits"], np.uint32).reshape(1, 6), (5, 6))))

    refused = [  # (case, return code, the line the double logs, or None where CANN itself refuses)
        ({"op": "aclnnMm", "self": view(rng, "float16", [4, 8]), "mat2": view(rng, "float32", [8, 2]),
          "out": out_view("float32", [4, 2])}, INVALID, "aclnnMm of FLOAT16 by FLOAT (dtype promotion)"),
        ({"op": "aclnnMm", "self": view(rng, "float16", [4, 8]), "mat2": view(rng, "float16", [8, 2]),
          "out": out_view("float32", [4, 2])}, INVALID, "aclnnMm of FLOAT16 into a FLOAT out"),
        ({"op": "aclnnMm", "self": view(rng, "float32", [4, 8]), "mat2": view(rng, "float32", [8, 2]),
          "out": out_view("float32", [4, 2]), "cube": 1}, INVALID,
         "aclnnMm with cubeMathType 1 (ALLOW_FP32_DOWN_PRECISION) on FLOAT"),
        ({"op": "aclnnMatmul", "self": view(rng, "float32", [4, 8]), "mat2": view(rng, "float32", [8, 2]),
          "out": out_view("float32", [4, 2]), "cube": 3}, INVALID, "aclnnMatmul with cubeMathType 3 (USE_HF32) on FLOAT"),
        ({"op": "aclnnMm", "self": view(rng, "bfloat16", [4, 8]), "mat2": view(rng, "bfloat16", [8, 2]),
          "out": out_view("bfloat16", [4, 2]), "cube": 2}, INVALID, "aclnnMm with cubeMathType 2 (USE_FP16) on BFLOAT16"),
        ({"op": "aclnnMm", "self": view(rng, "float32", [4, 8], format=29), "mat2": view(rng, "float32", [8, 2]),
          "out": out_view("float32", [4, 2])}, INVALID, "aclnnMm with self in format 29"),
        ({"op": "aclnnMm", "self": view(rng, "float32", [4, 8]), "mat2": view(rng, "float32", [8, 2]),
          "out": out_view("float32", [4, 2], [0, 1], storage=2)}, INVALID, "aclnnMm into an out whose view overlaps itself"),
        ({"op": "aclnnInplaceCopy", "self": out_view("float32", [4, 2]), "src": view(rng, "float16", [4, 2])}, INVALID,
         "aclnnInplaceCopy from FLOAT16 to FLOAT (a cast)"),
        # CANN's own answers: a cubeMathType it does not know, K or the output's shape wrong, 3-D into aclnnMm,
        # integers, a src that does not broadcast
        ({"op": "aclnnMm", "self": view(rng, "float32", [4, 8]), "mat2": view(rng, "float32", [8, 2]),
          "out": out_view("float32", [4, 2]), "cube": 7}, INVALID, None),
        ({"op": "aclnnMm", "self": view(rng, "float32", [4, 8]), "mat2": view(rng, "float32", [7, 2]),
          "out": out_view("float32", [4, 2])}, INVALID, None),
        ({"op": "aclnnMatmul", "self": view(rng, "float32", [4, 8]), "mat2": view(rng, "float32", [8, 2]),
          "out": out_view("float32", [2, 4])}, INVALID, None),
        ({"op": "aclnnMm", "self": view(rng, "float32", [2, 4, 8]), "mat2": view(rng, "float32", [8, 2]),
          "out": out_view("float32", [2, 4, 2])}, INVALID, None),
        ({"op": "aclnnMatmul", "self": dict(view(rng, "float32", [4, 8]), dtype=ACL_INT32),
          "mat2": dict(view(rng, "float32", [8, 2]), dtype=ACL_INT32), "out": dict(out_view("float32", [4, 2]),
                                                                                  dtype=ACL_INT32)}, INVALID, None),
        ({"op": "aclnnInplaceCopy", "self": out_view("float32", [4, 2]), "src": view(rng, "float32", [3, 2])}, INVALID,
         None),
        # the second phase: a workspace smaller than asked for, an executor run twice or by the other operator
        ({"op": "aclnnMm", "self": view(rng, "float32", [4, 8]), "mat2": view(rng, "float32", [8, 2]),
          "out": out_view("float32", [4, 2]), "short": 4}, "rc2", None),
        ({"op": "aclnnMm", "self": view(rng, "float32", [4, 8]), "mat2": view(rng, "float32", [8, 2]),
          "out": out_view("float32", [4, 2]), "again": True}, "again", None),
        ({"op": "aclnnMm", "self": view(rng, "float32", [4, 8]), "mat2": view(rng, "float32", [8, 2]),
          "out": out_view("float32", [4, 2]), "run_as": "aclnnMatmul"}, "rc2", None),
    ]
    return values, refused


@functools.lru_cache(maxsize=None)
def _run_ops(tmp: str) -> tuple[dict, str, list, list]:
    values, refused = _cases()
    path = f"{tmp}/cases.json"
    with open(path, "w") as f:
        json.dump([c for c, _ in values] + [c for c, _, _ in refused], f)
    lib = str(host_runtime.runtime_dir(release_wheels.fetched(RELEASE)) / host_library.LIBRARY)
    proc = subprocess.run([sys.executable, "-c", _OPS, lib, path], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout), proc.stderr, values, refused


@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    return _run_ops(str(tmp_path_factory.mktemp("host-matmul")))


def test_each_operator_computes_the_stated_contract_bit_for_bit(ops):
    """Every value of every case equals the NumPy computation of the contract, over transposed, offset and strided
    views (their gaps never initialised: a read there would be an error report), and the output's gaps keep their
    bytes; the workspace holds the float32 accumulators (4 bytes an output element; the copy: src contiguous)."""
    got, _, values, _ = ops
    for (case, want), result in zip(values, got["results"]):
        out = case.get("out", case["self"])
        assert result["rc1"] == 0 and result["rc2"] == 0, (case["op"], result)
        have = elements_of(out, result["out"])
        assert same_bits(have, want, out["_name"]), (case["op"], out["dims"], have, want)
        assert (gaps_of(out, result["out"]) == out["fill"]).all(), "bytes outside the output's view changed"
        assert not result["errors"], result["errors"]  # no uninitialised, out-of-bounds or overlapping access
        (run,) = result["operators"]
        numel = int(np.prod(out["dims"]))
        assert run["op"] == case["op"] and run["access_errors"] == 0 and run["elements"] == numel
        if case["op"] == "aclnnInplaceCopy":
            assert result["workspace_size"] == int(np.prod(case["src"]["dims"])) * case["src"]["item"]
        else:
            assert result["workspace_size"] == 4 * numel
            assert run["cube_math_type"] == case.get("cube", 0)
            if run["op"] == "aclnnMm":
                assert (run["m"], run["k"], run["n"]) == (*case["self"]["dims"], case["mat2"]["dims"][1])


def test_the_result_is_there_only_when_the_stream_reaches_the_operator(ops):
    got, _, values, _ = ops
    (case, want), result = next((v, r) for v, r in zip(values, got["results"]) if v[0].get("hold"))
    assert (np.array(result["before"], np.uint8) == case["out"]["fill"]).all()  # queued, not run, while held
    assert np.array_equal(elements_of(case["out"], result["out"]), want)


def test_the_checks_order_and_batches_matter(ops):
    """The cases can fail: float64 accumulation (or NumPy's own matmul) gives other float32 bits for them, and the
    batched case is read with its broadcast."""
    _, _, values, _ = ops
    case, want = values[0]  # float32 aclnnMm, K = 64
    wider = contract(operand(case["self"]), operand(case["mat2"]), "float32", accumulate=np.float64)
    assert not np.array_equal(wider, want)
    assert not np.array_equal(narrow(operand(case["self"]) @ operand(case["mat2"]), "float32"), want)
    case, want = values[3]
    assert want.shape == (2, 3, 5, 7)
    case, want = next(v for v in values if v[0]["self"]["bits"][:1] == [0x3F81] and v[0]["self"]["dims"] == [2, 2])
    assert want.reshape(-1).tolist() == [0x3F82, 0x3F84]  # 1 + 2^-7 + 2^-8 and 1 + 3 * 2^-7 + 2^-8: ties, to even


def test_what_the_double_does_not_implement_is_refused_by_name(ops):
    """Each case the double does not implement fails its first phase with 161002 and names itself once on stderr;
    where CANN refuses (an unknown cubeMathType, shapes that do not multiply, integers, no broadcast), the code is
    CANN's and nothing is logged; a null argument is 161001."""
    got, stderr, values, refused = ops
    results = got["results"][len(values):]
    for (case, code, line), result in zip(refused, results):
        if code == "rc2":
            assert result["rc1"] == 0 and result["rc2"] == INVALID, result
        elif code == "again":
            assert result["rc2"] == 0 and result["rc2_again"] == INVALID, result
        else:
            assert result["rc1"] == code, (case["op"], line, result["rc1"])
            assert not result["operators"], "a refused operator ran"
        if line is not None:
            assert stderr.count(f"acl_host: {line} is not implemented by the host ACL library") == 1, line
    logged = [x for x in stderr.splitlines() if x.startswith("acl_host: aclnn")]
    assert len(logged) == sum(1 for _, _, line in refused if line), logged
    assert got["nulls"] == [NULLPTR, NULLPTR]


# ---- through torch_npu's own eager path -------------------------------------------------------------------------------
_TORCH = host_runtime.CONTROL_SNIPPET + r"""
import time
import torch, torch_npu
torch.npu.set_device(0)
facts = {}
def bits(t):
    t = t.detach().cpu().contiguous()
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16).reshape(-1).tolist()
def ops():
    return [{k: o.get(k) for k in ("op", "m", "k", "n", "batch", "dtype", "cube_math_type", "access_errors")}
            for o in acl_host_report()["operators"]]
for name in ("float32", "bfloat16", "float16"):
    dtype = getattr(torch, name)
    g = torch.Generator().manual_seed(52)
    lin = torch.nn.Linear(64, 64, bias=False).to(dtype)
    x = torch.randn(24, 64, generator=g).to(dtype)
    grad = torch.randn(24, 64, generator=g).to(dtype)
    m = lin.npu()
    torch.npu.synchronize()
    acl_host_reset()
    xn = x.npu().requires_grad_()
    y = m(xn)
    y.backward(grad.npu())
    torch.npu.synchronize()
    facts[name] = {"x": bits(x), "w": bits(lin.weight.cpu()), "grad": bits(grad), "y": bits(y), "dx": bits(xn.grad),
                   "dw": bits(m.weight.grad), "dw_strides": list(m.weight.grad.stride()), "ops": ops(),
                   "errors": acl_host_report()["errors"]}
# torch.mm of a transposed view (op-plugin's mm: aclnnMm) and a batched torch.matmul (aclnnMatmul), bfloat16
g = torch.Generator().manual_seed(7)
a, b = torch.randn(64, 24, generator=g).bfloat16(), torch.randn(64, 40, generator=g).bfloat16()
c, d = torch.randn(2, 5, 64, generator=g).bfloat16(), torch.randn(64, 3, generator=g).bfloat16()
an, bn, cn, dn = a.npu(), b.npu(), c.npu(), d.npu()
torch.npu.synchronize()
acl_host_reset()
facts["mm"] = {"a": bits(a), "b": bits(b), "c": bits(c), "d": bits(d), "at_b": bits(torch.mm(an.t(), bn)),
               "c_d": bits(torch.matmul(cn, dn)), "contiguous": bits(an.t().contiguous())}
torch.npu.synchronize()
facts["mm"]["ops"] = ops()
facts["mm"]["errors"] = acl_host_report()["errors"]
# last: HF32 (torch.npu.matmul.allow_hf32) asks for cubeMathType USE_HF32, which the double does not implement
acl_host_reset()
torch.npu.matmul.allow_hf32 = True
facts["hf32"] = {"raised": None}
try:
    torch.mm(torch.ones(4, 8).npu(), torch.ones(8, 2).npu())
    bound = time.monotonic() + 120
    while time.monotonic() < bound:  # with the task queue, the failure reaches a later call (docs/facts.md)
        torch.npu.synchronize()
        time.sleep(0.01)
except RuntimeError as exc:
    facts["hf32"]["raised"] = str(exc)
facts["hf32"]["ops"] = ops()
send_report(facts)
"""


@functools.lru_cache(maxsize=None)
def _torch_facts(task_queue: str) -> dict:
    proc = host_runtime.run_python(release_wheels.fetched(RELEASE), _TORCH, env_extra={"TASK_QUEUE_ENABLE": task_queue},
                                   timeout=600)
    assert proc.returncode == 0 and len(proc.reports) == 1, f"exit {proc.returncode}\n{proc.stderr[-4000:]}"
    return {**proc.reports[0], "stderr": proc.stderr}


def _array(values: list, name: str, shape) -> np.ndarray:
    return widen(np.array(values, np.int64).astype(np.uint32 if name == "float32" else np.uint16), name).reshape(shape)


def _bits(values: list, name: str) -> np.ndarray:
    return np.array(values, np.int64).astype(np.uint32 if name == "float32" else np.uint16)


@pytest.mark.parametrize("task_queue", ["1", "2"])
@pytest.mark.parametrize("name", ["float32", "bfloat16", "float16"])
def test_linear_forward_and_backward_through_torch_npus_op_plugin(task_queue, name):
    """nn.Linear(64, 64, bias=False) on npu tensors: op-plugin's matmul (aclnnMatmul: x by weight.t(), a transposed
    view), its matmul_backward (aclnnMatmul twice: grad by weight, x.t() by grad) and the weight's gradient made
    contiguous (aclnnInplaceCopy: AccumulateGrad clones the transposed view) compute the contract bit for bit."""
    f = _torch_facts(task_queue)[name]
    x, w, grad = (_array(f[k], name, (24, 64)) if k != "w" else _array(f[k], name, (64, 64)) for k in ("x", "w", "grad"))
    assert np.array_equal(_bits(f["y"], name), contract(x, w.T, name).reshape(-1))
    assert np.array_equal(_bits(f["dx"], name), contract(grad, w, name).reshape(-1))
    assert np.array_equal(_bits(f["dw"], name), contract(x.T, grad, name).T.reshape(-1))
    assert f["dw_strides"] == [64, 1] and not f["errors"], f["errors"]
    dtype = DTYPES[name]
    assert [(o["op"], o["m"], o["k"], o["n"]) for o in f["ops"]] == [
        ("aclnnMatmul", 24, 64, 64), ("aclnnMatmul", 64, 24, 64), ("aclnnMatmul", 24, 64, 64),
        ("aclnnInplaceCopy", None, None, None)]
    assert all(o["dtype"] == dtype and o["access_errors"] == 0 for o in f["ops"])
    assert all(o["cube_math_type"] == 0 for o in f["ops"][:3])  # torch_npu's default: KEEP_DTYPE


def test_mm_of_a_transposed_view_and_a_batched_matmul_through_torch_npu():
    f = _torch_facts("1")["mm"]
    a, b = _array(f["a"], "bfloat16", (64, 24)), _array(f["b"], "bfloat16", (64, 40))
    c, d = _array(f["c"], "bfloat16", (2, 5, 64)), _array(f["d"], "bfloat16", (64, 3))
    assert np.array_equal(_bits(f["at_b"], "bfloat16"), contract(a.T, b, "bfloat16").reshape(-1))
    assert np.array_equal(_bits(f["c_d"], "bfloat16"), contract(c, d, "bfloat16").reshape(-1))
    assert np.array_equal(_bits(f["contiguous"], "bfloat16"), narrow(a.T, "bfloat16").reshape(-1))
    assert [(o["op"], o["m"], o["k"], o["n"], o["batch"]) for o in f["ops"]] == [
        ("aclnnMm", 24, 64, 40, 1), ("aclnnMatmul", 5, 64, 3, 2), ("aclnnInplaceCopy", None, None, None, None)]
    assert not f["errors"], f["errors"]


@pytest.mark.parametrize("task_queue", ["1", "2"])
def test_hf32_is_refused_by_name_through_torch_npu(task_queue):
    """torch.npu.matmul.allow_hf32: op-plugin asks aclnnMm for cubeMathType 3 (USE_HF32), which the double does not
    implement. The first phase refuses it by name: torch raises (with TASK_QUEUE_ENABLE=2 the operator runs whole on
    torch_npu's queue thread, whose error names the operator but not the double's text), nothing runs, and the
    library's line is on stderr once."""
    f = _torch_facts(task_queue)
    raised = f["hf32"]["raised"] or ""
    if task_queue == "1":  # the first phase on the caller: its message (aclGetRecentErrMsg) is in the error
        assert "aclnnMm with cubeMathType 3 (USE_HF32) on FLOAT is not implemented" in raised, f["hf32"]
    else:
        assert "current working operator name is aclnnMm" in raised, f["hf32"]
    assert f["hf32"]["ops"] == []  # nothing ran
    assert f["stderr"].count("acl_host: aclnnMm with cubeMathType 3 (USE_HF32) on FLOAT is not implemented") == 1
