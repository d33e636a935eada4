// HOST SIMULATION control interface (test double and dry-run tool for
// torch-npu-inductor-patches; not part of CANN or torch_npu).
//
// What the simulation models (the facts behind it: docs/facts.md):
//  * Devices (default 8, set_device_count): aclrtSetDevice/aclrtGetDevice
//    per thread; a thread that never set one is on device 0 (in the host
//    ACL library it has no context, as in CANN: launches, copies, fills,
//    records, waits, allocations, stream and event creation and
//    synchronisations fail with ACL_ERROR_RT_CONTEXT_NULL). Streams,
//    events, device memory and workspace blocks belong to a device. Enqueuing
//    on, waiting on or destroying a stream of another device than the
//    current one returns ACL_ERROR_RT_STREAM_CONTEXT; recording an event of
//    another device ACL_ERROR_RT_INVALID_HANDLE; a copy or memset touching
//    another device's memory, or a device pointer where host memory belongs
//    (and back), ACL_ERROR_RT_PARAM_INVALID; aclrtFree of a host buffer
//    ACL_ERROR_INVALID_PARAM. A kernel touching another device's memory is
//    reported (kCrossDevice).
//  * Streams: one worker thread each, tasks run in submission order.
//    A null stream means the current device's lazily created default stream.
//    At most 2038 per device, the default stream counted (set_stream_limit).
//  * Graph capture (aclmdlRICapture*): work enqueued on a capturing stream is
//    recorded, not run; aclmdlRIExecuteAsync replays it on a stream of the
//    same device. A captured page-locked copy re-reads its host source AT
//    REPLAY (freed by then: kStalePinnedSource + counters().stale_replay_sources).
//    An event recorded on a capturing stream, a synchronise of a capturing
//    stream, a device synchronise (also the workspace allocator growing) or,
//    in GLOBAL mode, a synchronous aclrtMemcpy on its device while a stream
//    captures, and a pageable aclrtMemcpyAsync into the capture, invalidate
//    the capture (the call returns ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT,
//    kCaptureInvalidated is reported, GetInfo says INVALIDATED, later work on
//    it returns ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED and End fails with
//    that code). The error codes are the real ones; which call returns which
//    is the simulation's choice where CANN's documentation is silent.
//  * torch_npu's task queue: OpCommand::RunOpApiV2, see
//    torch_npu/csrc/framework/OpCommand.h (stand-in) and op_tasks() below.
//    (The torch_npu stand-ins, src/torch_npu_standins.cpp, are in the
//    simulation only, never in the host ACL library; ../../README.md lists
//    who uses them. What they define here is marked "stand-ins".)
//  * aclAppLog: every message recorded (app_logs()), nothing printed.
//  * Device memory (aclrtMalloc / the workspace allocator): lives in an arena
//    whose device addresses are mapped PROT_NONE, so host code that
//    dereferences a device pointer crashes. The simulation reaches the bytes
//    through a second mapping. Every allocation is tracked (addresses are
//    never reused), poisoned when freed, and has a per-byte "initialised"
//    shadow. Every access by a copy, memset or simulated kernel is checked for
//    bounds, use-after-free and (reads) uninitialised bytes.
//  * aclrtMallocHost/aclrtFreeHost: page-locked registry. aclrtMemcpyAsync
//    from page-locked memory is queued; when it runs it checks that the source
//    is still a live page-locked buffer ("stale pinned source" otherwise).
//    From pageable memory it completes before returning (host blocking).
//  * aclrtMemcpy: synchronous, and copies at once, as CANN's runtime does
//    (hicann/runtime api_impl.cc:2745-2774: through the driver, no stream
//    waited for): a kernel queued before it that still runs sees the bytes
//    change under it.
//  * Events: a record is a task on its stream (as CANN's); the event is
//    reached only once the stream's worker ran it, even on an idle stream.
//    The first aclrtQueryEventStatus of a record answers NOT_READY, whatever
//    the worker did meanwhile, unless a host synchronisation (of the event,
//    its stream or its device) covered it; a later query answers whether the
//    stream reached it; the synchronisations wait for it (never recorded:
//    COMPLETE for an aclrtCreateEventExWithFlag event, NOT_READY for the
//    others, as CANN answers). The moment the worker reached it is the record's stamp:
//    aclrtEventElapsedTime gives the milliseconds between two stamps, never
//    waiting, once each record is known complete (a later query, or a
//    synchronisation); never recorded: ACL_ERROR_RT_INTERNAL_ERROR, not known
//    complete: ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID (CANN's codes), the end's
//    stamp before the start's: ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL (CANN
//    gives a negative time). Event kinds and their ids: set_event_id_limit.
//  * at_npu::native::allocate_workspace (the workspace allocator's only
//    exported entry point): see the stand-in NPUWorkspaceAllocator.h. The
//    simulation remembers every request's extent, so the probe kernel can
//    report the allocation each pointer lies in (allocation_extent()).
//  * torch_npu's streams: per device a default stream and pools of streams
//    of the double, per thread and device the current one (the stand-in
//    NPUStream.h).
//  * torch_npu's caching allocator (allocate, raw_alloc_with_stream,
//    raw_delete, recordStream, hasCapturesUnderway, name, exported through its
//    allocator pointer; the free-memory callbacks): see the stand-in
//    NPUCachingAllocator.h and "torch_npu's allocators" below: one lock per
//    device, stream-keyed reuse, a block with recorded uses free only behind
//    events of its own, the callbacks at a cache miss, graph pools (freed at
//    aclmdlRIDestroy), empty_cache of free blocks only, a settable device
//    memory capacity and the out-of-memory retry, which synchronises the
//    device (draining the task queue: from a queue thread a self-wait).
//  * Global-mode capture (torch.npu.graph's default, graphs.py v2.7.1:607):
//    aclrtQueryEventStatus (torch_npu: "npuEventQueries, illegal during NPU
//    graph capture", NPUCachingAllocator.cpp v2.7.1:1199-1210) and
//    aclrtMallocHost / aclrtFreeHost (no torch_npu source; CANN's
//    documentation is silent, modelled on the rule for CUDA's implicitly
//    synchronising calls, i.e. never kinder) while any stream of the current
//    device (the event's device) captures in GLOBAL mode invalidate that
//    capture and return ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT.
//  * aclrtLaunchKernelWithHostArgs: copies the argument bytes at call time,
//    then runs the registered host function once per block on the stream.
//  * Fault injection, counters, error reports and a probe kernel (below).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "acl/acl_rt.h"

