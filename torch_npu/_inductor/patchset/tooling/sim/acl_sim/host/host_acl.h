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
//                     stream (opapi.cpp; a replayed one names its captured launch); aclnnMm and aclnnMatmul
//                     add m, k, n, batch (out is batch x m x n; dtype and elements are out's) and cube_math_type,
//    "kernels":       [{"name", "binary", "has_ffts", "simt_only", "lock_bytes", "workspace_bytes",
//                       "own_args_bytes", "sim_time_us", "execute"}],
//    "executions":    [{launch_id, name, ok, error, reads, read_bytes, writes, written_bytes, access_errors,
//                       seconds}]   one per launch of a kernel whose binary says execute=<token> (below)}
//
// Kernel binaries. aclrtBinaryLoadFromFile / aclrtBinaryLoadFromData and rtDevBinaryRegister accept
// a text "binary" (anything else fails with ACL_ERROR_INVALID_FILE / an rt error), one kernel a line:
//
//   ACL_HOST_PROBE_BINARY 1
//   kernel <name> has_ffts=0|1 simt_only=0|1 lock_bytes=N workspace_bytes=N own_args_bytes=N sim_time_us=N
//          [workspace_per_program=N]   (then the workspace promised is workspace_bytes + N x the grid it got)
//          [locks_used=0|1]   (1: the kernel leaves its lock slots used, as real sync counters are left)
//          [execute=<token>]  (the kernel is also run, by the executor acl_host_set_executor attached; see there)
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

// For the helper's C++ unit tests, which run in the same process (test/cpp/real_support.h): what the
// report holds, per item, without serialising all of it, and the simulation's settings a test changes.
// The kernel launch the calling thread made last (its probe record's launch_id; 0: none).
uint64_t acl_host_last_launch_id(void);
// Launch `launch_id`'s probe record, as one object of the report's "probe_records"; NULL when the probe has
// none (yet). Thread-local storage, valid until this thread's next call.
const char *acl_host_probe_record_json(uint64_t launch_id);
// The report's "counters" object (thread-local storage, valid until this thread's next call).
const char *acl_host_counters_json(void);
// Error reports of one kind ("use-after-free", "bad-arguments", ...: the report's "kind") since the last reset.
int acl_host_error_count_of(const char *kind);
// aclAppLog message `index` (0-based, in call order) since the last reset, and its level; NULL past the end.
// Thread-local storage, valid until this thread's next call.
const char *acl_host_app_log(int index, int *level);
// Fault injection: the nth call (1-based, counted from now, any thread) of ACL function `function` fails
// with `code` (it does nothing else); -1 for a function acl_sim cannot fail on purpose (the list: kApiNames in
// ../src/acl_runtime.cpp; aclrtMalloc is also the caching allocator's aclrtMallocAlign32). Cleared by acl_host_reset.
int acl_host_inject_fault(const char *function, uint64_t nth, int code);
// Offset added to every later device allocation's base (default 0: bases 512-byte aligned); lets a test check
// that carving a block does not rely on its base's alignment. Back to 0 at acl_host_reset.
void acl_host_set_device_base_offset(uint64_t bytes);
// Device memory of `device` in bytes (0: back to ACL_HOST_DEVICE_GIB); allocations beyond it fail with
// ACL_ERROR_RT_MEMORY_ALLOCATION (207001). The report's counters give what is in use ("device_memory_in_use").
void acl_host_set_device_memory(int device, uint64_t bytes);
// Event ids of `device` (acl_sim/control.h, set_event_id_limit): lowers the limit (0: back to 65535; also at
// acl_host_reset), and how many are in use now.
void acl_host_set_event_id_limit(int device, uint32_t n);
uint32_t acl_host_event_ids_in_use(int device);

// Stream holds: for a test that needs work on a stream not to have finished when it looks (a kernel still pending,
// an event behind it not complete) by construction rather than by a kernel's run time. acl_host_stream_hold queues
// on `stream` a kernel of the double's own (no probe record, no region; counted in the counters' launches and as the
// calling thread's last launch) that waits on the stream's thread until acl_host_stream_release(id); work queued
// after it waits behind it. `limit_ms` only bounds a hang (a test that fails before releasing): past it the hold
// lets go by itself. Returns the hold's id (> 0), 0 when it could not be queued (the launch's rules: the calling
// thread's device, no capture). Released by acl_host_reset too.
uint64_t acl_host_stream_hold(void *stream, uint32_t limit_ms);
// Lets hold `id` go (0: every hold); 1 (for 0: how many) if it was still held, 0 if it had let go by its limit.
int acl_host_stream_release(uint64_t id);

// Pause points (acl_sim/control.h): the calling thread's next call of one of `functions` (comma-separated ACL
// names) stops before it does anything (`after` 0; the ACL core's functions) or as it returns, its work done
// (`after` 1; any function of this library), until acl_host_pause_release(id); `limit_ms` only bounds a hang.
// For a window between two threads' calls made by construction, not by chance.
uint64_t acl_host_pause_arm(const char *functions, int after, uint32_t limit_ms);
// 1 once pause `id`'s thread stopped there (waits up to `wait_ms`), else 0.
int acl_host_pause_reached(uint64_t id, uint32_t wait_ms);
// Lets pause `id` go (0: every one); how many were armed or stopped. Released by acl_host_reset too.
int acl_host_pause_release(uint64_t id);

// The kernel executor (the end-to-end tier's stand-in for the NPU running kernel.o): a kernel whose binary line
// says execute=<token> is run at each launch, on the stream's thread, after the probe's start checks (its
// regions held) and before its end checks. The library writes to `request_fd`: u32 length + "token name
// launch_id grid0 grid1 grid2", u32 length + the kernel's own argument bytes (after the lock and workspace
// pointers), and reads from `reply_fd`: u32 status (0: ran), u32 length + message, u32 count + (u64 address,
// u64 bytes) of each device range the kernel read, u32 count + (u64 address, u64 bytes, the bytes) of each range
// it wrote. It then reads every range read and writes every range written, checked as copies are (a bad access is
// an error report). A launch of such a kernel with no executor attached, or whose executor failed, is an
// execution with ok false (and a line on stderr). -1, -1 detaches it. 0, or -1 for one fd without the other.
int acl_host_set_executor(int request_fd, int reply_fd);

// Used by the generated entry points (not for tests): account one call of function `index` of the
// build's table (acl_host_function_names) by this thread, with its return code (0: success).
void acl_host_note_call(int index, long long rc);
// A function this double does not implement was called: logged once (stderr), counted.
void acl_host_note_missing(int index);

#ifdef __cplusplus
}
#endif
