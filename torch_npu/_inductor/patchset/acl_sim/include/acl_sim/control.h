// HOST SIMULATION control interface (test double and dry-run tool for
// torch-npu-inductor-patches; not part of CANN or torch_npu).
//
// What the simulation models (see DOMAIN.md sections 4 and 5):
//  * Streams: one worker thread each, tasks run in submission order.
//    A null stream means a lazily created default stream.
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
//  * aclrtMemcpy: synchronous; model kWaits drains all streams first, model
//    kImmediate copies at once even while kernels run.
//  * Events: record captures the stream's queue position; query reports
//    COMPLETE once the stream ran past it (never-recorded: COMPLETE).
//  * c10_npu::NPUWorkspaceAllocator::malloc_with_stream: DOMAIN.md section 4.
//  * aclrtLaunchKernelWithHostArgs: copies the argument bytes at call time,
//    then runs the registered host function once per block on the stream.
//  * Fault injection, counters, error reports and a probe kernel (below).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include <string>
#include <vector>

#include "acl/acl_rt.h"

namespace acl_sim {

// ---- counters -------------------------------------------------------------
struct Counters {
  uint64_t allocator_requests = 0;   // malloc_with_stream calls
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
  // live objects (not reset by reset_counters/reset)
  uint64_t live_device_allocs = 0;   // aclrtMalloc'd, excluding allocator blocks
  uint64_t live_allocator_blocks = 0;
  uint64_t live_workspace_dataptrs = 0;
  uint64_t live_pinned = 0;
  uint64_t live_events = 0;
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
enum class MemcpyModel { kWaits, kImmediate };
void set_memcpy_model(MemcpyModel m);
// Offset added to every device allocation's base (default 0: bases are
// 512-byte aligned). Lets tests check that carving does not rely on it.
void set_device_base_offset(size_t bytes);

// Fault injection: the nth call (1-based, counted from now) of `api` fails
// with `code`. `api` is an ACL function name or "malloc_with_stream". For the
// allocator, code kAllocReturnsNull makes it return an empty DataPtr; any other
// code makes it throw std::runtime_error.
constexpr aclError kAllocReturnsNull = -1;
void inject_fault(const char *api, uint64_t nth, aclError code);
void clear_faults();

// Counters, errors, faults, probe records and memcpy model back to defaults.
// Streams, memory and allocator blocks are kept.
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
};
using KernelFn = void (*)(const KernelCall &call);
aclrtFuncHandle register_kernel(const char *name, KernelFn fn, void *user);
// Id of the last launch issued by the calling thread (0 if none).
uint64_t last_launch_id();

// Checked device memory access for simulated kernels. Return false (and
// record an error report) when the access is out of bounds, after free or,
// for reads, of uninitialised bytes; the data is not touched then.
bool device_read(const void *dev, void *dst, size_t n, const char *who);
bool device_write(void *dev, const void *src, size_t n, const char *who);
// The address aclrtGetHardwareSyncAddr hands out.
void *hardware_sync_addr();

// ---- probe kernel ------------------------------------------------------------
// Argument struct it decodes: [ffts_addr void*] (has_ffts), then (unless
// simt_only) sync_block_lock void*, workspace_addr void*, then own_args_bytes
// of the kernel's own arguments, then grid_0..2 as int32.
struct ProbeConfig {
  std::string name = "probe";
  bool has_ffts = false;
  bool simt_only = false;
  uint64_t lock_bytes = 0;        // expected lock bytes: read at start, checked at end
  uint64_t workspace_bytes = 0;   // expected workspace bytes: written with a pattern
  uint32_t sim_time_us = 0;       // simulated run time
  size_t own_args_bytes = 0;
};
struct ProbeRecord {
  uint64_t launch_id = 0;
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
};
aclrtFuncHandle register_probe_kernel(const ProbeConfig &cfg);
std::vector<ProbeRecord> probe_records();
bool probe_record(uint64_t launch_id, ProbeRecord *out);

// ---- host heap allocation counting (optional) -----------------------------------
// A test binary that wants to count heap allocations places
// ACL_SIM_DEFINE_COUNTING_OPERATOR_NEW() at namespace scope in one .cpp. Then
// allocations made by the calling thread between heap_count_begin() and
// heap_count_end() are counted, excluding those made inside simulation APIs.
void heap_count_begin();
uint64_t heap_count_end();
namespace detail {
void note_heap_alloc() noexcept;
}
}  // namespace acl_sim

#define ACL_SIM_DEFINE_COUNTING_OPERATOR_NEW()                                               \
  void *operator new(size_t n) {                                                           \
    ::acl_sim::detail::note_heap_alloc();                                                  \
    void *p = ::malloc(n ? n : 1);                                                         \
    if (!p) throw std::bad_alloc();                                                        \
    return p;                                                                              \
  }                                                                                        \
  void *operator new[](size_t n) { return ::operator new(n); }                             \
  void operator delete(void *p) noexcept { ::free(p); }                                    \
  void operator delete[](void *p) noexcept { ::free(p); }                                  \
  void operator delete(void *p, size_t) noexcept { ::free(p); }                            \
  void operator delete[](void *p, size_t) noexcept { ::free(p); }