namespace acl_sim {

// ---- counters -------------------------------------------------------------
struct Counters {
  uint64_t allocator_requests = 0;   // allocate_workspace calls
  uint64_t allocator_growths = 0;    // of which grew the stream block
  uint64_t sync_copies = 0;          // aclrtMemcpy
  uint64_t async_copies = 0;         // aclrtMemcpyAsync (any source)
  uint64_t pageable_async_copies = 0;// aclrtMemcpyAsync from pageable memory
  uint64_t memsets = 0;              // aclrtMemsetAsync
  uint64_t launches = 0;             // aclrtLaunchKernelWithHostArgs
  uint64_t host_blocking = 0;        // sync copies, stream/device syncs, allocator growth, pageable async copies
  uint64_t pinned_allocs = 0;        // aclrtMallocHost
  uint64_t pinned_frees = 0;         // aclrtFreeHost
  uint64_t device_allocs = 0;        // aclrtMalloc + allocator blocks
  uint64_t device_frees = 0;
  uint64_t events_created = 0;
  uint64_t events_recorded = 0;
  uint64_t event_queries = 0;
  uint64_t errors = 0;               // error reports recorded
  uint64_t captured_tasks = 0;       // copies, memsets, launches recorded into a capture
  uint64_t replays = 0;              // aclmdlRIExecuteAsync calls that enqueued a model
  uint64_t stale_replay_sources = 0; // replayed copies whose page-locked host source was gone
  uint64_t captures_invalidated = 0;
  uint64_t app_logs = 0;             // aclAppLog messages
  // live objects (not reset by reset_counters/reset)
  uint64_t live_device_allocs = 0;   // aclrtMalloc'd, excluding allocator blocks
  uint64_t live_workspace_tensors = 0;  // at::Tensor from allocate_workspace still referenced
  uint64_t live_pinned = 0;
  uint64_t live_events = 0;
  uint64_t live_models = 0;          // captured models not destroyed
  uint64_t caching_requests = 0;     // caching allocator requests, allocate and raw_alloc_with_stream (reset)
  uint64_t live_caching_allocations = 0;  // handed out by the caching allocator and not freed (live: not reset)
  // Device synchronisations: npuSynchronizeDevice (npu_synchronize_device(),
  // the out-of-memory retry, empty_cache), aclrtSynchronizeDevice and the
  // workspace allocator's growth. Each is also a host-blocking call.
  uint64_t device_synchronizations = 0;
  uint64_t caching_frees = 0;                   // caching allocator frees (raw_delete, a DataPtr's deleter)
  uint64_t caching_allocs_on_queue_threads = 0; // caching allocator requests made by a task-queue thread
  uint64_t caching_frees_on_queue_threads = 0;  // caching allocator frees made by a task-queue thread
  uint64_t caching_oom_retries = 0;             // out-of-memory retries (sync, free cached blocks, retry)
  // Most caching-allocator blocks held at once (raw_alloc'd, not yet
  // raw_delete'd) since the last reset_counters() (which starts it at the
  // number held then).
  uint64_t peak_live_caching_allocations = 0;
};
Counters counters();
void reset_counters();

// ---- error reports ----------------------------------------------------------
enum class ErrorKind {
  kOutOfBounds,
  kUseAfterFree,
  kUninitialisedRead,
  kStalePinnedSource,
  kRegionOverlapInKernel,      // lock and workspace regions of one kernel overlap
  kOverlapWithRunningKernel,   // regions overlap another running kernel's, or a copy wrote into them
  kLocksChangedWhileRunning,
  kBadArguments,               // probe could not decode its arguments / expectations not met
  kCrossDevice,                // a kernel, copy or memset touched memory of another device
  kCaptureInvalidated,         // something invalidated an active graph capture
  kRegionOverrun,              // a kernel's promised region runs past the allocation it lies in
  kAllocatorRace,              // two threads inside the workspace allocator's unguarded pointer map at once
  kSelfWait,                   // a task-queue thread waited for its own queue to drain (a hang on a real NPU)
};
const char *error_kind_name(ErrorKind k);
struct ErrorReport {
  ErrorKind kind;
  std::string message;
};
std::vector<ErrorReport> errors();
size_t error_count(ErrorKind k);
void clear_errors();

// ---- configuration ---------------------------------------------------------
// Offset added to every device allocation's base (default 0: bases are
// 512-byte aligned). Lets tests check that carving does not rely on it.
void set_device_base_offset(size_t bytes);

// Fault injection: the nth call (1-based, counted from now) of `api` fails
// with `code`. `api` is an ACL function name, "allocate_workspace" or
// "raw_alloc_with_stream" (the caching allocator's requests: allocate too);
// for an allocator, the code makes it throw
// OutOfMemoryError (a std::runtime_error, as torch_npu's allocators throw on
// failure) with torch_npu's text and the code.
void inject_fault(const char *api, uint64_t nth, aclError code);
// Test hook: the nth call (1-based, counted from now, by any thread) of `api`
// (a name inject_fault takes) first runs `fn` on the calling thread, before
// the call does anything (allocate_workspace: once inside the pointer map).
void on_call(const char *api, uint64_t nth, std::function<void()> fn);
void clear_faults();  // and hooks
// Pause points (tests): the calling thread's next call of one of `functions` (ACL function names, comma-
// separated) stops until release_pause(id): before it does anything (`after` false: the names fault() counts),
// or once it has done its work, as it returns (`after` true: the host ACL library's entry points). Any thread
// can be preempted anywhere; a pause only chooses where, to open a window by construction instead of by chance.
// `limit_ms` only bounds a hang: past it the thread goes on by itself. Returns the pause's id (> 0).
uint64_t arm_pause(const char *functions, bool after, uint32_t limit_ms);
// True once pause `id`'s thread has stopped there (still stopped, or released since), waiting up to `wait_ms`.
bool pause_reached(uint64_t id, uint32_t wait_ms);
// Lets pause `id` go (0: every pause, also those armed and not reached); how many were armed or stopped.
int release_pause(uint64_t id);
// Where a pause stops: called by the ACL functions with their own name (cheap when the thread armed none).
void pause_point(const char *function, bool after);
struct OutOfMemoryError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A device's event ids (CANN's limit on events that another stream can wait
// for: 65535 per device on the A2 training products, its aclrtCreateEvent
// page). aclrtCreateEvent's event takes a new id at each record and gives the
// previous one back once that record is reached; a waitable
// aclrtCreateEventWithFlag event takes one at creation; a waitable
// aclrtCreateEventExWithFlag event one per record, back once reached; a
// destroyed event's ids go back once its records are reached. A record (or
// such a creation) that finds none left fails with
// ACL_ERROR_RT_NO_EVENT_RESOURCE at once (CANN retries, reclaiming finished
// tasks, and then gives up). `n` lowers the limit for a test (0: back to
// 65535; reset() does so too).
void set_event_id_limit(int device, uint32_t n);
uint32_t event_ids_in_use(int device);

// Streams per device: CANN's runtime gives the 910B 2038 (its default stream
// among them); the creation past it fails with ACL_ERROR_RT_NO_STREAM_RESOURCE.
// `n` lowers the limit for a test (0: back to 2038; reset() does so too).
void set_stream_limit(int device, uint32_t n);

// Number of simulated devices (1..16, default 8). Shrinking it does not
// delete streams of the devices dropped.
void set_device_count(int n);
int device_count();

// ---- aclAppLog ---------------------------------------------------------------
struct AppLog {
  aclLogLevel level;
  std::string func, file;
  uint32_t line;
  std::string message;  // formatted
};
std::vector<AppLog> app_logs();
void clear_app_logs();

// ---- torch_npu task queue (OpCommand::RunOpApiV2; stand-ins) ----------------
// Default: on unless TASK_QUEUE_ENABLE=0 or ASCEND_LAUNCH_BLOCKING=1 (read once).
void set_task_queue_enabled(bool on);
struct OpTask {
  uint64_t seq = 0;                // 1-based, per process, in call order
  std::string op;                  // op_name passed to RunOpApiV2
  int device = 0;                  // caller's current device
  bool queued = false;             // went through the queue (else ran on the caller's thread)
  bool ran = false;                // func was called
  bool dropped = false;            // a poisoned queue dropped it (queued earlier, or refused at enqueue)
  bool threw_at_call = false;      // RunOpApiV2 threw to its caller for it (poisoned queue / queue-off failure)
  int rc = 0;                      // func's return code (ACL_ERROR_INVALID_PARAM when an exception escaped)
  bool exception_escaped = false;  // an exception left func
  std::string exception_what;
  uint64_t run_ns = 0;             // host time inside func on the queue thread (queued tasks)
};
std::vector<OpTask> op_tasks();
void clear_op_tasks();
// Waits until every queue thread has run or dropped all it was given (does not
// throw; torch_npu's synchronize would throw for a poisoned queue).
void drain_task_queues();
// Test control: while paused, queue threads take no new task (queued ones
// wait; RunOpApiV2 still queues). Unpausing lets them run in order.
void set_task_queues_paused(bool paused);

// ---- torch_npu's allocators (stand-ins; set_device_memory_capacity and ---------------
// ---- device_memory_in_use are the core's) ---------------------------------------------
// Caching allocator (the stand-in NPUCachingAllocator.h; torch_npu
// NPUCachingAllocator.cpp v2.7.1):
//  * one lock per device (DeviceCachingAllocator::mutex :984, taken by malloc
//    :1192 and free :1498); the device is the CALLING thread's current one
//    (allocate :3640-3664, for its current stream; raw_alloc_with_stream
//    :3754-3758, for the stream it names);
//  * a freed block goes back to its pool keyed by stream: only a later request
//    of the same device, pool and stream gets it again (get_free_block :2567);
//    a block freed with uses recorded on streams (recordStream) first gets an
//    event on each of them (through the task queue when it is on) and goes
//    back once each completed, seen at a later request (process_events, not
//    while a capture is underway on the device: :1199-1211) or waited for by
//    the retry and empty_cache; while a capture is underway the events wait
//    until none is (:1520-1528);
//  * a stream that captures (ACTIVE) is served from its graph's private pool
//    (get_pool :2500-2516); the pool is freed at aclmdlRIDestroy (see the stand-in);
//  * no block found: the registered free-memory callbacks run (under the
//    device lock, on the requesting thread) and the pool is searched again
//    (:1252-1256);
//  * no block found and none can be allocated within the device's capacity:
//    unless a capture is underway on the device (:1279), the out-of-memory
//    retry runs without the device lock (:1286-1291): npuSynchronizeDevice
//    (below), the workspace allocator's empty_cache (every workspace block,
//    :1292), every outstanding event synchronised and its block freed, the
//    device's free cached blocks freed (:1293, release_cached_blocks
//    :2832-2850), then one more attempt; failing that it throws
//    OutOfMemoryError with torch_npu's text ("NPU out of memory. Tried to
//    allocate ..." :1338-1347).
// Blocks are not split or rounded up to 2 / 20 MiB segments (torch_npu does,
// :2130-2142, :2539-2548): a request takes round_up(n, 512) bytes.
//
// Device memory capacity of `device` in bytes (0: unlimited, the default).
// Every device allocation counts: aclrtMalloc, workspace blocks, caching
// allocator blocks. aclrtMalloc beyond it returns ACL_ERROR_RT_MEMORY_ALLOCATION, the
// workspace allocator throws OutOfMemoryError, the caching allocator retries
// as above.
void set_device_memory_capacity(int device, uint64_t bytes);
uint64_t device_memory_in_use(int device);  // live device allocations of `device`, in bytes
// The caching allocator's blocks of `device`, as torch_npu's DeviceStats counts them (StatType::AGGREGATE):
// allocated (allocation.current) and active (active.current: allocated, or freed and still waiting for the event
// of a stream that used it, or lost by a failed record).
struct CachingBlocks {
  uint64_t allocated = 0;
  uint64_t active = 0;
};
CachingBlocks caching_blocks(int device);

// c10_npu::npuSynchronizeDevice (NPUStream.cpp v2.7.1:641-668): with the task
// queue on, MakeSureQueueEmpty on every device's queue (emptyAllNPUStream
// :548-562; NPUQueue.cpp :243-299 waits until the queue thread has run all
// it was given), then aclrtSynchronizeDevice on the current device (which
// fails inside a capture: the capture is invalidated and this throws).
// Called FROM a task-queue thread, MakeSureQueueEmpty waits for that very
// thread: a hang on a real NPU. The simulation reports it (kSelfWait) and
// goes on without waiting for its own queue. A paused queue (below) is not
// waited for either.
void npu_synchronize_device();

// torch.npu.empty_cache() (NPUCachingAllocator.cpp v2.7.1:3382-3410): per
// device, DeviceCachingAllocator::emptyCache (:1661-1672):
// npuSynchronizeDevice, then under the device lock the workspace allocator's
// empty_cache (NPUWorkspaceAllocator.cpp :226-240 frees EVERY workspace
// block, whether or not a tensor still points into it; :453-457 clears the
// unguarded pointer map), then the caching allocator's outstanding events
// synchronised and their blocks freed, then its free cached blocks
// (release_cached_blocks :2832-2850; blocks handed out and live graphs'
// pools stay).
void empty_cache();

// ---- graph capture ------------------------------------------------------------
// Ids of the probe-visible launches a replay produced are found through
// KernelCall::captured_launch_id / ProbeRecord::captured_launch_id.
uint64_t model_task_count(aclmdlRI model);

// ---- allocation bookkeeping -----------------------------------------------------
enum class ExtentKind { kNone, kDeviceMalloc, kWorkspaceRequest };
struct Extent {
  ExtentKind kind = ExtentKind::kNone;
  uintptr_t base = 0;        // start of the allocation the pointer lies in
  uint64_t size = 0;         // its size (for the workspace allocator: the request's size, not the block's)
  int device = -1;
  uintptr_t block_base = 0;  // workspace allocator block (kWorkspaceRequest), else = base
  uint64_t block_size = 0;
  bool freed = false;        // the device allocation (or block) was freed
  uint64_t request_seq = 0;  // kWorkspaceRequest: which allocate_workspace call
};
const char *extent_kind_name(ExtentKind k);
// The allocation `p` lies in. For a workspace block: the latest request on
// that block made no later than `request_seq` (0 = the latest of all).
bool allocation_extent(const void *p, Extent *out, uint64_t request_seq = 0);
// Counters, errors, faults, hooks, probe records, device
// capacities and the queues' pause back to defaults. Streams, memory and
// allocator blocks are kept.
void reset();

// ---- kernels -----------------------------------------------------------------
struct KernelCall {
  const void *args;          // copy of the host argument bytes
  size_t args_size;
  uint32_t block_dim;
  uint32_t block_idx;
  uint64_t launch_id;
  aclrtStream stream;
  void *user;
  int device = 0;                   // the stream's device
  uint64_t request_seq = 0;         // last allocate_workspace request when the launch was issued
  uint64_t captured_launch_id = 0;  // replay of a captured launch: that launch's id (else 0)
};
using KernelFn = void (*)(const KernelCall &call);
aclrtFuncHandle register_kernel(const char *name, KernelFn fn, void *user);
// Id of the last launch issued by the calling thread (0 if none). A launch
// recorded into a capture has an id too; its replays run as new launches
// whose KernelCall::captured_launch_id is that id.
uint64_t last_launch_id();
// Id of the latest launch issued by any thread, replays included (0 if none).
uint64_t latest_launch_id();

// Checked device memory access for simulated kernels. Return false (and
// record an error report) when the access is out of bounds, after free, of
// another device's memory (inside a kernel) or, for reads, of uninitialised
// bytes; the data is not touched then.
bool device_read(const void *dev, void *dst, size_t n, const char *who);
bool device_write(void *dev, const void *src, size_t n, const char *who);
// The address aclrtGetHardwareSyncAddr hands out.
void *hardware_sync_addr();

// ---- probe kernel ------------------------------------------------------------
// Argument struct it decodes: [ffts_addr void*] (has_ffts), then (unless
// simt_only) sync_block_lock void*, workspace_addr void*, then own_args_bytes
// of the kernel's own arguments, then grid_0..2 as int32.
struct ProbeRecord;
struct ProbeConfig {
  std::string name = "probe";
  bool has_ffts = false;
  bool simt_only = false;
  uint64_t lock_bytes = 0;        // expected lock bytes: read at start, checked at end
  bool locks_used = false;        // then left used (every slot's bits inverted), as a kernel leaves its sync counters
  uint64_t workspace_bytes = 0;   // expected workspace bytes: written with a pattern
  uint64_t workspace_per_program = 0;  // and this many more per program of the launch's grid (its args)
  uint32_t sim_time_us = 0;       // simulated run time
  size_t own_args_bytes = 0;
  // Optional: runs once per launch on the stream's thread, after the probe's start checks (its regions held,
  // the workspace pattern written) and before its end checks: a host library's kernel executor.
  void (*execute)(const KernelCall &call, const ProbeRecord &record, void *ctx) = nullptr;
  void *execute_ctx = nullptr;
};
struct ProbeRecord {
  uint64_t launch_id = 0;
  uint64_t captured_launch_id = 0;    // replay of a captured launch: its id
  int device = 0;
  std::string name;
  aclrtStream stream = nullptr;
  uint32_t block_dim = 0;
  int32_t grid[3] = {0, 0, 0};
  bool decoded = false;
  bool ffts_ok = true;
  uintptr_t lock_ptr = 0, workspace_ptr = 0;
  uint64_t lock_bytes = 0, workspace_bytes = 0;
  std::vector<int64_t> lock_slots_at_start;  // full content (empty if unreadable)
  std::vector<int64_t> distinct_lock_values; // sorted
  bool locks_readable = true;
  bool regions_overlap = false;       // lock vs workspace
  int overlaps_with_running = 0;      // other running kernels' regions
  bool locks_unchanged = true;
  bool workspace_written = true;
  int access_errors = 0;
  // What the kernel actually got (from the simulation's allocation
  // bookkeeping, not from the expectations): the allocation each pointer lies
  // in, how many bytes from the pointer to the end of that allocation or to
  // the start of the other region inside it, whichever is first, and how far
  // the promised region (lock_bytes / workspace_bytes) runs past the end of
  // that allocation (the probe writes its full promised workspace region).
  Extent lock_extent, workspace_extent;
  uint64_t lock_available = 0, workspace_available = 0;
  uint64_t lock_overrun = 0, workspace_overrun = 0;
};
aclrtFuncHandle register_probe_kernel(const ProbeConfig &cfg);
std::vector<ProbeRecord> probe_records();
bool probe_record(uint64_t launch_id, ProbeRecord *out);

}  // namespace acl_sim

