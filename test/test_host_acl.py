"""Released torch_npu wheels, unchanged, over the host ACL library (issue 29 item 1).

The host ACL library (``tooling/sim/host_library.py``, ``sim/acl_sim/host/``) is a TEST DOUBLE of CANN's
runtime libraries, loaded only into these tests' subprocesses (``tooling/releases/host_runtime.py``).
For each release of the leg (a declared list; wheels fetched by the fixtures):

* in a subprocess, ``import torch, torch_npu`` works, ``torch.npu.is_available()``, ``torch.empty``
  is served by torch_npu's own caching allocator (its rounding: 4 MiB + 32 -> 4194816 allocated, a
  20 MiB segment reserved, which is exactly what reached the double's aclrtMallocAlign32), a page-locked
  copy runs on torch_npu's task-queue thread (TASK_QUEUE_ENABLE 1, 2) or on the caller (0), synchronize
  and empty_cache work, device 1 works, a freed range touched later is reported, and both launch calls
  (aclrtLaunchKernelWithHostArgs, rtKernelLaunch) run the probe on torch_npu's memory;
* torch.npu.graph captures and replays on torch_npu's own code (its capture_begin runs its own fill_:
  the double's op-api, aclnnInplaceFillScalar), and with TASK_QUEUE_ENABLE=2 that operator takes its
  workspace from torch_npu's workspace allocator on the queue thread; an operator the double does not
  implement (torch.ones) fails loudly;
* every function the wheel needs is implemented, a stated no-op (with why) or a failing stub, and a
  failing stub never returns success (each is called through ctypes).

On the 2.14.1 leg: torch_npu 2.13.0 on its own torch's CPU build (as Ascend machines run it), and
torch_npu 2.14.0's double built and checked; 2.14.0 itself cannot be imported here (no CPU build of torch
2.14.0, and the index's CUDA build aborts torch_npu's import on a duplicate allocator key).
"""
from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import subprocess
import sys

import pytest
import release_wheels

from torch_npu._inductor.patchset.tooling.releases import elf, host_runtime, line_python
from torch_npu._inductor.patchset.tooling.sim import host_library

LEG = ".".join(importlib.metadata.version("torch").split("+")[0].split(".")[:3])
#: The releases each leg runs (declared: the same tests on a fresh machine and a warm one). On the 2.14.1
#: leg, 2.13.0 runs on its own torch's CPU build (releases/line_python.py); 2.14.0 has none here, so its
#: double is built and checked but not imported (the skip says why).
RELEASES = {"2.7.1": ("2.7.1.post6", "2.7.1.post10", "2.7.1.post11"), "2.14.1": ("2.14.0", "2.13.0")}.get(LEG, ())
#: TASK_QUEUE_ENABLE values each release runs with (post10, the reference release, and 2.13.0: all three).
TASK_QUEUES = {"2.7.1.post10": ("0", "1", "2"), "2.13.0": ("0", "1", "2")}
RUNS = [(r, q) for r in RELEASES for q in TASK_QUEUES.get(r, ("0", "1"))]
#: The releases that also run with TASK_QUEUE_ENABLE=2 (op-plugin's V2 path; no graph capture).
V2_RELEASES = [r for r in RELEASES if "2" in TASK_QUEUES.get(r, ())]

MIB = 1 << 20


_fetched = release_wheels.fetched


@pytest.fixture(scope="module", params=RELEASES)
def release(request) -> str:
    return _fetched(request.param)


@pytest.fixture(scope="module")
def inventory(release) -> dict:
    return host_runtime.inventory(release)


# ---- what every wheel needs, and what the double does with it -------------------------------------
def test_every_needed_function_is_implemented_a_stated_noop_or_a_failing_stub(inventory):
    needed = set(inventory["imports"]) | set(inventory["runtime_lookups"]) | set(inventory["launcher_calls"])
    implemented, noops, missing = set(inventory["implemented"]), set(inventory["stated_noops"]), set(
        inventory["missing"])
    assert not implemented & noops and not implemented & missing and not noops & missing
    assert needed == implemented | noops | missing, sorted(needed ^ (implemented | noops | missing))
    for name, why in inventory["stated_noops"].items():
        assert host_library.STATED_NOOPS.get(name) == why and len(why) > 20
    assert not inventory["missing_without_prototype"], "add their prototypes to acl_sim/host/supplement.h"
    assert not inventory["imports_not_c"]
    # What torch_npu's initialisation and the launchers reach is implemented, not stubbed.
    for name in ("aclInit", "aclrtSetDevice", "aclrtMalloc", "aclrtFree", "aclrtMemcpyAsync", "aclrtCreateStream",
                 "aclrtRecordEvent", "aclrtSynchronizeDevice", "aclrtGetCurrentContext", "aclrtSetCurrentContext",
                 "aclmdlRICaptureBegin", "aclmdlRIExecuteAsync", "aclCreateTensor", "aclCreateScalar",
                 "aclnnInplaceFillScalarGetWorkspaceSize", "aclnnInplaceFillScalar", "aclnnInplaceZero"):
        assert name in implemented, name
    # The op-api calls op-plugin makes through its own function-pointer types are compiled against them.
    assert inventory["prototype_source"]["aclCreateTensor"] == "wheel header (op-plugin's function-pointer types)"
    assert inventory["prototype_source"]["aclnnInplaceFillScalar"] == "supplement.h"


def test_the_library_defines_every_import_under_every_needed_name(release, inventory):
    folder = host_runtime.runtime_dir(release)
    defined, _ = elf.dynamic_symbols(folder / host_library.LIBRARY)
    assert set(inventory["imports"]) <= defined
    for name in inventory["library_names"]:
        assert (folder / name).resolve() == (folder / host_library.LIBRARY).resolve(), name
    for name in ("libascendcl.so", "libhccl.so", "libacl_op_compiler.so", "libge_runner.so", "libgraph.so",
                 "libacl_tdt_channel.so", "libruntime.so", "libopapi.so", "libnnopbase.so"):
        assert name in inventory["library_names"]
    # Nothing of acl_sim's C++ (its torch_npu stand-ins above all) leaks into the process.
    assert not any(s.startswith("_Z") for s in defined)
    assert not {"acl_host_impl_aclrtMalloc", "acl_host_note_call"} & defined
    # The stand-ins are not even compiled in: torch_npu's own allocators and task queue run over the double.
    local = subprocess.run(["nm", "-C", str(folder / host_library.LIBRARY)], capture_output=True, text=True,
                           check=True).stdout
    for standin in ("allocate_workspace", "RunOpApiV2", "caching_raw_alloc_with_stream", "npu_synchronize_device"):
        assert standin not in local, standin


_CALL_STUBS = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
kinds = json.loads(sys.argv[2])
out = {}
for name, kind in kinds.items():
    f = getattr(lib, name)
    f.restype = ctypes.c_void_p if kind == "pointer" else ctypes.c_int if kind == "status" else None
    first = f()
    f()
    out[name] = first
lib.acl_host_missing_count.restype = ctypes.c_int
print(json.dumps({"returned": out, "missing_count": lib.acl_host_missing_count()}))
"""


def test_no_failing_stub_returns_success(release, inventory):
    """Every missing function the wheel needs, called (twice) through ctypes: an error code or nullptr,
    its name logged once, every call counted; a void one is counted and logged."""
    manifest = host_runtime.host_library_for(release).manifest
    returns = manifest["returns"]
    kinds = {n: host_library.status_kind(returns[n]) for n in inventory["missing"] if n in returns}
    kinds = {n: k for n, k in kinds.items() if k in ("status", "pointer", "void")}
    assert len(kinds) >= 50
    lib = str(host_runtime.runtime_dir(release) / host_library.LIBRARY)
    proc = subprocess.run([sys.executable, "-c", _CALL_STUBS, lib, json.dumps(kinds)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    for name, kind in kinds.items():
        if kind == "status":
            # the failure value of its type (the int32_t of Msprof* and int are -1)
            assert got["returned"][name] not in (0, None), f"{name} returned success"
        elif kind == "pointer":
            assert got["returned"][name] is None, f"{name} returned a pointer"
        assert proc.stderr.count(f"acl_host: {name} is not implemented") == 1, name
    assert got["missing_count"] == 2 * len(kinds)


_SEMANTICS = r"""
import ctypes, json, sys
lib = ctypes.CDLL(sys.argv[1])
u32, i64, i32 = ctypes.c_uint32, ctypes.c_int64, ctypes.c_int32
out = {}
dev = i32(-5)
out["get_device_before_set"] = lib.aclrtGetDevice(ctypes.byref(dev))  # no device on this thread yet
out["init"], out["init_again"] = lib.aclInit(None), lib.aclInit(None)
n = u32()
lib.aclrtGetDeviceCount(ctypes.byref(n)); out["devices"] = n.value
out["set_device_2"] = lib.aclrtSetDevice(2)
lib.aclrtSetDevice(1); lib.aclrtGetDevice(ctypes.byref(dev)); out["device"] = dev.value
v = i64(-1)
lib.aclrtGetSysParamOpt(0, ctypes.byref(v)); out["param_unset"] = v.value
lib.aclrtSetSysParamOpt(0, i64(7)); lib.aclrtGetSysParamOpt(0, ctypes.byref(v)); out["param_set"] = v.value
cores = u32()
lib.aclrtGetDeviceResLimit(0, 1, ctypes.byref(cores)); out["vector_cores"] = cores.value
lib.aclrtSetDeviceResLimit(0, 1, u32(8)); lib.aclrtGetDeviceResLimit(0, 1, ctypes.byref(cores)); out["limited"] = cores.value
lib.aclrtResetDeviceResLimit(0); lib.aclrtGetDeviceResLimit(0, 1, ctypes.byref(cores)); out["reset"] = cores.value
cap = {}
lib.aclrtSetDeviceResLimit(0, 1, u32(8))  # a resource limit does not change the SoC's table
for info in (0, 1, 2, 3):  # AI cores, vector cores, L2 size, an unknown kind
    v = i64(-1); rc = lib.aclGetDeviceCapability(0, info, ctypes.byref(v)); cap[info] = (rc, v.value)
