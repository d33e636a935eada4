// HOST SIMULATION stand-ins of torch_npu (test double and dry-run tool for
// torch-npu-inductor-patches; not torch_npu): its task queue
// (OpCommand::RunOpApiV2), its caching allocator as its exported pointer reaches
// it, its workspace allocator's allocate_workspace, npuSynchronizeDevice and
// empty_cache, over the ACL core (acl_runtime.cpp, through internal.h). Built
// into the simulation (libacl_sim.a) only, never into the host ACL library,
// where torch_npu's own code runs instead; ../README.md lists who still uses
// them and when each can go. Semantics: include/acl_sim/control.h.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "acl/acl.h"
#include "acl_sim/caching_allocator.h"
#include "acl_sim/control.h"
#include "internal.h"
#include "torch_npu/csrc/core/npu/NPUWorkspaceAllocator.h"
#include "torch_npu/csrc/framework/OpCommand.h"

namespace acl_sim {
namespace {
using namespace internal;  // the core: counters, faults, devices, memory, streams

inline AtomicCounters &C() { return shard(); }
inline int cur_device() { return current_device(); }
// Set on torch_npu's task-queue threads: the device whose queue this thread runs.
thread_local int t_queue_device = -1;

// ---------------------------------------------------------------- workspace blocks
// torch_npu's workspace allocator: a stream's block in each device's allocator
// (torch_npu keys blocks by the CURRENT device, then the stream). Keyed by the
// core's stream object, which is never freed.
struct WsBlock {
  uintptr_t base = 0;
  size_t size = 0;
};
struct WsStream {
  std::mutex mu;
  WsBlock ws[kMaxDevices];
};
std::mutex g_ws_mu;
std::map<aclrtStream, WsStream *> &ws_streams() {
  static auto *m = new std::map<aclrtStream, WsStream *>();
  return *m;
}
WsStream &ws_of(aclrtStream resolved) {
  std::lock_guard<std::mutex> g(g_ws_mu);
  WsStream *&w = ws_streams()[resolved];
  if (w == nullptr) w = new WsStream();
  return *w;
}

// ---------------------------------------------------------------- workspace allocator's outer map
// torch_npu's NpuWorkspaceAllocator keeps `allocated_ptrs` (a flat hash map)
// with no lock of its own (NPUWorkspaceAllocator.cpp v2.7.1:549-567): malloc
// rewrites it (:449), every tensor release reads it (free, :530-539) and
// empty_cache clears it (:453-457), from whichever thread allocates or frees.
// Two threads inside at once are a data race on that map: reported.
std::atomic<int> g_outer_inside{0};
struct OuterMapEntry {
  explicit OuterMapEntry(const char *what) {
    if (g_outer_inside.fetch_add(1, std::memory_order_acq_rel) != 0) {
      internal::report(ErrorKind::kAllocatorRace,
                       std::string(what) +
                           ": entered the workspace allocator's unguarded pointer map while another thread was in it "
                           "(torch_npu NPUWorkspaceAllocator.cpp: allocated_ptrs has no lock)");
    }
  }
  ~OuterMapEntry() { g_outer_inside.fetch_sub(1, std::memory_order_acq_rel); }
  OuterMapEntry(const OuterMapEntry &) = delete;
  OuterMapEntry &operator=(const OuterMapEntry &) = delete;
};

// ---------------------------------------------------------------- caching allocator
// The subset of torch_npu's NPUCachingAllocator a launch can reach through
// its exported allocator pointer (see the stand-in NPUCachingAllocator.h and
// control.h for the contract and its sources). Pool 0 is the ordinary pool;
// pool N is the private pool of the capture whose model id is N.
struct CaBlock {
  uintptr_t base = 0;
  size_t size = 0;
  aclrtStream stream = nullptr;
  uint64_t pool = 0;
  bool held = false;  // handed out, not yet raw_delete'd
};
// DeviceCachingAllocator: its own lock (NPUCachingAllocator.cpp v2.7.1:984).
struct CaDevice {
  std::recursive_mutex mu;
  std::map<uintptr_t, CaBlock> blocks;  // this device's blocks, held or cached
  std::set<uint64_t> dead_pools;        // pools whose graph is gone: blocks freed when returned
  uint64_t held_bytes = 0;              // "already allocated"
};
CaDevice g_ca[kMaxDevices];
// The allocator's pointer -> block map, with its own lock (get_allocated_block :3262).
std::mutex g_ca_ptr_mu;
std::unordered_map<uintptr_t, int> &ca_ptr_device() {
  static auto *m = new std::unordered_map<uintptr_t, int>();
  return *m;
}
// Requires d.mu. Frees the device's cached blocks of the ordinary pool and of
// dead graph pools (release_cached_blocks :2832-2840); returns the bytes freed.
uint64_t ca_release_cached_locked(CaDevice &d) {
  uint64_t freed = 0;
  for (auto it = d.blocks.begin(); it != d.blocks.end();) {
    const CaBlock &b = it->second;
    if (!b.held && (b.pool == 0 || d.dead_pools.count(b.pool))) {
      device_free(b.base, false);
      {
        std::lock_guard<std::mutex> g(g_ca_ptr_mu);
        ca_ptr_device().erase(b.base);
      }
      freed += b.size;
      it = d.blocks.erase(it);
    } else {
      ++it;
    }
  }
  return freed;
}

// Frees a destroyed (or failed) capture's pool: returned blocks now, held ones when returned
// (the core calls it at aclmdlRIDestroy and at a failed aclmdlRICaptureEnd: set_standin_hooks).
void release_graph_pool(int device, uint64_t pool) {
  CaDevice &d = g_ca[device];
  std::lock_guard<std::recursive_mutex> g(d.mu);
  d.dead_pools.insert(pool);
  for (auto it = d.blocks.begin(); it != d.blocks.end();) {
    if (it->second.pool == pool && !it->second.held) {
      device_free(it->first, false);
      {
        std::lock_guard<std::mutex> pg(g_ca_ptr_mu);
        ca_ptr_device().erase(it->first);
      }
      it = d.blocks.erase(it);
    } else {
      ++it;
    }
  }
}

std::string format_size(uint64_t size) {  // torch_npu's (NPUCachingAllocator.cpp v2.7.1:40-58)
  char b[64];
  if (size <= 1024) {
    std::snprintf(b, sizeof b, "%llu bytes", static_cast<unsigned long long>(size));
  } else if (size <= 1048576) {
    std::snprintf(b, sizeof b, "%.2f KiB", size / 1024.0);
  } else if (size <= 1073741824ULL) {
    std::snprintf(b, sizeof b, "%.2f MiB", size / 1048576.0);
  } else {
    std::snprintf(b, sizeof b, "%.2f GiB", size / 1073741824.0);
  }
  return b;
}

// ---------------------------------------------------------------- torch_npu task queue
std::atomic<int> g_queue_enabled{-1};  // -1: from the environment at first use
bool queue_on() {
  int v = g_queue_enabled.load(std::memory_order_relaxed);
  if (v < 0) {
    const char *q = std::getenv("TASK_QUEUE_ENABLE");
    const char *b = std::getenv("ASCEND_LAUNCH_BLOCKING");
    v = (q != nullptr && std::strcmp(q, "0") == 0) || (b != nullptr && std::strcmp(b, "1") == 0) ? 0 : 1;
    g_queue_enabled.store(v, std::memory_order_relaxed);
  }
  return v != 0;
}
std::mutex g_op_mu;  // records
std::vector<OpTask> &op_records() {
  static auto *v = new std::vector<OpTask>();
  return *v;
}
uint64_t g_op_seq = 0;  // under g_op_mu
uint64_t new_op_record(const std::string &op, int device, bool queued) {
  std::lock_guard<std::mutex> g(g_op_mu);
  OpTask r;
  r.seq = ++g_op_seq;
  r.op = op;
  r.device = device;
  r.queued = queued;
  op_records().push_back(std::move(r));
  return op_records().back().seq;
}
template <class F>
void update_op_record(uint64_t seq, F &&f) {
  std::lock_guard<std::mutex> g(g_op_mu);
  for (auto it = op_records().rbegin(); it != op_records().rend(); ++it)
    if (it->seq == seq) {
      f(*it);
      return;
    }
}

// NPUQueue's states: running, failed (the next RunOpApiV2 throws), then dropping silently.
enum class QueueStatus { kRun, kErrorExit, kCanExit };
struct QueueEntry {
  uint64_t seq;
  std::string op;
  std::function<int()> fn;
};
struct OpQueue {
  int device = 0;
  std::mutex mu;
  std::condition_variable cv, idle_cv;
  std::deque<QueueEntry> q;
  bool busy = false;
  QueueStatus status = QueueStatus::kRun;
  std::string repo_error;
  std::thread th;
};
std::mutex g_queues_mu;
OpQueue *g_queues[kMaxDevices];
std::atomic<bool> g_queues_paused{false};  // test control

// Runs func the way torch_npu's queue thread does: an escaping std::exception
// becomes ACL_ERROR_INVALID_PARAM. Records the outcome.
int run_op(uint64_t seq, const std::function<int()> &fn) {
  int rc = ACL_ERROR_INVALID_PARAM;
  bool threw = false;
  std::string what;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    rc = fn();
  } catch (const std::exception &e) {
    threw = true;
    what = e.what();
  } catch (...) {  // torch_npu catches std::exception only; anything else would end the process
    threw = true;
    what = "(not a std::exception)";
  }
  const uint64_t ns = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
  if (threw) rc = ACL_ERROR_INVALID_PARAM;
  update_op_record(seq, [&](OpTask &r) {
    r.run_ns = ns;
    r.ran = true;
    r.rc = rc;
    r.exception_escaped = threw;
    r.exception_what = what;
  });
  return rc;
}

void queue_worker(OpQueue *q) {
  set_thread_device(q->device);  // torch_npu sets the device on its queue thread
  t_queue_device = q->device;
  std::unique_lock<std::mutex> l(q->mu);
  for (;;) {
    q->cv.wait(l, [&] { return !q->q.empty() && !g_queues_paused.load(); });
    QueueEntry e = std::move(q->q.front());
    q->q.pop_front();
    q->busy = true;
    l.unlock();
    const int rc = run_op(e.seq, e.fn);
    l.lock();
    q->busy = false;
    if (rc != 0) {
      // NPUQueue: remember the failing op, drop every task still queued, error state.
      q->repo_error = "the current working operator name is " + e.op;
      q->status = QueueStatus::kErrorExit;
      while (!q->q.empty()) {
        const uint64_t seq = q->q.front().seq;
        q->q.pop_front();
        update_op_record(seq, [](OpTask &r) { r.dropped = true; });
      }
    }
    if (q->q.empty()) q->idle_cv.notify_all();
  }
}

// The device's queue if one was made, else nullptr (never makes one).
OpQueue *existing_queue(int device) {
  std::lock_guard<std::mutex> g(g_queues_mu);
  return g_queues[device];
}

OpQueue *queue_of(int device) {
  std::lock_guard<std::mutex> g(g_queues_mu);
  if (g_queues[device] == nullptr) {
    auto *q = new OpQueue();
    q->device = device;
    q->th = std::thread(queue_worker, q);
    q->th.detach();  // lives as long as the process
    g_queues[device] = q;
  }
  return g_queues[device];
}

std::string poisoned_message(const std::string &repo_error) {
  return "The Inner error is reported as above. The process exits for this inner error, and " + repo_error +
         ".\n(acl_sim: torch_npu's task queue is in its error state; no further NPU work runs in this process.)";
}

// c10_npu::npuSynchronizeDevice on `device` (control.h). `who`: the caller, for the self-wait report.
void npu_sync_device(int device, const char *who) {
  C().device_synchronizations++;
  C().host_blocking++;
  if (queue_on()) {  // emptyAllNPUStream: MakeSureQueueEmpty of every device's queue
    for (int d = 0; d < kMaxDevices; ++d) {
      OpQueue *q = existing_queue(d);
      if (q == nullptr) continue;
      if (d == t_queue_device) {
        char buf[400];
        std::snprintf(buf, sizeof buf,
                      "%s called npuSynchronizeDevice on torch_npu's task-queue thread of device %d: its "
                      "MakeSureQueueEmpty waits for this very thread to drain the queue (NPUStream.cpp v2.7.1:644-645, "
                      "NPUQueue.cpp :270-298), which never returns on an NPU",
                      who, d);
        internal::report(ErrorKind::kSelfWait, buf);
        continue;
      }
      std::unique_lock<std::mutex> l(q->mu);
      q->idle_cv.wait(l, [&] { return (q->q.empty() && !q->busy) || g_queues_paused.load(); });
    }
  }
  if (invalidate_device_captures(device, "npuSynchronizeDevice (aclrtSynchronizeDevice) while a stream of the device captures",
                                 false))
    throw std::runtime_error(std::string("acl_sim: ") + who + ": aclrtSynchronizeDevice failed with error " +
                             std::to_string(ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT) + " (a stream of device " +
                             std::to_string(device) + " is capturing)");
  wait_device_streams(device);
}

// The workspace allocator's empty_cache for `device` (NPUWorkspaceAllocator.cpp v2.7.1:226-240, :453-457):
// every block of the device is freed, whether or not a tensor still points into it; the map is cleared.
void ws_free_all_blocks(int device, const char *who) {
  OuterMapEntry outer(who);
  std::vector<WsStream *> all;
  {
    std::lock_guard<std::mutex> g(g_ws_mu);
    for (auto &kv : ws_streams()) all.push_back(kv.second);
  }
  for (WsStream *st : all) {
    std::lock_guard<std::mutex> l(st->mu);
    WsBlock &b = st->ws[device];
    if (b.base != 0) device_free(b.base, true);
    b = WsBlock();
  }
}

// Requires d.mu. torch_npu's out-of-memory text (NPUCachingAllocator.cpp v2.7.1:1338-1347).
std::string oom_text(int device, uint64_t alloc_size) {
  CaDevice &d = g_ca[device];
  uint64_t reserved = 0;
  for (const auto &kv : d.blocks) reserved += kv.second.size;
  uint64_t total, in_use;
  device_memory(device, &total, &in_use);
  return "NPU out of memory. Tried to allocate " + format_size(alloc_size) + " (NPU " + std::to_string(device) + "; " +
         format_size(total) + " total capacity; " + format_size(d.held_bytes) + " already allocated; " +
         format_size(d.held_bytes) + " current active; " + format_size(total > in_use ? total - in_use : 0) +
         " free; " + format_size(reserved) +
         " reserved in total by PyTorch).If reserved memory is >> allocated memory try setting max_split_size_mb to "
         "avoid fragmentation.";
}

// Requires d.mu. A new block within the device's capacity (0 when it is full).
uintptr_t ca_new_block_locked(CaDevice &d, int device, size_t size, aclrtStream stream, uint64_t pool) {
  const uintptr_t p = device_alloc(size, false, device);
  if (p == 0) return 0;
  CaBlock b;
  b.base = p;
  b.size = size;
  b.stream = stream;
  b.pool = pool;
  d.blocks[p] = b;
  std::lock_guard<std::mutex> g(g_ca_ptr_mu);
  ca_ptr_device()[p] = device;
  return p;
}
}  // namespace

