// HOST SIMULATION internals (test double and dry-run tool for
// torch-npu-inductor-patches; not CANN). Shared between the sim's sources:
// the ACL core (acl_runtime.cpp, probe.cpp) defines all of it; the torch_npu
// stand-ins (torch_npu_standins.cpp, simulation builds only) and the host
// library (../host/) use it.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "acl_sim/control.h"

namespace acl_sim {
namespace internal {

void report(ErrorKind kind, const std::string &message);

// Running-kernel registry: regions a simulated kernel holds while it runs.
// Returns how many overlaps with other running launches were found (each reported).
int hold_region(uint64_t launch_id, const std::string &kernel, aclrtStream stream, uintptr_t lo, uint64_t n,
                const char *what);
void release_regions(uint64_t launch_id);

void probe_reset();

// Host library hooks (acl_sim/host/): stream-ordered wait for an event's last record (a task on
// `stream`), a host wait for it, whether a stream ran all it was given, a stream's device (-1: no
// such stream), the calling thread's device (-1: never set).
aclError stream_wait_event(aclrtStream stream, aclrtEvent event);
aclError synchronize_event(aclrtEvent event);
// aclrtCreateEventWithFlag (`ex` false) and aclrtCreateEventExWithFlag (`ex` true): the flag checked as CANN does.
aclError create_event(aclrtEvent *event, uint32_t flag, bool ex);
// aclrtCreateStream(WithConfig): `flags` are the ACL stream flags, checked by the caller (PERSISTENT and
// DEVICE_USE_ONLY: synchronisations and queries return at once, the host's work on it is refused as not modelled).
aclError create_stream(aclrtStream *stream, uint32_t flags);
// aclrtDestroyStream (`force` false: waits for the stream's work) and aclrtDestroyStreamForce (drops what has not
// started; acl_runtime.cpp says what becomes of the events recorded by dropped tasks).
aclError destroy_stream(aclrtStream stream, bool force);
// The stream's / the current device's synchronisation with a timeout in ms (-1: none); the caller checks it.
aclError synchronize_stream(aclrtStream stream, int32_t timeout_ms);
aclError synchronize_device(int32_t timeout_ms);
aclError stream_idle(aclrtStream stream, bool *idle);
int stream_device(aclrtStream stream);
int thread_device();
// A captured model's id (also while it is being captured); false for an unknown handle.
bool model_id(aclmdlRI model, uint64_t *id);

// ---- what the torch_npu stand-ins take from the core ------------------------------
// Counters: sharded per thread (acl_runtime.cpp says how); shard() is the calling thread's.
// clang-format off
#define ACL_SIM_RESET_COUNTERS(X)                                                                       \
  X(allocator_requests) X(allocator_growths) X(sync_copies) X(async_copies) X(pageable_async_copies)   \
  X(memsets) X(launches) X(host_blocking) X(pinned_allocs) X(pinned_frees) X(device_allocs)            \
  X(device_frees) X(events_created) X(events_recorded) X(event_queries) X(errors) X(captured_tasks) X(replays)  \
  X(stale_replay_sources) X(captures_invalidated) X(app_logs) X(caching_requests)                               \
  X(device_synchronizations) X(caching_frees) X(caching_allocs_on_queue_threads) X(caching_frees_on_queue_threads) \
  X(caching_oom_retries)
#define ACL_SIM_LIVE_COUNTERS(X) \
  X(live_device_allocs) X(live_workspace_tensors) X(live_pinned) X(live_events) X(live_models) X(live_caching_allocations)
// clang-format on
struct ShardCounter {
  std::atomic<uint64_t> v{0};
  void operator++(int) noexcept { v.store(v.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  void operator--(int) noexcept { v.store(v.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed); }
  uint64_t get() const noexcept { return v.load(std::memory_order_relaxed); }
};
struct AtomicCounters {
#define ACL_SIM_FIELD(n) ShardCounter n;
  ACL_SIM_RESET_COUNTERS(ACL_SIM_FIELD)
  ACL_SIM_LIVE_COUNTERS(ACL_SIM_FIELD)
#undef ACL_SIM_FIELD
};
AtomicCounters &shard();
// The caching allocator's blocks held now, for Counters::peak_live_caching_allocations.
void caching_block_held();
void caching_block_returned();

// Fault injection: one entry per name inject_fault() takes. The last two are the stand-ins' allocators.
enum Api {
  kApiMalloc, kApiFree, kApiMallocHost, kApiFreeHost, kApiMemcpy, kApiMemcpyAsync, kApiMemsetAsync,
  kApiCreateStream, kApiDestroyStream, kApiSynchronizeStream, kApiSynchronizeDevice, kApiCreateEvent,
  kApiDestroyEvent, kApiRecordEvent, kApiQueryEventStatus, kApiEventElapsedTime, kApiGetHardwareSyncAddr,
  kApiLaunch, kApiSetDevice, kApiGetDevice, kApiCaptureBegin, kApiCaptureGetInfo, kApiCaptureEnd,
  kApiExecuteAsync, kApiRIDestroy, kApiAllocator, kApiCachingAlloc, kApiCount
};
// The injected code of this call (0: none); a hook armed for it runs first, or is handed to `deferred`.
aclError fault(Api a, std::function<void()> *deferred = nullptr);

// Devices: the calling thread's current one (never set: 0), and setting it (a task-queue thread).
constexpr int kMaxDevices = 16;
int current_device();
void set_thread_device(int device);

// Device memory. `block`: a block the workspace allocator carves requests from (note_workspace_request
// records each request, for allocation_extent()). 0 / false: the device is full / not such a live allocation.
uintptr_t device_alloc(size_t size, bool block, int device);
bool device_free(uintptr_t p, bool block);
void note_workspace_request(uintptr_t block, uint64_t size);
// Capacity (the arena's size when unlimited) and live bytes of `device`, read together.
void device_memory(int device, uint64_t *total, uint64_t *in_use);

// Streams. resolve_stream: the stream object behind a handle (nullptr: the current device's default
// stream), nullptr for an unknown or destroyed handle; the object is never freed, so it keys maps.
aclrtStream resolve_stream(aclrtStream handle);
aclmdlRICaptureStatus stream_capture_status(aclrtStream resolved);
// The id of the model an ACTIVE capture on the stream records into (0: none).
uint64_t active_capture_id(aclrtStream resolved);
bool invalidate_device_captures(int device, const char *why, bool global_only);
void wait_device_streams(int device);
bool captures_underway(int device);       // a stream of `device` has a capture (any status)
std::vector<int> devices_with_streams();  // devices with a live stream, ascending

// The stand-ins' part of reset() (run first), and of a captured model's end (aclmdlRIDestroy, or a failed
// aclmdlRICaptureEnd: its id names the caching allocator's graph pool). Registered once, before use.
void set_standin_hooks(void (*on_reset)(), void (*on_model_released)(int device, uint64_t id));

}  // namespace internal
}  // namespace acl_sim