lib.aclrtResetDeviceResLimit(0)
out["capability"] = [cap[k] for k in sorted(cap)]
out["capability_device_2"] = lib.aclGetDeviceCapability(2, 0, ctypes.byref(v))
free, total = ctypes.c_size_t(), ctypes.c_size_t()
out["mem_info"] = lib.aclrtGetMemInfo(1, ctypes.byref(free), ctypes.byref(total)); out["total"] = total.value
lib.aclGetRecentErrMsg.restype = ctypes.c_char_p
lib.aclrtIpcGetEventHandle(None, None)  # not implemented
msg = lib.aclGetRecentErrMsg()
out["recent_msg"] = msg.decode() if msg else None
lib.acl_host_report_json.restype = ctypes.c_char_p
r = json.loads(lib.acl_host_report_json())
out["counted"] = {k: r["calls"][k]["calls"] for k in ("aclInit", "aclrtSetDevice", "aclrtIpcGetEventHandle")}
print(json.dumps(out))
"""


def test_the_double_answers_as_cann_describes(release):
    """Without torch: the rules torch_npu relies on (no device until one is set, a second aclInit refused,
    settings read back, resource limits, the device's capabilities, memory info) and the accounting of every
    call."""
    lib = str(host_runtime.runtime_dir(release) / host_library.LIBRARY)
    proc = subprocess.run([sys.executable, "-c", _SEMANTICS, lib], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    assert got["get_device_before_set"] == 107002  # ACL_ERROR_RT_CONTEXT_NULL
    assert got["init"] == 0 and got["init_again"] == 100002  # ACL_ERROR_REPEAT_INITIALIZE
    assert got["devices"] == 2 and got["set_device_2"] == 200002 and got["device"] == 1  # ACL_ERROR_INVALID_DEVICE
    assert got["param_unset"] == 0 and got["param_set"] == 7
    assert (got["vector_cores"], got["limited"], got["reset"]) == (48, 8, 48)
    assert got["mem_info"] == 0 and got["total"] == 16 << 30
    # the SoC's table (CANN's acl.cpp reads platform_config/cann/Ascend910B1.ini), untouched by the limit above
    assert got["capability"] == [[0, 24], [0, 48], [0, 192 * MIB], [100000, -1]]  # ACL_ERROR_INVALID_PARAM
    assert got["capability_device_2"] == 100000
    assert "aclrtIpcGetEventHandle is not implemented" in got["recent_msg"]
    assert got["counted"] == {"aclInit": 2, "aclrtSetDevice": 2, "aclrtIpcGetEventHandle": 1}


_ELAPSED = r"""
import ctypes as c, json, os, struct, sys, time
lib = c.CDLL(sys.argv[1])
lib.aclrtEventElapsedTime.argtypes = [c.POINTER(c.c_float), c.c_void_p, c.c_void_p]
lib.aclInit(None); lib.aclrtSetDevice(0)
s = c.c_void_p(); lib.aclrtCreateStream(c.byref(s))
ev = {}
for n in "abcdx":
    ev[n] = c.c_void_p(); lib.aclrtCreateEvent(c.byref(ev[n]))
ms = c.c_float(-1.0)
def elapsed(x, y):
    ms.value = -1.0
    return lib.aclrtEventElapsedTime(c.byref(ms), ev[x], ev[y])
# the probe as a kernel that runs for sim_time_us on the stream (rtKernelLaunch: every wheel declares it)
binary = (b"ACL_HOST_PROBE_BINARY 1\n"
          b"kernel k50 has_ffts=0 simt_only=1 lock_bytes=0 workspace_bytes=0 own_args_bytes=0 sim_time_us=50000\n"
          b"kernel k60s has_ffts=0 simt_only=1 lock_bytes=0 workspace_bytes=0 own_args_bytes=0 sim_time_us=60000000\n")
class DevBinary(c.Structure):
    _fields_ = [("magic", c.c_uint32), ("version", c.c_uint32), ("data", c.c_char_p), ("length", c.c_uint64)]
bh = c.c_void_p()
assert lib.rtDevBinaryRegister(c.byref(DevBinary(0x43554245, 0, binary, len(binary))), c.byref(bh)) == 0
stubs = {}
for name in ("k50", "k60s"):
    stubs[name] = c.c_size_t(0)
    assert lib.rtFunctionRegister(bh, c.byref(stubs[name]), name.encode() + b"_stub", name.encode(), 0) == 0
grid = c.create_string_buffer(struct.pack("<iii", 1, 1, 1), 12)
def launch(name):
    assert lib.rtKernelLaunch(c.byref(stubs[name]), c.c_uint32(1), grid, c.c_uint32(12), None, s) == 0
out = {}
out["never_recorded"] = elapsed("a", "b")
lib.aclrtRecordEvent(ev["a"], s)  # recorded (not known complete: the second event, never recorded, decides)
out["one_recorded"], out["other_recorded"] = elapsed("a", "b"), elapsed("b", "a")
launch("k50")
lib.aclrtRecordEvent(ev["b"], s)
lib.aclrtSynchronizeStream(s)
out["a_b"] = (elapsed("a", "b"), ms.value)
out["b_a"] = elapsed("b", "a")
out["a_a"] = (elapsed("a", "a"), ms.value)
out["null_ms"] = lib.aclrtEventElapsedTime(None, ev["a"], ev["b"])
lib.aclrtDestroyEvent(ev["x"])
out["destroyed"] = elapsed("a", "x")
lib.aclrtRecordEvent(ev["c"], s)
lib.aclrtSynchronizeEvent(ev["c"])  # known complete (the first query after a record would say not yet)
launch("k60s")  # still running when the process ends
lib.aclrtRecordEvent(ev["d"], s)
t0 = time.monotonic()
out["not_complete"] = elapsed("c", "d")
out["seconds"] = time.monotonic() - t0
out["ms_after_failure"] = ms.value
out["complete_still"] = elapsed("a", "c")
lib.acl_host_report_json.restype = c.c_char_p
out["calls"] = json.loads(lib.acl_host_report_json())["calls"]["aclrtEventElapsedTime"]["calls"]
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_event_elapsed_time_is_measured_on_the_stream_and_never_waits(release):
    """aclrtEventElapsedTime (compile-time autotune times kernels with it): the milliseconds between the
    moments the stream reached two records; CANN's runtime's error codes for an event never recorded (its
    RECORDER_NULL, which reaches the caller as 507000) and a record not known complete (107006: at once, while a
    60 s kernel runs); an end reached before its start is refused (107007; CANN gives a negative time); and never
    a value written on failure."""
    lib = str(host_runtime.runtime_dir(release) / host_library.LIBRARY)
    proc = subprocess.run([sys.executable, "-c", _ELAPSED, lib], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    assert got["never_recorded"] == got["one_recorded"] == got["other_recorded"] == 507000  # RT_INTERNAL_ERROR
    rc, ms = got["a_b"]
    assert rc == 0 and 50.0 <= ms < 60_000.0
    assert got["b_a"] == 107007  # ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL
    assert got["a_a"] == [0, 0.0]
    assert got["null_ms"] == 100000 and got["destroyed"] == 107017  # INVALID_PARAM, RT_INVALID_HANDLE
    assert got["not_complete"] == 107006 and got["seconds"] < 30  # ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID, no wait
    assert got["ms_after_failure"] == -1.0 and got["complete_still"] == 0
    assert got["calls"] == 10


_EVENT_TIMING = r"""
import ctypes as c, json, os, sys
lib = c.CDLL(sys.argv[1])
lib.acl_host_stream_hold.restype = c.c_uint64
lib.acl_host_stream_hold.argtypes = [c.c_void_p, c.c_uint32]
lib.acl_host_stream_release.argtypes = [c.c_uint64]
lib.aclrtEventElapsedTime.argtypes = [c.POINTER(c.c_float), c.c_void_p, c.c_void_p]
lib.aclInit(None); lib.aclrtSetDevice(0)
s, t = c.c_void_p(), c.c_void_p()
lib.aclrtCreateStream(c.byref(s)); lib.aclrtCreateStream(c.byref(t))
ACL_EVENT_SYNC, ACL_EVENT_CAPTURE_STREAM_PROGRESS = 0x1, 0x2
def query(ev):
    st = c.c_int(-1)
    assert lib.aclrtQueryEventStatus(ev, c.byref(st)) == 0
    return {1: "complete", 0: "not_ready"}[st.value]
def create(kind):
    ev = c.c_void_p()
    rc = {"plain": lambda: lib.aclrtCreateEvent(c.byref(ev)),
          "with_flag": lambda: lib.aclrtCreateEventWithFlag(c.byref(ev), ACL_EVENT_SYNC),
          "ex_sync": lambda: lib.aclrtCreateEventExWithFlag(c.byref(ev), ACL_EVENT_SYNC),
          "ex_progress": lambda: lib.aclrtCreateEventExWithFlag(c.byref(ev), ACL_EVENT_CAPTURE_STREAM_PROGRESS)}[kind]()
    assert rc == 0, (kind, rc)
    return ev
out = {}
for kind in ("plain", "with_flag", "ex_sync", "ex_progress"):
    ev, r = create(kind), {}
    # an idle stream: the first query after the record, the second, a synchronisation of the event
    lib.aclrtRecordEvent(ev, s)
    lib.aclrtSynchronizeStream(t)  # another stream's synchronisation covers nothing of s
    r["first"] = query(ev)
    assert lib.aclrtSynchronizeEvent(ev) == 0
    r["after_sync"] = query(ev)
    lib.aclrtRecordEvent(ev, s)
    r["rerecorded"] = query(ev)
    assert lib.aclrtSynchronizeStream(s) == 0
    r["after_stream_sync"] = query(ev)
    # behind a hold: not reached however often asked; elapsed time does not wait
    hold = lib.acl_host_stream_hold(s, 60000)
    assert hold
    lib.aclrtRecordEvent(ev, s)
    r["held"] = [query(ev) for _ in range(3)]
    ms = c.c_float(-1.0)
    r["elapsed_held"] = lib.aclrtEventElapsedTime(c.byref(ms), ev, ev)
    lib.acl_host_stream_release(hold)
    assert lib.aclrtSynchronizeDeviceWithTimeout(-1) == 0
    r["after_device_sync"] = query(ev)
    out[kind] = r
# a stream waiting for a record that is not reached yet waits for it, not for the record's call
ev = create("ex_sync")
hold = lib.acl_host_stream_hold(s, 60000)
lib.aclrtRecordEvent(ev, s)
after = create("plain")
assert lib.aclrtStreamWaitEvent(t, ev) == 0
lib.aclrtRecordEvent(after, t)
query(after)
out["waiter_before_release"] = query(after)
lib.acl_host_stream_release(hold)
assert lib.aclrtSynchronizeStream(t) == 0
out["waiter_after_release"] = query(after)
# destroying an event whose record is not reached yet: success; the stream still runs its record
hold = lib.acl_host_stream_hold(s, 60000)
lib.aclrtRecordEvent(ev, s)
out["destroy_pending"] = lib.aclrtDestroyEvent(ev)
out["query_destroyed"] = lib.aclrtQueryEventStatus(ev, c.byref(c.c_int()))
lib.acl_host_stream_release(hold)
out["stream_sync_after"] = lib.aclrtSynchronizeStream(s)
lib.acl_host_error_count.restype = c.c_int
out["errors"] = lib.acl_host_error_count()
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_a_record_is_a_task_on_its_stream(release):
    """Events as CANN has them (issue 47): a record is a task on its stream (CANN's Event::Record submits an
    EVENT_RECORD task; the event is recorded once the device reported it done). On an idle stream too, the first
    query after a record finds it not reached; a later query, or a synchronisation of the event, its stream or its
    device, finds it complete; behind work that has not run it stays not reached, and elapsed time does not wait for
    it. The same for every creation kind torch_npu and the helper use; aclrtStreamWaitEvent waits for the record
    itself; destroying an event whose record is pending succeeds and leaves the stream's work to run."""
    lib = str(host_runtime.runtime_dir(release) / host_library.LIBRARY)
    proc = subprocess.run([sys.executable, "-c", _EVENT_TIMING, lib], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    for kind in ("plain", "with_flag", "ex_sync", "ex_progress"):
        assert got[kind] == {"first": "not_ready", "after_sync": "complete", "rerecorded": "not_ready",
                             "after_stream_sync": "complete", "held": ["not_ready"] * 3,
                             "elapsed_held": 107006, "after_device_sync": "complete"}, kind
    assert got["waiter_before_release"] == "not_ready" and got["waiter_after_release"] == "complete"
    assert got["destroy_pending"] == 0 and got["query_destroyed"] == 107017  # ACL_ERROR_RT_INVALID_HANDLE
    assert got["stream_sync_after"] == 0 and got["errors"] == 0


_CANN_RULES = r"""
import ctypes as c, json, os, sys
lib = c.CDLL(sys.argv[1])
lib.acl_host_stream_hold.restype = c.c_uint64
lib.acl_host_stream_hold.argtypes = [c.c_void_p, c.c_uint32]
lib.acl_host_stream_release.argtypes = [c.c_uint64]
lib.acl_host_event_ids_in_use.restype = c.c_uint32
lib.aclInit(None); lib.aclrtSetDevice(0)
s, t, gone = c.c_void_p(), c.c_void_p(), c.c_void_p()
for x in (s, t, gone):
    lib.aclrtCreateStream(c.byref(x))
lib.aclrtDestroyStream(gone)
SYNC, PROGRESS, TIME_LINE, EXTERNAL, IPC = 0x1, 0x2, 0x8, 0x20, 0x40
def create(fn, flag=None):
    ev = c.c_void_p()
    rc = getattr(lib, fn)(c.byref(ev)) if flag is None else getattr(lib, fn)(c.byref(ev), flag)
    return rc, ev
def query(ev):
    st = c.c_int(-1)
    assert lib.aclrtQueryEventStatus(ev, c.byref(st)) == 0
    return {1: "complete", 0: "not_ready"}[st.value]
out = {}
# a query of an event never recorded: CANN's "new mode" (ExWithFlag) complete, the older kinds not ready
kinds = {"plain": ("aclrtCreateEvent", None), "with_flag": ("aclrtCreateEventWithFlag", SYNC),
         "ex_sync": ("aclrtCreateEventExWithFlag", SYNC), "ex_progress": ("aclrtCreateEventExWithFlag", PROGRESS)}
ev = {k: create(*v)[1] for k, v in kinds.items()}
out["never_recorded"] = {k: query(e) for k, e in ev.items()}
# flags checked as CANN's runtime does; the kinds the double does not model refused as not supported
out["flags"] = {name: create(fn, flag)[0] for name, fn, flag in (
    ("with_flag_0", "aclrtCreateEventWithFlag", 0), ("with_flag_0x80", "aclrtCreateEventWithFlag", 0x80),
    ("with_flag_external", "aclrtCreateEventWithFlag", EXTERNAL),
    ("with_flag_external_sync", "aclrtCreateEventWithFlag", EXTERNAL | SYNC),
    ("ex_0", "aclrtCreateEventExWithFlag", 0), ("ex_external", "aclrtCreateEventExWithFlag", EXTERNAL),
    ("ex_ipc", "aclrtCreateEventExWithFlag", IPC), ("ex_ipc_sync", "aclrtCreateEventExWithFlag", IPC | SYNC),
    ("ex_time_line_sync", "aclrtCreateEventExWithFlag", TIME_LINE | SYNC))}
# a stream waiting: never recorded (Ex: nothing to wait for; the older kinds: refused), an event without SYNC
out["wait_never_recorded"] = {k: lib.aclrtStreamWaitEvent(t, e) for k, e in ev.items()}
time_line = create("aclrtCreateEventWithFlag", TIME_LINE)[1]
for e in (ev["ex_progress"], time_line):
    lib.aclrtRecordEvent(e, s)
out["wait_without_sync"] = [lib.aclrtStreamWaitEvent(t, e) for e in (ev["ex_progress"], time_line)]
lib.aclrtSynchronizeDevice()
# event ids: a waitable WithFlag event holds one from its creation, an ExWithFlag one per record until reached,
# an event without SYNC none; at the limit a record or a creation fails with ACL_ERROR_RT_NO_EVENT_RESOURCE
for e in ev.values():
    lib.aclrtDestroyEvent(e)
lib.acl_host_set_event_id_limit(0, 1)
ids = {}
rc, held = create("aclrtCreateEventWithFlag", SYNC)
ids["with_flag_created"] = (rc, lib.acl_host_event_ids_in_use(0))
ids["second_with_flag"] = create("aclrtCreateEventWithFlag", SYNC)[0]
rc, ex = create("aclrtCreateEventExWithFlag", SYNC)
ids["ex_record_at_limit"] = lib.aclrtRecordEvent(ex, s)
rc, prog = create("aclrtCreateEventExWithFlag", PROGRESS)
ids["progress_records"] = [lib.aclrtRecordEvent(prog, s) for _ in range(3)]
lib.aclrtDestroyEvent(held)
hold = lib.acl_host_stream_hold(s, 60000)
ids["ex_record"] = (lib.aclrtRecordEvent(ex, s), lib.acl_host_event_ids_in_use(0))
ids["ex_again_before_reached"] = lib.aclrtRecordEvent(ex, s)
lib.acl_host_stream_release(hold)
lib.aclrtSynchronizeStream(s)
ids["after_reached"] = (lib.acl_host_event_ids_in_use(0), lib.aclrtRecordEvent(ex, s))
lib.aclrtSynchronizeStream(s)
lib.acl_host_reset()
ids["after_reset"] = [lib.aclrtRecordEvent(ex, s) for _ in range(3)]
out["ids"] = ids
# synchronisations with a timeout: 0 and below -1 refused; past it ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
hold = lib.acl_host_stream_hold(s, 60000)
out["sync_timeouts"] = {
    "stream_0": lib.aclrtSynchronizeStreamWithTimeout(s, 0), "stream_-2": lib.aclrtSynchronizeStreamWithTimeout(s, -2),
    "device_0": lib.aclrtSynchronizeDeviceWithTimeout(0), "device_-2": lib.aclrtSynchronizeDeviceWithTimeout(-2),
    "stream_held": lib.aclrtSynchronizeStreamWithTimeout(s, 50), "device_held": lib.aclrtSynchronizeDeviceWithTimeout(50),
    "other_stream": lib.aclrtSynchronizeStreamWithTimeout(t, 60000)}
lib.acl_host_stream_release(hold)
out["sync_timeouts"]["released"] = lib.aclrtSynchronizeStreamWithTimeout(s, 60000)
out["sync_timeouts"]["no_limit"] = lib.aclrtSynchronizeDeviceWithTimeout(-1)
# an asynchronous host-to-host copy: not supported on the training products
a, b = c.create_string_buffer(16), c.create_string_buffer(16)
out["h2h_async"] = lib.aclrtMemcpyAsync(a, c.c_size_t(16), b, c.c_size_t(16), 0, s)
# aclmdlRICaptureGetInfo: the stream must be given, and one of its outputs
st, model = c.c_int(-1), c.c_void_p(1)
out["capture_info"] = {"null_stream": lib.aclmdlRICaptureGetInfo(None, c.byref(st), c.byref(model)),
                       "no_outputs": lib.aclmdlRICaptureGetInfo(s, None, None),
                       "destroyed_stream": lib.aclmdlRICaptureGetInfo(gone, c.byref(st), None),
                       "model_only": lib.aclmdlRICaptureGetInfo(s, None, c.byref(model))}
out["capture_info"]["model_only_model"] = model.value
out["capture_info"]["status_only"] = (lib.aclmdlRICaptureGetInfo(s, c.byref(st), None), st.value)
# the device's memory as a test set it (torch_npu's memory fraction and out-of-memory text read it)
lib.acl_host_set_device_memory.argtypes = [c.c_int, c.c_uint64]
lib.acl_host_set_device_memory(0, 64 << 20)
free, total = c.c_size_t(), c.c_size_t()
out["mem_info"] = (lib.aclrtGetMemInfo(0, c.byref(free), c.byref(total)), free.value, total.value)
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_the_double_follows_canns_rules_for_events_syncs_copies_and_capture_info(release):
    """CANN's runtime source (docs/facts.md, "CANN's runtime against the host ACL library"), where the double was
    kinder: an event never recorded is not ready unless made by aclrtCreateEventExWithFlag; event flags are checked
    (and the kinds the double does not model refused); a stream cannot wait for an event never recorded (but an
    ExWithFlag one) nor for one without ACL_EVENT_SYNC; a device's event ids are limited, taken by creation kind, and
    a record or creation that finds none fails; a synchronisation's timeout is checked and honoured; an
    asynchronous host-to-host copy is not supported; aclmdlRICaptureGetInfo needs a stream (no default one) and an
    output; aclrtGetMemInfo reports the device memory a test set, not more."""
    lib = str(host_runtime.runtime_dir(release) / host_library.LIBRARY)
    proc = subprocess.run([sys.executable, "-c", _CANN_RULES, lib], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    assert got["never_recorded"] == {"plain": "not_ready", "with_flag": "not_ready", "ex_sync": "complete",
                                     "ex_progress": "complete"}
    assert got["flags"] == {"with_flag_0": 107000, "with_flag_0x80": 107000, "with_flag_external": 207000,
                            "with_flag_external_sync": 107000, "ex_0": 107000, "ex_external": 107000,
                            "ex_ipc": 207000, "ex_ipc_sync": 107000, "ex_time_line_sync": 0}
    assert got["wait_never_recorded"] == {"plain": 107000, "with_flag": 107000, "ex_sync": 0, "ex_progress": 0}
    assert got["wait_without_sync"] == [207000, 107000]
    ids = got["ids"]
    assert ids["with_flag_created"] == [0, 1] and ids["second_with_flag"] == 207007  # ACL_ERROR_RT_NO_EVENT_RESOURCE
    assert ids["ex_record_at_limit"] == 207007 and ids["progress_records"] == [0, 0, 0]
    assert ids["ex_record"] == [0, 1] and ids["ex_again_before_reached"] == 207007
    assert ids["after_reached"] == [0, 0] and ids["after_reset"] == [0, 0, 0]
    assert got["sync_timeouts"] == {"stream_0": 107000, "stream_-2": 107000, "device_0": 107000, "device_-2": 107000,
                                    "stream_held": 507046, "device_held": 507046, "other_stream": 0,
                                    "released": 0, "no_limit": 0}
    assert got["h2h_async"] == 207000  # ACL_ERROR_RT_FEATURE_NOT_SUPPORT
    assert got["capture_info"] == {"null_stream": 100000, "no_outputs": 100000, "destroyed_stream": 107017,
                                   "model_only": 0, "model_only_model": None, "status_only": [0, 0]}
    assert got["mem_info"] == [0, 64 << 20, 64 << 20]


_NO_CONTEXT = r"""
import ctypes as c, json, os, struct, sys, threading
lib = c.CDLL(sys.argv[1])
lib.aclInit(None); lib.aclrtSetDevice(0)
s = c.c_void_p(); lib.aclrtCreateStream(c.byref(s))
d, gone = c.c_void_p(), c.c_void_p()
lib.aclrtMalloc(c.byref(d), c.c_size_t(4096), 0); lib.aclrtMalloc(c.byref(gone), c.c_size_t(64), 0)
ev = c.c_void_p(); lib.aclrtCreateEventExWithFlag(c.byref(ev), 0x1)  # ACL_EVENT_SYNC
lib.aclrtRecordEvent(ev, s); lib.aclrtSynchronizeStream(s)
ctx = c.c_void_p(); lib.aclrtGetCurrentContext(c.byref(ctx))
persistent = c.c_void_p()
lib.aclrtCreateStreamWithConfig(c.byref(persistent), 0, 0x4)  # ACL_STREAM_PERSISTENT
host = c.create_string_buffer(64)
binary = b"ACL_HOST_PROBE_BINARY 1\nkernel k has_ffts=0 simt_only=1 lock_bytes=0 workspace_bytes=0 own_args_bytes=0\n"
class DevBinary(c.Structure):
    _fields_ = [("magic", c.c_uint32), ("version", c.c_uint32), ("data", c.c_char_p), ("length", c.c_uint64)]
bh, stub = c.c_void_p(), c.c_size_t(0)
assert lib.rtDevBinaryRegister(c.byref(DevBinary(0x43554245, 0, binary, len(binary))), c.byref(bh)) == 0
assert lib.rtFunctionRegister(bh, c.byref(stub), b"k_stub", b"k", 0) == 0
grid = c.create_string_buffer(struct.pack("<iii", 1, 1, 1), 12)
H2D = 1
out = {}
def no_context():  # a thread that never called aclrtSetDevice nor aclrtSetCurrentContext
    r, p, st, e2, dev = {}, c.c_void_p(), c.c_void_p(), c.c_void_p(), c.c_int32(-1)
    r["get_device"] = lib.aclrtGetDevice(c.byref(dev))
    r["malloc"] = lib.aclrtMalloc(c.byref(p), c.c_size_t(64), 0)
    r["memset_async"] = lib.aclrtMemsetAsync(d, c.c_size_t(64), 0, c.c_size_t(64), s)
    r["memset"] = lib.aclrtMemset(d, c.c_size_t(64), 0, c.c_size_t(64))
    r["memcpy"] = lib.aclrtMemcpy(d, c.c_size_t(64), host, c.c_size_t(64), H2D)
    r["memcpy_async"] = lib.aclrtMemcpyAsync(d, c.c_size_t(64), host, c.c_size_t(64), H2D, s)
    r["record"] = lib.aclrtRecordEvent(ev, s)
    r["wait"] = lib.aclrtStreamWaitEvent(s, ev)
    r["launch"] = lib.rtKernelLaunch(c.byref(stub), c.c_uint32(1), grid, c.c_uint32(12), None, s)
    r["create_stream"] = lib.aclrtCreateStream(c.byref(st))
    r["create_event"] = lib.aclrtCreateEvent(c.byref(e2))
    r["sync_stream"] = lib.aclrtSynchronizeStream(s)
    r["sync_device"] = lib.aclrtSynchronizeDevice()
    r["destroy_stream"] = lib.aclrtDestroyStream(s)
    # what CANN answers without a context: a free (DevFree takes no context), a PERSISTENT stream's synchronisation
    r["free"] = lib.aclrtFree(gone)
    r["sync_persistent"] = lib.aclrtSynchronizeStream(persistent)
    out["no_context"] = r
def after_set_device():  # the same thread kind, once it set the device: its own context
    lib.aclrtSetDevice(0)
    out["set_device"] = [lib.aclrtMemsetAsync(d, c.c_size_t(64), 0, c.c_size_t(64), s), lib.aclrtRecordEvent(ev, s)]
def after_set_context():
    lib.aclrtSetCurrentContext(ctx)
    out["set_context"] = [lib.aclrtMemsetAsync(d, c.c_size_t(64), 0, c.c_size_t(64), s), lib.aclrtRecordEvent(ev, s)]
for fn in (no_context, after_set_device, after_set_context):
    th = threading.Thread(target=fn); th.start(); th.join()
out["main_sync"] = lib.aclrtSynchronizeDevice()
lib.acl_host_report_json.restype = c.c_char_p
report = json.loads(lib.acl_host_report_json())
out["errors"] = report["errors"]
out["launches"] = report["counters"]["launches"]
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_a_thread_without_a_context_is_refused_as_cann_refuses_it(release):
    """CANN binds aclrtSetDevice's primary context to the calling thread only (issue 53): a thread that never set a
    device (or a context) has none, and every call that needs one fails with ACL_ERROR_RT_CONTEXT_NULL (107002) --
    launches, fills, copies, records, waits, allocations, stream and event creation, synchronisations, destruction
    -- where the double used to act on device 0. A free needs none, nor the synchronisation of a PERSISTENT stream
    (CANN returns before it looks); once the thread set the device or the context, the same calls succeed."""
    lib = str(host_runtime.runtime_dir(release) / host_library.LIBRARY)
    proc = subprocess.run([sys.executable, "-c", _NO_CONTEXT, lib], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    refused = ("get_device", "malloc", "memset_async", "memset", "memcpy", "memcpy_async", "record", "wait", "launch",
               "create_stream", "create_event", "sync_stream", "sync_device", "destroy_stream")
    assert got["no_context"] == {**{k: 107002 for k in refused}, "free": 0, "sync_persistent": 0}
    assert got["set_device"] == [0, 0] and got["set_context"] == [0, 0]
    assert got["main_sync"] == 0 and got["errors"] == [] and got["launches"] == 0


_STREAM_RULES = r"""
import ctypes as c, json, os, struct, sys
lib = c.CDLL(sys.argv[1])
lib.aclInit(None)
out = {}
# a stream of another context (device): no wait on it, no destruction, from the current one
lib.aclrtSetDevice(1)
s1, e1 = c.c_void_p(), c.c_void_p()
lib.aclrtCreateStream(c.byref(s1)); lib.aclrtCreateEventExWithFlag(c.byref(e1), 0x1)
lib.aclrtRecordEvent(e1, s1)
lib.aclrtSetDevice(0)
out["other_context"] = {"wait": lib.aclrtStreamWaitEvent(s1, e1), "destroy": lib.aclrtDestroyStream(s1),
                        "destroy_force": lib.aclrtDestroyStreamForce(s1)}
lib.aclrtSetDevice(1)
out["other_context"]["own_context"] = [lib.aclrtStreamWaitEvent(s1, e1), lib.aclrtDestroyStream(s1)]
lib.aclrtSetDevice(0)
# stream flags: PERSISTENT and DEVICE_USE_ONLY streams answer at once; the host's work on them is not modelled
PERSISTENT, DEVICE_USE_ONLY, FAST_LAUNCH = 0x4, 0x20, 0x1
flags = {}
for name, flag in (("persistent", PERSISTENT), ("device_use_only", DEVICE_USE_ONLY), ("fast_launch", FAST_LAUNCH),
                   ("device_use_only_fast_launch", DEVICE_USE_ONLY | FAST_LAUNCH), ("unknown_bit", 0x400)):
    st = c.c_void_p()
    rc = lib.aclrtCreateStreamWithConfig(c.byref(st), 0, flag)
    status = c.c_int(-1)
    flags[name] = [rc] if rc else [rc, lib.aclrtSynchronizeStream(st), lib.aclrtStreamQuery(st, c.byref(status)),
                                   status.value, lib.aclrtMemsetAsync(c.c_void_p(1), 1, 0, 1, st) if flag & 0x24 else 0,
                                   lib.aclrtDestroyStream(st)]
out["flags"] = flags
# both pointers of aclrtLaunchKernelWithHostArgs must be given (CANN's ACL layer), whatever argsSize says
s = c.c_void_p(); lib.aclrtCreateStream(c.byref(s))
if hasattr(lib, "aclrtBinaryLoadFromData"):
    binary = b"ACL_HOST_PROBE_BINARY 1\nkernel k has_ffts=0 simt_only=1 lock_bytes=0 workspace_bytes=0 own_args_bytes=0\n"
    bh, fh = c.c_void_p(), c.c_void_p()
    assert lib.aclrtBinaryLoadFromData(binary, len(binary), None, c.byref(bh)) == 0
    assert lib.aclrtBinaryGetFunction(bh, b"k", c.byref(fh)) == 0
    grid = c.create_string_buffer(struct.pack("<iii", 1, 1, 1), 12)
    launch = lambda f, args, size: lib.aclrtLaunchKernelWithHostArgs(f, c.c_uint32(1), s, None, args, c.c_size_t(size),
                                                                     None, c.c_size_t(0))
    out["host_args"] = {"null_args_size_0": launch(fh, None, 0), "null_args": launch(fh, None, 12),
                        "null_function": launch(None, grid, 12), "given": launch(fh, grid, 12)}
lib.aclrtSynchronizeStream(s)
lib.acl_host_report_json.restype = c.c_char_p
out["errors"] = json.loads(lib.acl_host_report_json())["errors"]
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_streams_follow_canns_rules_for_contexts_flags_and_launch_arguments(release):
    """CANN's runtime source (docs/facts.md, issue 53): aclrtStreamWaitEvent and aclrtDestroyStream(Force) take only a
    stream of the thread's current context (another device's: ACL_ERROR_RT_STREAM_CONTEXT, 107003); a stream made
    with ACL_STREAM_PERSISTENT or ACL_STREAM_DEVICE_USE_ONLY synchronises and answers a query at once (the host's work
    on it, which CANN runs only through a model or on the device, is refused as not modelled: 207000), and
    DEVICE_USE_ONLY goes with no other flag (107000); aclrtLaunchKernelWithHostArgs refuses a null hostArgs or
    function handle (100000) even with argsSize 0."""
    lib = str(host_runtime.runtime_dir(release) / host_library.LIBRARY)
    proc = subprocess.run([sys.executable, "-c", _STREAM_RULES, lib], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    assert got["other_context"] == {"wait": 107003, "destroy": 107003, "destroy_force": 107003, "own_context": [0, 0]}
    assert got["flags"] == {"persistent": [0, 0, 0, 0, 207000, 0], "device_use_only": [0, 0, 0, 0, 207000, 0],
                            "fast_launch": [0, 0, 0, 0, 0, 0], "device_use_only_fast_launch": [107000],
                            "unknown_bit": [0, 0, 0, 0, 0, 0]}
    if "host_args" in got:
        assert got["host_args"] == {"null_args_size_0": 100000, "null_args": 100000, "null_function": 100000,
                                    "given": 0}
    assert got["errors"] == []


_DESTROY_FORCE = r"""
import ctypes as c, json, os, sys
lib = c.CDLL(sys.argv[1])
lib.acl_host_stream_hold.restype = c.c_uint64
lib.acl_host_stream_hold.argtypes = [c.c_void_p, c.c_uint32]
lib.acl_host_event_ids_in_use.restype = c.c_uint32
lib.aclrtEventElapsedTime.argtypes = [c.POINTER(c.c_float), c.c_void_p, c.c_void_p]
lib.aclInit(None); lib.aclrtSetDevice(0)
s, t = c.c_void_p(), c.c_void_p()
lib.aclrtCreateStream(c.byref(s)); lib.aclrtCreateStream(c.byref(t))
d = c.c_void_p(); lib.aclrtMalloc(c.byref(d), c.c_size_t(64), 0)
a, b = c.c_void_p(), c.c_void_p()
lib.aclrtCreateEventExWithFlag(c.byref(a), 0x1); lib.aclrtCreateEventExWithFlag(c.byref(b), 0x1)  # ACL_EVENT_SYNC
lib.aclrtRecordEvent(a, s); lib.aclrtSynchronizeStream(s)
out = {}
# the stream's work behind a hold of at most 3 s: a fill and a record it has not started when it is destroyed
assert lib.acl_host_stream_hold(s, 3000)
out["queued"] = [lib.aclrtMemsetAsync(d, c.c_size_t(64), 0x5A, c.c_size_t(64), s), lib.aclrtRecordEvent(b, s),
                 lib.aclrtStreamWaitEvent(t, b)]
out["ids_before"] = lib.acl_host_event_ids_in_use(0)
out["destroy_force"] = lib.aclrtDestroyStreamForce(s)
st = c.c_int(-1)
out["query"] = (lib.aclrtQueryEventStatus(b, c.byref(st)), st.value)
out["sync_event"] = lib.aclrtSynchronizeEvent(b)
ms = c.c_float(-1.0)
out["elapsed"] = (lib.aclrtEventElapsedTime(c.byref(ms), a, b), ms.value)
out["waiter"] = lib.aclrtSynchronizeStream(t)
out["ids_after"] = lib.acl_host_event_ids_in_use(0)
out["destroyed"] = lib.aclrtSynchronizeStream(s)
host = c.create_string_buffer(64)
out["read_back"] = lib.aclrtMemcpy(host, c.c_size_t(64), d, c.c_size_t(64), 2)  # D2H: the fill never ran
lib.acl_host_report_json.restype = c.c_char_p
out["errors"] = [e["kind"] for e in json.loads(lib.acl_host_report_json())["errors"]]
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_destroy_stream_force_drops_the_work_the_stream_has_not_started(release):
    """aclrtDestroyStreamForce (issue 53): CANN's forced stream recycle drops what the stream has not started, where
    the double used to run it. A fill it dropped never writes (the bytes stay uninitialised: a read reports it); a
    record it dropped leaves its event recorded as CANN's host-side reclaim does (a query answers complete, a
    synchronisation returns, its event id goes back, a wait another stream queued for it is let through) but with
    no time the device wrote, so aclrtEventElapsedTime refuses it (107006)."""
    lib = str(host_runtime.runtime_dir(release) / host_library.LIBRARY)
    proc = subprocess.run([sys.executable, "-c", _DESTROY_FORCE, lib], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    assert got["queued"] == [0, 0, 0] and got["ids_before"] == 1 and got["destroy_force"] == 0
    assert got["query"] == [0, 1] and got["sync_event"] == 0  # ACL_EVENT_RECORDED_STATUS_COMPLETE
    assert got["elapsed"] == [107006, -1.0]  # ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID
    assert got["waiter"] == 0 and got["ids_after"] == 0 and got["destroyed"] == 107017
    assert got["read_back"] == 0 and got["errors"] == ["uninitialised-read"]


_STREAM_LIMIT = r"""
import ctypes as c, json, os, sys
lib = c.CDLL(sys.argv[1])
lib.aclInit(None)
out = {}
for dev in (0, 1):
    lib.aclrtSetDevice(dev)
    streams = [c.c_void_p() for _ in range(4)]
    out[dev] = [lib.aclrtCreateStream(c.byref(x)) for x in streams]
    with_config = c.c_void_p()
    out[dev].append(lib.aclrtCreateStreamWithConfig(c.byref(with_config), 0, 0x1))
    out[dev].append(lib.aclrtDestroyStream(streams[0]))
    out[dev].append(lib.aclrtCreateStreamWithConfig(c.byref(with_config), 0, 0x1))
lib.acl_host_reset()  # the limit stays: it is the library's configuration
x = c.c_void_p()
out["after_reset"] = lib.aclrtCreateStream(c.byref(x))
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_a_device_has_a_limited_number_of_streams(release):
    """CANN's runtime gives the 910B 2038 streams per device, its default stream among them (issue 53); the double
    refuses the next creation with ACL_ERROR_RT_NO_STREAM_RESOURCE (207008), per device, and a destroyed stream gives
    its place back. ACL_HOST_STREAMS_PER_DEVICE lowers the limit for this test (4: three streams of one's own)."""
    lib = str(host_runtime.runtime_dir(release) / host_library.LIBRARY)
    proc = subprocess.run([sys.executable, "-c", _STREAM_LIMIT, lib], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ACL_HOST_STREAMS_PER_DEVICE": "4"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    for dev in ("0", "1"):
        assert got[dev] == [0, 0, 0, 207008, 207008, 0, 0], dev
    assert got["after_reset"] == 207008


_OPAPI = r"""
import ctypes as c, json, sys
lib = c.CDLL(sys.argv[1])
lib.aclCreateTensor.restype = lib.aclCreateScalar.restype = c.c_void_p
lib.aclCreateTensor.argtypes = [c.c_void_p, c.c_uint64, c.c_int, c.c_void_p, c.c_int64, c.c_int, c.c_void_p, c.c_uint64,
                                c.c_void_p]
lib.aclCreateScalar.argtypes = [c.c_void_p, c.c_int]
lib.aclDestroyTensor.argtypes = [c.c_void_p]
gws = lib.aclnnInplaceFillScalarGetWorkspaceSize
gws.argtypes = [c.c_void_p, c.c_void_p, c.POINTER(c.c_uint64), c.POINTER(c.c_void_p)]
run = lib.aclnnInplaceFillScalar
run.argtypes = [c.c_void_p, c.c_uint64, c.c_void_p, c.c_void_p]
lib.acl_host_report_json.restype = c.c_char_p
ACL_FLOAT, ACL_DOUBLE, ACL_COMPLEX64, ACL_FORMAT_ND, D2H = 0, 11, 16, 2, 2
def arr(*v):
    return (c.c_int64 * len(v))(*v)
def tensor(ptr, dims, strides, offset=0, storage=16, dtype=ACL_FLOAT):
    return lib.aclCreateTensor(arr(*dims), len(dims), dtype, arr(*strides), offset, ACL_FORMAT_ND, arr(storage), 1, ptr)
def scalar(v):
    return lib.aclCreateScalar(c.byref(c.c_double(v)), ACL_DOUBLE)
def prepare(t, s):
    size, ex = c.c_uint64(), c.c_void_p()
    return gws(t, s, c.byref(size), c.byref(ex)), size.value, ex
out = {}
lib.aclInit(None)
lib.aclrtSetDevice(0)
stream, dev, ws = c.c_void_p(), c.c_void_p(), c.c_void_p()
lib.aclrtCreateStream(c.byref(stream))
lib.aclrtMalloc(c.byref(dev), c.c_size_t(64), 0)  # 16 floats
lib.aclrtMalloc(c.byref(ws), c.c_size_t(32), 0)
t_all, one = tensor(dev, [16], [1]), scalar(1.0)
rc, out["size"], ex = prepare(t_all, one)
out["run"] = run(ws, out["size"], ex, stream)
out["run_again"] = run(ws, out["size"], ex, stream)  # the executor was consumed
t_odd, seven = tensor(dev, [4], [2], offset=8), scalar(7.0)  # every other element of the second half
out["small_workspace"] = run(ws, 16, prepare(t_odd, seven)[2], stream)
out["no_workspace"] = run(None, 32, prepare(t_odd, seven)[2], stream)
out["run_odd"] = run(ws, 32, prepare(t_odd, seven)[2], stream)
lib.aclrtSynchronizeStream(stream)
host = (c.c_float * 16)()
lib.aclrtMemcpy(host, c.c_size_t(64), dev, c.c_size_t(64), D2H)
out["values"] = list(host)
out["null"] = gws(None, one, c.byref(c.c_uint64()), c.byref(c.c_void_p()))
out["outside_storage"] = prepare(tensor(dev, [4], [6]), one)[0]
out["complex"] = prepare(tensor(dev, [2], [1], dtype=ACL_COMPLEX64), one)[0]
out["destroy"], out["destroy_again"] = lib.aclDestroyTensor(t_all), lib.aclDestroyTensor(t_all)
lib.aclrtFree(dev)  # a freed range: the first phase cannot know, the kernel's writes are checked
t_freed = tensor(dev, [16], [1])
out["run_freed"] = run(ws, 32, prepare(t_freed, one)[2], stream)
lib.aclrtSynchronizeStream(stream)
report = json.loads(lib.acl_host_report_json())
out["errors"] = [e["kind"] for e in report["errors"]]
out["ops"] = [[o["op"], o["elements"], o["workspace"] == ws.value, o["access_errors"]] for o in report["operators"]]
print(json.dumps(out))
"""


def test_the_op_api_answers_as_cann_describes(release):
    """Without torch: aclnnInplaceFillScalar's two phases (a workspace asked for and checked, the executor
    consumed, a strided view, the value converted), the descriptors, and the errors CANN documents
    (161001 for a null argument, 161002 for an invalid one); a fill into freed memory is reported."""
    lib = str(host_runtime.runtime_dir(release) / host_library.LIBRARY)
    proc = subprocess.run([sys.executable, "-c", _OPAPI, lib], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    assert got["size"] == 32 and got["run"] == got["run_odd"] == 0
    assert got["run_again"] == got["small_workspace"] == got["no_workspace"] == 161002
    assert got["values"] == [1.0] * 8 + [7.0, 1.0] * 4
    assert got["null"] == 161001 and got["outside_storage"] == 161002 and got["complex"] == 161002
    assert (got["destroy"], got["destroy_again"]) == (0, 161002)
    assert got["run_freed"] == 0 and got["errors"] == ["use-after-free"]
    assert got["ops"] == [["aclnnInplaceFillScalar", 16, True, 0], ["aclnnInplaceFillScalar", 4, True, 0],
                          ["aclnnInplaceFillScalar", 16, True, 1]]
    assert proc.stderr.count("acl_host: aclnnInplaceFillScalar on data type 16 is not implemented") == 1


# ---- the wheel, imported over the double ------------------------------------------------------------
_SCRIPT = host_runtime.CONTROL_SNIPPET + r"""
import os, struct, sys, threading, time
facts = {}
import torch, torch_npu
facts["imported"] = torch_npu.__file__
facts["is_available"] = bool(torch.npu.is_available())
facts["device_count"] = torch.npu.device_count()
torch.npu.set_device(0)
prop = torch.npu.get_device_properties(0)  # torch_npu's own query: aclGetDeviceCapability
facts["properties"] = [prop.name, prop.cube_core_num, prop.vector_core_num, prop.L2_cache_size]
t = torch.empty(1 << 20, device="npu")  # 4 MiB of float32
facts["allocated"] = torch.npu.memory_allocated()
facts["reserved"] = torch.npu.memory_reserved()
facts["in_use_after_alloc"] = acl_host_report()["counters"]["device_memory_in_use"]
src = torch.arange(1 << 20, dtype=torch.float32)
t.copy_(src.pin_memory(), non_blocking=True)  # a page-locked copy: torch_npu queues it
facts["round_trip"] = bool(torch.equal(t.cpu(), src))
torch.npu.synchronize()
report = acl_host_report()
facts["main_thread"] = threading.get_native_id()
facts["copy_threads"] = sorted(int(k) for k in report["calls"].get("aclrtMemcpyAsync", {}).get("threads", {}))
facts["align32_calls"] = report["calls"].get("aclrtMallocAlign32", {}).get("calls", 0)

# both launch calls, the probe reading torch_npu's memory
acl = _acl_host
lock = torch.empty(64, dtype=torch.uint8, device="npu")
acl.aclrtMemset(ctypes.c_void_p(lock.data_ptr()), ctypes.c_size_t(64), 0, ctypes.c_size_t(64))
ws = torch.empty(256, dtype=torch.uint8, device="npu")
binary = (b"ACL_HOST_PROBE_BINARY 1\n"
          b"kernel k_acl has_ffts=0 lock_bytes=64 workspace_bytes=256 own_args_bytes=8\n"
          b"kernel k_rt has_ffts=1 lock_bytes=64 workspace_bytes=256 own_args_bytes=8\n"
          b"kernel k_exec has_ffts=0 lock_bytes=64 workspace_bytes=256 own_args_bytes=8 execute=tok\n")
stream = ctypes.c_void_p(torch.npu.current_stream().npu_stream)
rc = {}
if hasattr(acl, "aclrtBinaryLoadFromData"):  # the cpp_wrapper_npu.py layout's loading (2.7.1.post8 on)
    bh, fh = ctypes.c_void_p(), ctypes.c_void_p()
    rc["load"] = acl.aclrtBinaryLoadFromData(binary, len(binary), None, ctypes.byref(bh))
    rc["get"] = acl.aclrtBinaryGetFunction(bh, b"k_acl", ctypes.byref(fh))
    rc["get_absent"] = acl.aclrtBinaryGetFunction(bh, b"nope", ctypes.byref(ctypes.c_void_p()))
    rc["load_not_a_probe"] = acl.aclrtBinaryLoadFromData(b"\x7fELF", 4, None, ctypes.byref(ctypes.c_void_p()))
    args = ctypes.create_string_buffer(struct.pack("<QQQiii", lock.data_ptr(), ws.data_ptr(), 0, 4, 1, 1), 36)
    rc["launch"] = acl.aclrtLaunchKernelWithHostArgs(fh, ctypes.c_uint32(4), stream, None, args,
                                                     ctypes.c_size_t(36), None, ctypes.c_size_t(0))
    # a kernel whose binary asks to be executed, with no executor attached: it does not run, and says so
    xh = ctypes.c_void_p()
    rc["get_exec"] = acl.aclrtBinaryGetFunction(bh, b"k_exec", ctypes.byref(xh))
    rc["launch_exec"] = acl.aclrtLaunchKernelWithHostArgs(xh, ctypes.c_uint32(4), stream, None, args,
                                                          ctypes.c_size_t(36), None, ctypes.c_size_t(0))
class DevBinary(ctypes.Structure):
    _fields_ = [("magic", ctypes.c_uint32), ("version", ctypes.c_uint32), ("data", ctypes.c_char_p),
                ("length", ctypes.c_uint64)]
rth = ctypes.c_void_p()
rc["rt_register"] = acl.rtDevBinaryRegister(ctypes.byref(DevBinary(0x43554245, 0, binary, len(binary))),
                                            ctypes.byref(rth))
stub = ctypes.c_size_t(0)
rc["rt_function"] = acl.rtFunctionRegister(rth, ctypes.byref(stub), b"k_rt_0", b"k_rt", 0)
ffts, ffts_len = ctypes.c_uint64(), ctypes.c_uint32()
rc["rt_ffts"] = acl.rtGetC2cCtrlAddr(ctypes.byref(ffts), ctypes.byref(ffts_len))
rt_args = ctypes.create_string_buffer(
    struct.pack("<QQQQiii", ffts.value, lock.data_ptr(), ws.data_ptr(), 0, 2, 1, 1), 44)
rc["rt_launch"] = acl.rtKernelLaunch(ctypes.byref(stub), ctypes.c_uint32(2), rt_args, ctypes.c_uint32(44), None,
                                     stream)
torch.npu.synchronize()
facts["rc"] = rc
facts["probes"] = acl_host_report()["probe_records"]
facts["executions"] = acl_host_report()["executions"]

# a freed range touched later: the segment goes back to the double with aclrtFree on empty_cache
freed = t.data_ptr()
del t, lock, ws
torch.npu.empty_cache()
facts["reserved_after_empty_cache"] = torch.npu.memory_reserved()
acl_host_reset()
facts["memset_freed_rc"] = acl.aclrtMemset(ctypes.c_void_p(freed), ctypes.c_size_t(16), 0, ctypes.c_size_t(16))
facts["freed_reports"] = [e for e in acl_host_report()["errors"] if e["kind"] == "use-after-free"]
facts["freed_ptr"] = freed

TASK_QUEUE = os.environ.get("TASK_QUEUE_ENABLE", "1")
def op_facts(report):
    keep = ("op", "captured_launch_id", "dtype", "elements", "workspace_size", "workspace_extent", "tid_phase1",
            "tid_phase2", "access_errors", "overlaps_with_running")
    return [{k: o[k] for k in keep} for o in report["operators"]]
def call_facts(report, names):
    return {n: report["calls"][n] for n in names if n in report["calls"]}

# torch.npu.graph on torch_npu's own code: a device-to-device copy and torch_npu's fill_ captured, replayed
# twice with new inputs in between (the replays must read them); torch_npu refuses TASK_QUEUE_ENABLE=2
graph = {}
try:
    x = torch.arange(1000, dtype=torch.float32).npu()
    y, z = torch.empty(1000, device="npu"), torch.empty(1000, device="npu")
    g = torch.npu.NPUGraph()
    torch.npu.synchronize()
    acl_host_reset()
    with torch.npu.graph(g):
        y.copy_(x)
        z.fill_(3.0)
    graph["captured_tasks"] = acl_host_report()["counters"]["captured_tasks"]
    replays = []
    for k in (1.0, -2.0):
        x.copy_(torch.arange(1000, dtype=torch.float32) * k)
        z.zero_()
        g.replay()
        torch.npu.synchronize()
        replays.append({"y": bool(torch.equal(y.cpu(), torch.arange(1000, dtype=torch.float32) * k)),
                        "z": bool(torch.equal(z.cpu(), torch.full((1000,), 3.0)))})
    graph["replays"] = replays
    del g
    report = acl_host_report()
    graph["calls"] = call_facts(report, ("aclmdlRICaptureBegin", "aclmdlRICaptureEnd", "aclmdlRIExecuteAsync",
                                         "aclmdlRIDestroy", "aclnnInplaceFillScalarGetWorkspaceSize"))
    graph["ops"] = op_facts(report)
    graph["errors"] = report["errors"]
    graph["missing"] = report["missing_calls"]
    del x, y, z
except RuntimeError as exc:
    graph["refused"] = str(exc).splitlines()[0]
    torch.npu.set_stream(torch.npu.default_stream())  # torch.npu.graph had entered its stream
facts["graph"] = graph

# torch_npu's own operator on op-plugin's V2 path (TASK_QUEUE_ENABLE=2): the whole of fill_ runs on the
# queue thread, and its workspace comes from torch_npu's workspace allocator there
if TASK_QUEUE == "2":
    w = torch.empty(4096, device="npu")
    torch.npu.synchronize()
    acl_host_reset()
    w.fill_(2.5)
    torch.npu.synchronize()
    report = acl_host_report()
    facts["v2"] = {"values": bool(torch.equal(w.cpu(), torch.full((4096,), 2.5))), "ops": op_facts(report),
                   "w": w.data_ptr(), "errors": report["errors"],
                   "calls": call_facts(report, ("aclnnInplaceFillScalarGetWorkspaceSize", "aclnnInplaceFillScalar",
                                                "aclrtMallocAlign32", "aclCreateTensor", "aclDestroyTensor"))}
    del w

# device 1
torch.npu.set_device(1)
u = torch.empty(1000, device="npu:1")
u.copy_(torch.ones(1000))
facts["device1"] = {"index": u.device.index, "sum": float(u.cpu().sum()),
                    "in_use": acl_host_report()["counters"]["device_memory_in_use"]}
torch.npu.synchronize()

# last (it breaks torch_npu's queue): torch.ones runs op-plugin's one_, whose aclnnInplaceOne the double
# does not provide, so op-plugin falls back to its aclop path, and that fails loudly
# With the task queue on, the failure goes to the first call that reaches the queue once its thread has set the
# failed status, which it sets after emptying the queue: a synchronize in between returns clean (docs/facts.md,
# torch_npu's task queue). So synchronise until one reports it; the bound is against a hang only.
acl_host_reset()
facts["ones"] = {"raised": None, "clean_syncs": 0}
try:
    torch.ones(8, device="npu")
    hang_bound = time.monotonic() + 120
    while time.monotonic() < hang_bound:
        torch.npu.synchronize()
        facts["ones"]["clean_syncs"] += 1
        time.sleep(0.01)
except RuntimeError as exc:
    facts["ones"]["raised"] = str(exc)
facts["ones"]["missing"] = acl_host_report()["missing_calls"]
send_report(facts)
"""


@functools.lru_cache(maxsize=None)
def _facts(release: str, task_queue: str) -> dict:
    proc = host_runtime.run_python(release, _SCRIPT, env_extra={"TASK_QUEUE_ENABLE": task_queue}, timeout=300)
    assert proc.returncode == 0 and len(proc.reports) == 1, f"exit {proc.returncode}\n{proc.stderr[-4000:]}"
    facts = proc.reports[0]
    facts["stderr"] = proc.stderr
    return facts


def _imported(release: str, task_queue: str) -> dict:
    try:
        host_runtime.python_for(release)
    except line_python.LineUnavailable as exc:
        pytest.skip(str(exc))
    return _facts(release, task_queue)


@pytest.mark.parametrize("release_, task_queue", RUNS)
def test_import_and_allocation_through_torch_npus_own_caching_allocator(release_, task_queue):
    release = _fetched(release_)
    f = _imported(release, task_queue)
    assert f["imported"].startswith(str(host_runtime.extracted_wheel(release)))
    assert f["is_available"] and f["device_count"] == 2
    # what torch_npu Inductor tiles by: CANN's platform table for Ascend910B1 (24 AI cores, 48 vector, 192 MiB L2),
    # not the uninitialised integers torch_npu kept when the double had no aclGetDeviceCapability
    assert f["properties"] == ["Ascend910B1", 24, 48, 192 * MIB]
    # torch_npu's rounding (32 bytes of padding, 512-byte blocks, a 20 MiB segment for a 4 MiB request),
    # and the segment is exactly what its allocator asked of the double
    assert f["allocated"] == 4 * MIB + 512
    assert f["reserved"] == 20 * MIB
    assert f["in_use_after_alloc"][0] == 20 * MIB and f["align32_calls"] == 1
    assert f["round_trip"]
    assert f["reserved_after_empty_cache"] == 0


@pytest.mark.parametrize("release_, task_queue", RUNS)
def test_torch_npus_task_queue_thread_runs_the_copy(release_, task_queue):
    f = _imported(_fetched(release_), task_queue)
    assert f["copy_threads"], "the page-locked copy did not reach aclrtMemcpyAsync"
    on_queue = [t for t in f["copy_threads"] if t != f["main_thread"]]
    if task_queue == "0":
        assert f["copy_threads"] == [f["main_thread"]]
    else:
        assert on_queue == f["copy_threads"], f


def test_a_freed_range_touched_later_is_reported(release):
    f = _imported(release, "1")
    assert f["memset_freed_rc"] != 0
    assert len(f["freed_reports"]) == 1
    assert "use after free" in f["freed_reports"][0]["message"]
    assert hex(f["freed_ptr"]) in f["freed_reports"][0]["message"]


def test_the_launch_calls_run_the_probe_on_torch_npus_memory(release, inventory):
    """The launch call of the wheel's own launchers (aclrtLaunchKernelWithHostArgs for cpp_wrapper_npu.py,
    rtKernelLaunch for the older cpp_wrapper.py; every wheel's headers declare the rt* calls)."""
    f = _imported(release, "1")
    rc = f["rc"]
    expected = {"k_rt"}
    assert rc["rt_register"] == rc["rt_function"] == rc["rt_ffts"] == rc["rt_launch"] == 0
    if "aclrtLaunchKernelWithHostArgs" in inventory["launcher_calls"]:
        expected |= {"k_acl", "k_exec"}
        assert rc["load"] == rc["get"] == rc["launch"] == rc["get_exec"] == rc["launch_exec"] == 0
        assert rc["get_absent"] != 0 and rc["load_not_a_probe"] != 0
        # the end-to-end tier's kernels ask to be executed: with no executor attached none runs, and the
        # library's record says why (the tier's tests require every execution ok)
        [run] = f["executions"]
        assert run["name"] == "k_exec" and not run["ok"] and "no executor is attached" in run["error"], run
        assert f["stderr"].count("acl_host: kernel 'k_exec' (launch ") == 1  # and says so once, on stderr
    else:
        assert "rtKernelLaunch" in inventory["launcher_calls"] and "load" not in rc
        assert f["executions"] == []
    probes = {p["name"]: p for p in f["probes"]}
    assert set(probes) == expected
    for name, blocks in (("k_acl", 4), ("k_rt", 2)):
        if name not in expected:
            continue
        p = probes[name]
        assert p["decoded"] and p["ffts_ok"] and p["block_dim"] == blocks and p["grid"] == [blocks, 1, 1]
        assert p["locks_readable"] and p["lock_slots_at_start"] == [0] * 8 and p["workspace_written"]
        assert not p["regions_overlap"] and p["access_errors"] == 0
        # the memory torch_npu's caching allocator took from the double (its 2 MiB small-pool segment)
        assert p["lock_extent"]["kind"] == "device-malloc" and p["lock_extent"]["size"] == 2 * MIB


def test_two_devices(release):
    f = _imported(release, "1")
    d1 = f["device1"]
    assert d1["index"] == 1 and d1["sum"] == 1000.0
    assert d1["in_use"][1] > 0


def test_torch_npu_graph_captures_and_replays_on_torch_npus_own_code(release):
    """``with torch.npu.graph(g)``: torch_npu's capture_begin fills its generator state with its own fill_
    (aclnnInplaceFillScalar, before aclmdlRICaptureBegin), the copy and the fill inside are captured, not run;
    each replay (aclmdlRIExecuteAsync) runs both again, reading the inputs of that moment."""
    g = _imported(release, "1")["graph"]
    assert "refused" not in g, g
    assert g["replays"] == [{"y": True, "z": True}] * 2
    assert g["captured_tasks"] == 2  # the device-to-device copy and the fill's kernel
    assert {n: c["calls"] for n, c in g["calls"].items() if n.startswith("aclmdlRI")} == {
        "aclmdlRICaptureBegin": 1, "aclmdlRICaptureEnd": 1, "aclmdlRIExecuteAsync": 2, "aclmdlRIDestroy": 1}
    assert not g["errors"] and not g["missing"], g
    fills = [o for o in g["ops"] if o["op"] == "aclnnInplaceFillScalar"]
    replayed = [o for o in fills if o["captured_launch_id"]]
    assert len(replayed) == 2 and len({o["captured_launch_id"] for o in replayed}) == 1
    assert all(o["elements"] == 1000 and o["workspace_size"] == 32 and not o["workspace_extent"]["freed"]
               and o["access_errors"] == 0 for o in replayed)
    if release.startswith("2.7.1"):  # capture_prologue: seed and offset, one int64 each (ACL_INT64 = 9)
        generator = [o for o in fills if not o["captured_launch_id"]]
        assert [(o["dtype"], o["elements"]) for o in generator] == [(9, 1), (9, 1)]
    zeros = [o for o in g["ops"] if o["op"] == "aclnnInplaceZero"]
    assert len(zeros) == 2 and not any(o["captured_launch_id"] for o in zeros)  # z.zero_() between replays


@pytest.mark.parametrize("release_", V2_RELEASES)
def test_torch_npu_refuses_graph_capture_with_task_queue_2(release_):
    g = _imported(_fetched(release_), "2")["graph"]
    assert "TASK_QUEUE_ENABLE = 2" in g["refused"], g  # NPUGraph::capture_begin's own check


@pytest.mark.parametrize("release_", V2_RELEASES)
def test_an_operator_takes_its_workspace_on_torch_npus_queue_thread(release_):
    """TASK_QUEUE_ENABLE=2: op-plugin's EXEC_NPU_CMD_V2 runs the whole of fill_ in the lambda it queues, so
    aclnnInplaceFillScalarGetWorkspaceSize, torch_npu's workspace allocator (its first block: one
    aclrtMallocAlign32 of 2 MiB) and the operator itself all run on torch_npu's queue thread, not the caller."""
    f = _imported(_fetched(release_), "2")
    v2 = f["v2"]
    assert v2["values"] and not v2["errors"]
    threads = {n: set(map(int, c["threads"])) for n, c in v2["calls"].items()}
    queue = threads["aclnnInplaceFillScalarGetWorkspaceSize"]
    assert len(queue) == 1 and f["main_thread"] not in queue
    for name in ("aclnnInplaceFillScalar", "aclrtMallocAlign32", "aclCreateTensor", "aclDestroyTensor"):
        assert threads[name] == queue, (name, threads)
    assert v2["calls"]["aclrtMallocAlign32"]["calls"] == 1  # the workspace allocator's block, nothing else
    (op,) = v2["ops"]
    assert op["tid_phase1"] == op["tid_phase2"] == next(iter(queue))
    ext = op["workspace_extent"]
    assert op["workspace_size"] == 32 and ext["kind"] == "device-malloc" and ext["size"] == 2 * MIB
    assert not ext["base"] <= v2["w"] < ext["base"] + ext["size"]  # not the tensor's caching-allocator segment
    assert op["access_errors"] == 0 and op["elements"] == 4096


@pytest.mark.parametrize("release_, task_queue", RUNS)
def test_an_operator_the_double_does_not_implement_fails_loudly(release_, task_queue):
    f = _imported(_fetched(release_), task_queue)
    ones = f["ones"]
    assert ones["raised"] and "OnesLike" in ones["raised"], ones
    assert ones["missing"].get("aclopCompileAndExecute") == 1, ones
    assert "acl_host: aclopCompileAndExecute is not implemented" in f["stderr"]


def test_missing_functions_called_by_torch_npu_are_logged_once(release):
    f = _imported(release, "1")
    lines = [x for x in f["stderr"].splitlines() if x.startswith("acl_host: ")]
    # the one other line the script causes: its k_exec kernel, launched with no executor, says it did not run
    lines = [x for x in lines if not x.startswith("acl_host: kernel 'k_exec' ")]
    assert lines and len(lines) == len(set(lines))
    for line in lines:
        assert "is not implemented by the host ACL library" in line


# ---- the command line -------------------------------------------------------------------------------
def _cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "torch_npu._inductor.patchset.tooling.releases.host_runtime", *args],
                          capture_output=True, text=True, timeout=600, env=env)


def test_cli_inventory(release):
    proc = _cli("inventory", release, "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert set(data) >= {"imports", "runtime_lookups", "implemented", "stated_noops", "missing"}


def test_subprocess_env_never_touches_this_process(release):
    before = dict(os.environ)
    env = host_runtime.subprocess_env(release, {"X_HOST_ACL": "1"})
    assert dict(os.environ) == before
    assert env["LD_LIBRARY_PATH"].split(os.pathsep)[0] == str(host_runtime.runtime_dir(release))
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(host_runtime.extracted_wheel(release))
    assert env["X_HOST_ACL"] == "1"