// ================================================================ control API (torch_npu's part)
void set_task_queue_enabled(bool on) { g_queue_enabled = on ? 1 : 0; }
std::vector<OpTask> op_tasks() {
  std::lock_guard<std::mutex> g(g_op_mu);
  return op_records();
}
void clear_op_tasks() {
  std::lock_guard<std::mutex> g(g_op_mu);
  op_records().clear();
}
void drain_task_queues() {
  for (int d = 0; d < kMaxDevices; ++d) {
    OpQueue *q = existing_queue(d);
    if (q == nullptr) continue;
    std::unique_lock<std::mutex> l(q->mu);
    q->idle_cv.wait(l, [&] { return q->q.empty() && !q->busy; });
  }
}
void set_task_queues_paused(bool paused) {
  g_queues_paused.store(paused);
  if (paused) return;
  std::lock_guard<std::mutex> g(g_queues_mu);
  for (OpQueue *q : g_queues) {
    if (q == nullptr) continue;
    std::lock_guard<std::mutex> l(q->mu);
    q->cv.notify_all();
  }
}

void empty_cache() {
  // emptyCacheImpl: every used device (NPUCachingAllocator.cpp v2.7.1:3382-3404).
  for (int dev : devices_with_streams()) {
    // DeviceCachingAllocator::emptyCache: npuSynchronizeDevice first (:1669; throws in capture), then under the
    // device lock the workspace allocator's empty_cache and the free cached blocks.
    npu_sync_device(dev, "torch.npu.empty_cache()");
    CaDevice &d = g_ca[dev];
    std::lock_guard<std::recursive_mutex> g(d.mu);
    ws_free_all_blocks(dev, "empty_cache");
    ca_release_cached_locked(d);
  }
}

