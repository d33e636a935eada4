// HOST ACL LIBRARY control surface: a TEST DOUBLE of CANN's runtime libraries
// (libascendcl.so and the others a torch_npu wheel loads), for
// torch-npu-inductor-patches' tests and dry runs. It is loaded only into a test's
// subprocess, chosen with LD_LIBRARY_PATH (tooling/releases/host_runtime.py),
// never into a user's process. See README.md beside this file.
//
// Every function here is extern "C" so that a subprocess reaches it with ctypes:
//
//   lib = ctypes.CDLL("libascendcl.so")            # the same object torch_npu loaded
//   lib.acl_host_report_json.restype = ctypes.c_char_p
//   report = json.loads(lib.acl_host_report_json())
//
// acl_host_report_json() returns (valid until the next call on any thread):
//   {"library": "...", "devices": N,
//    "counters":      {<acl_sim::Counters field>: n, ...},
//    "errors":        [{"kind": "use-after-free", "message": "..."}, ...],   acl_sim's error reports
//    "probe_records": [{launch_id, name, device, block_dim, grid, lock_ptr, workspace_ptr, lock_bytes,
//                       workspace_bytes, lock_slots_at_start, regions_overlap, overlaps_with_running,
//                       locks_unchanged, workspace_written, access_errors, lock_extent, workspace_extent,
//                       lock_available, workspace_available, lock_overrun, workspace_overrun, ...}],
//    "calls":         {<ACL function>: {"calls": n, "failed": n, "threads": {<tid>: n}}},
//                     every call a loaded library made into this one (implemented, stated no-op and
//                     missing functions; internal calls of the double not counted); tid as gettid()
//    "missing_calls": {<function>: n}   functions this double does not implement (each logged once
//                     to stderr when first called; they returned an error code, nullptr, or nothing
//                     for a void function),
//    "noop_calls":    {<function>: n}   stated no-ops (see the build's stated no-op table),
//    "trace":         [[seq, tid, function, rc], ...]   the last ACL_HOST_TRACE calls (env, default 0),
//    "operators":     [{op, launch_id, captured_launch_id, device, stream, tid_phase1, tid_phase2,
//                       tid_kernel, dtype, elements, workspace, workspace_size, workspace_extent,
//                       access_errors, overlaps_with_running}]   one per op-api operator run on a
//                     stream (opapi.cpp; a replayed one names its captured launch),
//    "kernels":       [{"name", "binary", "has_ffts", "simt_only", "lock_bytes", "workspace_bytes",
//                       "own_args_bytes", "sim_time_us"}]}
//
// Kernel binaries. aclrtBinaryLoadFromFile / aclrtBinaryLoadFromData and rtDevBinaryRegister accept
// a text "binary" (anything else fails with ACL_ERROR_INVALID_FILE / an rt error), one kernel a line:
//
//   ACL_HOST_PROBE_BINARY 1
//   kernel <name> has_ffts=0|1 simt_only=0|1 lock_bytes=N workspace_bytes=N own_args_bytes=N sim_time_us=N
//
// Each kernel is acl_sim's probe (src/probe.cpp) with that configuration: aclrtBinaryGetFunction
// (binary, name) and rtFunctionRegister(binary, stub, stubName, devFunc = name, mode) find it;
// aclrtLaunchKernelWithHostArgs and rtKernelLaunch(stub, ...) run it on the stream's thread, once
// per block, and its record lands in "probe_records".
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The report above, as JSON (static storage; valid until the next call).
const char *acl_host_report_json(void);
// Back to a clean slate for the next measurement: counters, error reports, probe records, operator
// runs, call counts, the missing-call log (so a function logs again), the trace. Memory, streams,
// events, loaded binaries, kernels and live op-api descriptors stay (a real device keeps them too).
void acl_host_reset(void);
// Number of acl_sim error reports (use-after-free, out-of-bounds, ...) since the last reset.
int acl_host_error_count(void);
// Calls of functions this double does not implement since the last reset.
int acl_host_missing_count(void);

// Used by the generated entry points (not for tests): account one call of function `index` of the
// build's table (acl_host_function_names) by this thread, with its return code (0: success).
void acl_host_note_call(int index, long long rc);
// A function this double does not implement was called: logged once (stderr), counted.
void acl_host_note_missing(int index);

#ifdef __cplusplus
}
#endif