void npu_synchronize_device() {
  npu_sync_device(cur_device(), "npu_synchronize_device()");
}

namespace detail {
void *caching_raw_alloc_with_stream(size_t nbytes, aclrtStream stream) {
  if (nbytes == 0) return nullptr;  // NPUCachingAllocator.cpp v2.7.1:3754-3758
  C().caching_requests++;
  if (t_queue_device >= 0) C().caching_allocs_on_queue_threads++;
  const int dev = cur_device();  // the calling thread's device (:3756)
  CaDevice &d = g_ca[dev];
  const size_t size = (nbytes + 511) / 512 * 512;  // kMinBlockSize rounding (round_size :2130-2142)
  if (aclError e = fault(kApiCachingAlloc)) {
    std::lock_guard<std::recursive_mutex> g(d.mu);
    throw OutOfMemoryError(oom_text(dev, size) + " (acl_sim: injected fault, code " + std::to_string(e) + ")");
  }
  aclrtStream s = resolve_stream(stream);
  if (s == nullptr) throw std::runtime_error("acl_sim: raw_alloc_with_stream on an invalid stream");
  const uint64_t pool = active_capture_id(s);  // get_pool: the capture's private pool when its filter accepts the stream
  std::unique_lock<std::recursive_mutex> lock(d.mu);  // malloc's device lock (:1192)
  auto take_cached = [&]() -> uintptr_t {              // get_free_block: same pool, same stream (:2555-2567)
    CaBlock *best = nullptr;
    for (auto &kv : d.blocks) {
      CaBlock &b = kv.second;
      if (!b.held && b.pool == pool && b.stream == stream && b.size >= size && (best == nullptr || b.size < best->size))
        best = &b;
    }
    if (best == nullptr) return 0;
    best->held = true;
    return best->base;
  };
  uintptr_t p = take_cached();
  if (p == 0) {
    p = ca_new_block_locked(d, dev, size, stream, pool);
    if (p != 0) d.blocks[p].held = true;
  }
  if (p == 0 && !captures_underway(dev)) {
    // The out-of-memory retry (:1279-1293): without the device lock, npuSynchronizeDevice, then the workspace
    // allocator's empty_cache and the free cached blocks, then one more attempt.
    C().caching_oom_retries++;
    lock.unlock();
    npu_sync_device(dev, "the caching allocator's out-of-memory retry (NPUCachingAllocator.cpp v2.7.1:1279-1293)");
    ws_free_all_blocks(dev, "the caching allocator's out-of-memory retry (workspace empty_cache)");
    lock.lock();
    ca_release_cached_locked(d);
    p = take_cached();
    if (p == 0) {
      p = ca_new_block_locked(d, dev, size, stream, pool);
      if (p != 0) d.blocks[p].held = true;
    }
  }
  if (p == 0) throw OutOfMemoryError(oom_text(dev, size));
  d.held_bytes += d.blocks[p].size;
  C().live_caching_allocations++;
  caching_block_held();
  return reinterpret_cast<void *>(p);
}
void caching_raw_delete(void *ptr) {
  if (ptr == nullptr) return;
  C().caching_frees++;
  if (t_queue_device >= 0) C().caching_frees_on_queue_threads++;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  int dev = -1;
  {
    std::lock_guard<std::mutex> g(g_ca_ptr_mu);
    auto it = ca_ptr_device().find(p);
    if (it != ca_ptr_device().end()) dev = it->second;
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "invalid device pointer: %p (acl_sim: raw_delete of a pointer the caching allocator "
                "did not hand out, or twice)", ptr);  // torch_npu: AT_ERROR (:3262-3265)
  if (dev < 0) throw std::runtime_error(buf);
  CaDevice &d = g_ca[dev];
  std::lock_guard<std::recursive_mutex> g(d.mu);  // free's device lock (:1498)
  auto it = d.blocks.find(p);
  if (it == d.blocks.end() || !it->second.held) throw std::runtime_error(buf);
  it->second.held = false;
  d.held_bytes -= it->second.size;
  C().live_caching_allocations--;
  caching_block_returned();
  if (it->second.pool != 0 && d.dead_pools.count(it->second.pool)) {  // its graph is gone
    d.blocks.erase(it);
    {
      std::lock_guard<std::mutex> pg(g_ca_ptr_mu);
      ca_ptr_device().erase(p);
    }
    device_free(p, false);
  }
}
bool caching_has_captures_underway(int device) {
  return device >= 0 && device < kMaxDevices && captures_underway(device);
}
}  // namespace detail

// What reset() and the end of a captured model do to the stand-ins (the core calls these).
namespace {
void standins_reset() {
  set_task_queues_paused(false);
  clear_op_tasks();
}
struct RegisterHooks {
  RegisterHooks() { set_standin_hooks(standins_reset, release_graph_pool); }
} g_register_hooks;
}  // namespace

}  // namespace acl_sim

// ================================================================ torch_npu's exported functions
using namespace acl_sim;

namespace acl_sim {
namespace detail {
struct TensorImpl {
  std::atomic<int64_t> refs{1};
  void *data = nullptr;
};
struct TensorAccess {
  static at::Tensor make(TensorImpl *impl) {
    at::Tensor t;
    t.impl_ = impl;
    return t;
  }
};
void tensor_retain(TensorImpl *impl) noexcept { impl->refs.fetch_add(1, std::memory_order_relaxed); }
void tensor_release(TensorImpl *impl) noexcept {
  if (impl->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  OuterMapEntry outer("at::Tensor release (workspace allocator free)");
  C().live_workspace_tensors--;  // statistics only: the memory stays with the stream
  delete impl;
}
void *tensor_data(const TensorImpl *impl) noexcept { return impl->data; }
}  // namespace detail
}  // namespace acl_sim

namespace {
at::Tensor workspace_tensor(void *data) {
  auto *impl = new acl_sim::detail::TensorImpl();
  impl->data = data;
  acl_sim::internal::shard().live_workspace_tensors++;
  return acl_sim::detail::TensorAccess::make(impl);
}
}  // namespace

namespace at_npu {
namespace native {

at::Tensor allocate_workspace(uint64_t workspace_size, aclrtStream stream) {
  C().allocator_requests++;
  char buf[240];
  std::function<void()> hook;
  if (aclError e = fault(kApiAllocator, &hook)) {
    std::snprintf(buf, sizeof buf,
                  "NPU out of memory. NPUWorkspaceAllocator tried to allocate %llu bytes (acl_sim: injected fault, "
                  "code %d)",
                  static_cast<unsigned long long>(workspace_size), e);
    throw OutOfMemoryError(buf);
  }
  aclrtStream s = resolve_stream(stream);
  if (s == nullptr) throw std::runtime_error("acl_sim: allocate_workspace on an invalid stream");
  OuterMapEntry outer("allocate_workspace");
  if (hook) hook();
  if (workspace_size == 0) return workspace_tensor(nullptr);  // defined, no memory (as torch_npu)
  const int dev = cur_device();
  constexpr uint64_t k2M = uint64_t(2) << 20;
  if (workspace_size > (uint64_t(1) << 48)) {
    std::snprintf(buf, sizeof buf, "NPU out of memory. NPUWorkspaceAllocator tried to allocate %llu bytes",
                  static_cast<unsigned long long>(workspace_size));
    throw OutOfMemoryError(buf);
  }
  const uint64_t need = workspace_size + 32;
  WsStream &w = ws_of(s);
  std::lock_guard<std::mutex> g(w.mu);
  WsBlock &b = w.ws[dev];
  if (b.size < need) {
    C().allocator_growths++;
    // torch_npu synchronises the device, then frees the old block, then
    // allocates round_up(request + 32, 2 MiB) (NPUWorkspaceAllocator.cpp
    // v2.7.1:75-130: AclrtSynchronizeDeviceWithTimeout :92, aclrtFree :93,
    // kRoundLarge :124). The synchronise fails inside a capture and
    // NPU_CHECK_ERROR throws. (It does not synchronise for a stream's first
    // block; the simulation counts and waits then too, as it always has, but
    // a first block does not break a capture.)
    if (b.base != 0 && invalidate_device_captures(dev, "the workspace allocator grew (it synchronises the device)", false)) {
      std::snprintf(buf, sizeof buf,
                    "NPUWorkspaceAllocator: aclrtSynchronizeDevice failed, error code %d (a stream of device %d "
                    "is capturing)",
                    ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT, dev);
      throw std::runtime_error(buf);
    }
    C().host_blocking++;
    C().device_synchronizations++;
    if (b.base != 0 || stream_capture_status(s) == ACL_MODEL_RI_CAPTURE_STATUS_NONE) wait_device_streams(dev);
    if (b.base != 0) {
      device_free(b.base, true);
      b.base = 0;
      b.size = 0;
    }
    const uint64_t want = (need + k2M - 1) / k2M * k2M;
    const uintptr_t p = device_alloc(want, true, dev);
    if (p == 0) {
      std::snprintf(buf, sizeof buf, "NPU out of memory. NPUWorkspaceAllocator tried to allocate %llu bytes",
                    static_cast<unsigned long long>(workspace_size));
      throw OutOfMemoryError(buf);
    }
    b.base = p;
    b.size = want;
  }
  note_workspace_request(b.base, workspace_size);
  return workspace_tensor(reinterpret_cast<void *>(b.base));
}

void OpCommand::RunOpApiV2(const std::string &op_name, const PROC_FUNC &func, bool /*sync: unused on this path*/) {
  const int dev = cur_device();
  if (queue_on()) {
    OpQueue *q = queue_of(dev);
    uint64_t seq;
    {
      seq = new_op_record(op_name, dev, true);
    }
    std::unique_lock<std::mutex> l(q->mu);
    if (q->status != QueueStatus::kRun) {
      const bool first = q->status == QueueStatus::kErrorExit;
      std::string msg;
      if (first) {
        q->status = QueueStatus::kCanExit;  // torch_npu throws once, then drops silently
        msg = poisoned_message(q->repo_error);
      }
      l.unlock();
      update_op_record(seq, [&](OpTask &r) {
        r.dropped = true;
        r.threw_at_call = first;
      });
      if (first) throw std::runtime_error(msg);
      return;
    }
    {
      q->q.push_back(QueueEntry{seq, op_name, func});
    }
    l.unlock();
    q->cv.notify_one();
    return;
  }
  uint64_t seq;
  {
    seq = new_op_record(op_name, dev, false);
  }
  int rc;
  try {
    rc = func();
  } catch (const std::exception &e) {
    update_op_record(seq, [&](OpTask &r) {
      r.ran = true;
      r.rc = ACL_ERROR_INVALID_PARAM;
      r.exception_escaped = true;
      r.exception_what = e.what();
      r.threw_at_call = true;
    });
    throw;
  }
  update_op_record(seq, [&](OpTask &r) {
    r.ran = true;
    r.rc = rc;
  });
  if (rc != 0) {
    update_op_record(seq, [&](OpTask &r) { r.threw_at_call = true; });
    throw std::runtime_error(op_name + ": the launch returned ACL error " + std::to_string(rc) +
                             " (acl_sim: torch_npu's ACL_REQUIRE_OK_OP with the task queue off)");
  }
}

}  // namespace native
}  // namespace at_npu
