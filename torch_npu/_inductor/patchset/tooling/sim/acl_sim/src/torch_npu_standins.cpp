// HOST SIMULATION stand-ins of torch_npu (test double and dry-run tool for
// torch-npu-inductor-patches; not torch_npu): its task queue
// (OpCommand::RunOpApiV2, the allocator's event records), its streams (default,
// pools, the current one per thread), its caching allocator as its exported
// pointer reaches it, its workspace allocator's allocate_workspace,
// npuSynchronizeDevice and empty_cache, over the ACL core (acl_runtime.cpp,
// through internal.h). Built
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
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "acl/acl.h"
#include "acl_sim/control.h"
#include "internal.h"
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"
#include "torch_npu/csrc/core/npu/NPUStream.h"
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

// Repository::Enqueue (NPUQueue.cpp v2.7.1:530-571) onto `device`'s queue: in the error state the first call throws
// (the failed task's report), later ones are dropped. Whether `fn` was queued; `seq`: its record (0: none), marked
// dropped, or threw_at_call, when it was not.
bool enqueue_task(int device, uint64_t seq, const std::string &op, std::function<int()> fn) {
  OpQueue *q = queue_of(device);
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
    return false;
  }
  q->q.push_back(QueueEntry{seq, op, std::move(fn)});
  l.unlock();
  q->cv.notify_one();
  return true;
}

// MakeSureQueueEmpty of `device`'s queue (NPUQueue.cpp v2.7.1:243-299): waits until its thread ran all it was given.
// From that very thread it would never return on an NPU: reported (kSelfWait), not waited for. A paused queue is not
// waited for either. `who`: the caller, for the report.
void make_sure_queue_empty(int device, const char *who) {
  OpQueue *q = existing_queue(device);
  if (!queue_on() || q == nullptr) return;
  if (device == t_queue_device) {
    char buf[400];
    std::snprintf(buf, sizeof buf,
                  "%s waited for torch_npu's task queue of device %d on that queue's own thread: its "
                  "MakeSureQueueEmpty waits for this very thread to drain the queue (NPUStream.cpp v2.7.1:644-645, "
                  "NPUQueue.cpp :270-298), which never returns on an NPU",
                  who, device);
    internal::report(ErrorKind::kSelfWait, buf);
    return;
  }
  std::unique_lock<std::mutex> l(q->mu);
  q->idle_cv.wait(l, [&] { return (q->q.empty() && !q->busy) || g_queues_paused.load(); });
}

// c10_npu::npuSynchronizeDevice on `device` (control.h). `who`: the caller, for the self-wait report.
void npu_sync_device(int device, const char *who) {
  C().device_synchronizations++;
  C().host_blocking++;
  for (int d = 0; d < kMaxDevices; ++d) make_sure_queue_empty(d, who);  // emptyAllNPUStream (NPUStream.cpp :548-562)
  if (invalidate_device_captures(device, "npuSynchronizeDevice (aclrtSynchronizeDevice) while a stream of the device captures",
                                 false))
    throw std::runtime_error(std::string("acl_sim: ") + who + ": aclrtSynchronizeDevice failed with error " +
                             std::to_string(ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT) + " (a stream of device " +
                             std::to_string(device) + " is capturing)");
  wait_device_streams(device);
}

// ---------------------------------------------------------------- torch_npu's streams
// NPUStream.cpp v2.7.1: per device a default stream (initGlobalStreamState :234-269) and two pools (normal and high
// priority) of 32 streams, made at a pool's first request (initDeviceStreamState :271-287) and handed out round robin
// (get_idx :323-328); per thread and device the current stream, the default one until set (current_streams :92,
// :305-314). Each is a stream of the ACL double (torch_npu: AclrtCreateStreamWithConfig), made on its device.
constexpr int kStreamsPerPool = 32;  // kStreamsPerPool :60-61
struct DeviceStreams {
  std::once_flag default_once, pool_once[2];
  aclrtStream default_stream = nullptr;
  aclrtStream pool[2][kStreamsPerPool] = {};
  std::atomic<uint32_t> next[2] = {};
};
DeviceStreams g_streams[kMaxDevices];
thread_local std::optional<c10_npu::NPUStream> t_current_stream[kMaxDevices];  // none: the default stream

// Runs `f` with `device` as the calling thread's device (torch_npu's SetDevice, then back).
template <class F>
auto on_device(int device, F &&f) -> decltype(f()) {
  const int before = current_device();
  if (device == before) return f();
  set_thread_device(device);
  struct Back {
    int device;
    ~Back() { set_thread_device(device); }
  } back{before};
  return f();
}
aclrtStream new_stream(int device) {
  return on_device(device, [] {
    aclrtStream s = nullptr;
    if (const aclError rc = aclrtCreateStream(&s))
      throw std::runtime_error("acl_sim: torch_npu's stream state: aclrtCreateStream failed with " +
                               std::to_string(rc));
    return s;
  });
}
int checked_device(c10::DeviceIndex index) {  // check_npu (:316-320)
  const int device = index == -1 ? current_device() : index;
  if (device < 0 || device >= device_count())
    throw std::runtime_error("Invalid device_index : " + std::to_string(device) + ", valid device_index range is [0, " +
                             std::to_string(device_count()) + ")");
  return device;
}
aclrtStream default_stream(int device) {
  DeviceStreams &d = g_streams[device];
  std::call_once(d.default_once, [&] { d.default_stream = new_stream(device); });
  return d.default_stream;
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

// ---------------------------------------------------------------- caching allocator
// The subset of torch_npu's NPUCachingAllocator a launch can reach through
// its exported allocator pointer (see the stand-in NPUCachingAllocator.h and
// control.h for the contract and its sources). Pool 0 is the ordinary pool;
// pool N is the private pool of the capture whose model id is N.
using StreamUse = std::pair<aclrtStream, int>;  // a stream a block was used on, and its device
struct CaBlock {
  uintptr_t base = 0;
  size_t size = 0;
  aclrtStream stream = nullptr;
  uint64_t pool = 0;
  bool held = false;    // allocated: handed out, not yet freed
  bool cached = false;  // free in its pool (free_block :2406-2467): neither held nor waiting for an event
  std::set<StreamUse> uses, capture_uses;  // stream_uses (:233), those recorded during a capture (:1045-1047)
  int events = 0;                          // event_count: outstanding events of its uses (:3064-3089)
};
// DeviceCachingAllocator: its own lock (NPUCachingAllocator.cpp v2.7.1:984).
struct CaDevice {
  std::recursive_mutex mu;
  std::map<uintptr_t, CaBlock> blocks;  // this device's blocks, held or cached
  std::set<uint64_t> dead_pools;        // pools whose graph is gone: blocks freed when returned
  uint64_t held_bytes = 0;              // "already allocated"
  // npu_events (:1007-1008): per stream, the events recorded for freed blocks, in record order.
  std::map<StreamUse, std::deque<std::pair<aclrtEvent, uintptr_t>>> events;
  std::vector<uintptr_t> deferred;  // needs_events_deferred_until_no_capture (:1004-1005)
};
CaDevice g_ca[kMaxDevices];
// The allocator's pointer -> block map, with its own lock (get_allocated_block :3262).
std::mutex g_ca_ptr_mu;
std::unordered_map<uintptr_t, int> &ca_ptr_device() {
  static auto *m = new std::unordered_map<uintptr_t, int>();
  return *m;
}
int ca_device_of(uintptr_t p) {  // -1: not a block of the allocator
  std::lock_guard<std::mutex> g(g_ca_ptr_mu);
  auto it = ca_ptr_device().find(p);
  return it == ca_ptr_device().end() ? -1 : it->second;
}
void ca_forget_locked(CaDevice &d, std::map<uintptr_t, CaBlock>::iterator it) {  // requires d.mu: freed to the device
  device_free(it->first, false);
  {
    std::lock_guard<std::mutex> g(g_ca_ptr_mu);
    ca_ptr_device().erase(it->first);
  }
  d.blocks.erase(it);
}

// ---- the allocator's events: EventPool (:775-820), NPUEvent (NPUEvent.cpp v2.7.1), NPUEventManager's count of
// records the task queue has not made yet. torch_npu makes them with aclrtCreateEventExWithFlag; the double's
// aclrtCreateEvent here, on the stream's device.
std::mutex g_event_pool_mu;
std::vector<aclrtEvent> g_event_pool[kMaxDevices];
std::mutex g_unrecorded_mu;
std::map<aclrtEvent, int> g_unrecorded;  // IncreaseUnrecordedCount / DecreaseUnrecordedCount
aclrtEvent pooled_event(int device) {    // requires `device` current
  {
    std::lock_guard<std::mutex> g(g_event_pool_mu);
    if (!g_event_pool[device].empty()) {
      aclrtEvent ev = g_event_pool[device].back();
      g_event_pool[device].pop_back();
      return ev;
    }
  }
  aclrtEvent ev = nullptr;
  if (const aclError rc = aclrtCreateEvent(&ev))
    throw std::runtime_error("acl_sim: torch_npu's caching allocator: aclrtCreateEvent failed with " +
                             std::to_string(rc));
  return ev;
}
void pool_event(int device, aclrtEvent ev) {
  std::lock_guard<std::mutex> g(g_event_pool_mu);
  g_event_pool[device].push_back(ev);
}
// NPUEvent::record -> LaunchRecordEventTask (AsyncTaskQueueInterface.cpp v2.7.1:186-236): with the task queue on, a
// task of the queue that records on `stream` when the queue thread reaches it (RecordEventFunc, OpParamMaker.cpp
// :652-673: a failed record stops the queue as a failed operator does); off, aclrtRecordEvent here. Throws as torch_npu
// does: the queue's first refusal after a failed task, or the failed record.
void record_event(aclrtEvent ev, aclrtStream stream, int device) {
  if (!queue_on()) {
    if (const aclError rc = aclrtRecordEvent(ev, stream))
      throw std::runtime_error("acl_sim: torch_npu's caching allocator: aclrtRecordEvent failed with " +
                               std::to_string(rc));
    return;
  }
  {
    std::lock_guard<std::mutex> g(g_unrecorded_mu);
    g_unrecorded[ev]++;
  }
  enqueue_task(device, 0, "RecordEvent", [ev, stream] {
    const aclError rc = aclrtRecordEvent(ev, stream);
    std::lock_guard<std::mutex> g(g_unrecorded_mu);
    if (--g_unrecorded[ev] == 0) g_unrecorded.erase(ev);
    return static_cast<int>(rc);
  });
}
bool event_done(aclrtEvent ev) {  // NPUEvent::query (NPUEvent.cpp v2.7.1:84-101)
  if (queue_on()) {
    std::lock_guard<std::mutex> g(g_unrecorded_mu);
    if (g_unrecorded.count(ev) != 0) return false;  // the queue has not recorded it yet
  }
  aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
  if (const aclError rc = aclrtQueryEventStatus(ev, &status))
    throw std::runtime_error("acl_sim: torch_npu's caching allocator: aclrtQueryEventStatus failed with " +
                             std::to_string(rc));
  return status == ACL_EVENT_RECORDED_STATUS_COMPLETE;
}

// Requires d.mu. free_block (:2406): back to its pool, or, its graph gone, to the device.
void ca_free_block_locked(CaDevice &d, uintptr_t base) {
  auto it = d.blocks.find(base);
  it->second.cached = true;
  if (it->second.pool != 0 && d.dead_pools.count(it->second.pool)) ca_forget_locked(d, it);
}
// Requires d.mu. insert_events (:3064-3089): an event on each stream the block was used on, its uses cleared. A
// record that throws leaves the block out of every pool (torch_npu: lost), and the rest of its uses unrecorded.
void ca_insert_events_locked(CaDevice &d, CaBlock &b) {
  const std::set<StreamUse> uses = std::move(b.uses);
  b.uses.clear();
  for (const StreamUse &use : uses) {
    on_device(use.second, [&] {
      aclrtEvent ev = pooled_event(use.second);
      try {
        record_event(ev, use.first, use.second);
      } catch (...) {
        pool_event(use.second, ev);
        throw;
      }
      b.events++;
      d.events[use].emplace_back(ev, b.base);
    });
  }
}
// Requires d.mu. insert_events_deferred_until_no_capture (:3091-3108): the uses recorded during the capture dropped
// (remove_npugraph_stream_uses :3048-3062), events for the others; a block left with none is free.
void ca_insert_deferred_locked(CaDevice &d) {
  std::vector<uintptr_t> deferred = std::move(d.deferred);
  d.deferred.clear();
  for (uintptr_t base : deferred) {
    CaBlock &b = d.blocks[base];
    for (const StreamUse &use : b.capture_uses) b.uses.erase(use);
    b.capture_uses.clear();
    ca_insert_events_locked(d, b);
    if (b.events == 0) ca_free_block_locked(d, base);
  }
}
// Requires d.mu. One event of a use on `device` done with: back to the event pool; its block free once its last is.
void ca_event_done_locked(CaDevice &d, int device, aclrtEvent ev, uintptr_t base) {
  pool_event(device, ev);
  if (--d.blocks[base].events == 0) ca_free_block_locked(d, base);
}
// Requires d.mu. process_events (:3110-3139): per stream, in record order, every completed event; stops at a stream's
// first that is not.
void ca_process_events_locked(CaDevice &d) {
  ca_insert_deferred_locked(d);
  for (auto it = d.events.begin(); it != d.events.end();) {
    auto &queue = it->second;
    while (!queue.empty() && event_done(queue.front().first)) {
      const auto done = queue.front();
      queue.pop_front();
      ca_event_done_locked(d, it->first.second, done.first, done.second);
    }
    it = queue.empty() ? d.events.erase(it) : std::next(it);
  }
}
// Requires d.mu, no capture underway, the task queues drained (npuSynchronizeDevice). synchronize_and_free_events
// (:3009-3046): every outstanding event waited for (aclrtSynchronizeEvent), its block freed.
void ca_synchronize_and_free_events_locked(CaDevice &d) {
  ca_insert_deferred_locked(d);
  for (auto &per_stream : d.events)
    for (const auto &e : per_stream.second) {
      if (const aclError rc = internal::synchronize_event(e.first))
        throw std::runtime_error("acl_sim: torch_npu's caching allocator: aclrtSynchronizeEvent failed with " +
                                 std::to_string(rc));
      ca_event_done_locked(d, per_stream.first.second, e.first, e.second);
    }
  d.events.clear();
}
// Requires d.mu. release_cached_blocks (:2832-2850): the outstanding events synchronised and their blocks freed, then
// the free blocks of the ordinary pool and of dead graph pools freed to the device.
void ca_release_cached_locked(CaDevice &d) {
  ca_synchronize_and_free_events_locked(d);
  for (auto it = d.blocks.begin(); it != d.blocks.end();) {
    const CaBlock &b = it->second;
    if (b.cached && (b.pool == 0 || d.dead_pools.count(b.pool)))
      ca_forget_locked(d, it++);
    else
      ++it;
  }
}

// Frees a destroyed (or failed) capture's pool: free blocks now, the others once free
// (the core calls it at aclmdlRIDestroy and at a failed aclmdlRICaptureEnd: set_standin_hooks).
void release_graph_pool(int device, uint64_t pool) {
  CaDevice &d = g_ca[device];
  std::lock_guard<std::recursive_mutex> g(d.mu);
  d.dead_pools.insert(pool);
  for (auto it = d.blocks.begin(); it != d.blocks.end();) {
    if (it->second.pool == pool && it->second.cached)
      ca_forget_locked(d, it++);
    else
      ++it;
  }
}

// ---- FreeNPUMemoryCallbacksRegistry (:62) and the cache miss's trigger_free_memory_callbacks (:2620-2630). c10's
// Registry::Register locks; Keys() and Create() do not: a Register while a cache miss reads is reported.
struct Callbacks {
  std::mutex mu;  // keeps the simulation itself free of the race it reports
  std::map<std::string, std::function<bool()>> by_key;
};
Callbacks &callbacks() {  // a library registers as it loads, maybe before this file's statics are made
  static auto *c = new Callbacks();
  return *c;
}
std::atomic<int> g_callback_readers{0}, g_callback_writers{0};
void race_on_registry(const char *what) {
  internal::report(ErrorKind::kAllocatorRace,
                   std::string(what) +
                       ": FreeNPUMemoryCallbacksRegistry written while a cache miss reads it (c10's "
                       "Registry: Register locks, Keys() and Create() do not; NPUCachingAllocator.cpp "
                       "v2.7.1:2620-2630)");
}
bool run_free_memory_callbacks() {
  g_callback_readers.fetch_add(1);
  if (g_callback_writers.load() != 0) race_on_registry("a cache miss");
  std::vector<std::function<bool()>> to_run;
  {
    std::lock_guard<std::mutex> g(callbacks().mu);
    for (const auto &kv : callbacks().by_key) to_run.push_back(kv.second);
  }
  bool freed = false;
  try {
    for (const auto &execute : to_run) freed |= execute();
  } catch (...) {
    g_callback_readers.fetch_sub(1);
    throw;
  }
  g_callback_readers.fetch_sub(1);
  return freed;
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

// Requires d.mu. torch_npu's out-of-memory text (NPUCachingAllocator.cpp v2.7.1:1338-1347).
std::string oom_text(int device, uint64_t alloc_size) {
  CaDevice &d = g_ca[device];
  uint64_t reserved = 0, active = 0;
  for (const auto &kv : d.blocks) {
    reserved += kv.second.size;
    if (!kv.second.cached) active += kv.second.size;  // allocated, or waiting for an event
  }
  uint64_t total, in_use;
  device_memory(device, &total, &in_use);
  return "NPU out of memory. Tried to allocate " + format_size(alloc_size) + " (NPU " + std::to_string(device) + "; " +
         format_size(total) + " total capacity; " + format_size(d.held_bytes) + " already allocated; " +
         format_size(active) + " current active; " + format_size(total > in_use ? total - in_use : 0) + " free; " +
         format_size(reserved) +
         " reserved in total by PyTorch).If reserved memory is >> allocated memory try setting max_split_size_mb to "
         "avoid fragmentation.";
}

// Requires d.mu. A new block within the device's capacity, handed out (0 when the device is full).
uintptr_t ca_new_block_locked(CaDevice &d, int device, size_t size, aclrtStream stream, uint64_t pool) {
  const uintptr_t p = device_alloc(size, false, device);
  if (p == 0) return 0;
  CaBlock &b = d.blocks[p];
  b.base = p;
  b.size = size;
  b.stream = stream;
  b.pool = pool;
  b.held = true;
  std::lock_guard<std::mutex> g(g_ca_ptr_mu);
  ca_ptr_device()[p] = device;
  return p;
}

// DeviceCachingAllocator::malloc (:1185-1293) on `dev` for `stream` (the handle the caller named).
void *ca_malloc(int dev, size_t nbytes, aclrtStream stream) {
  C().caching_requests++;
  if (t_queue_device >= 0) C().caching_allocs_on_queue_threads++;
  CaDevice &d = g_ca[dev];
  const size_t size = (nbytes + 511) / 512 * 512;  // kMinBlockSize rounding (round_size :2130-2142)
  if (aclError e = fault(kApiCachingAlloc)) {
    std::lock_guard<std::recursive_mutex> g(d.mu);
    throw OutOfMemoryError(oom_text(dev, size) + " (acl_sim: injected fault, code " + std::to_string(e) + ")");
  }
  aclrtStream s = resolve_stream(stream);
  if (s == nullptr) throw std::runtime_error("acl_sim: the caching allocator asked for an invalid stream");
  std::unique_lock<std::recursive_mutex> lock(d.mu);  // malloc's device lock (:1192)
  // Not while capturing: a query could end the capture (:1199-1211).
  if (!captures_underway(dev)) ca_process_events_locked(d);
  // get_pool: the capture's private pool when its filter accepts the stream (:2500-2516)
  const uint64_t pool = active_capture_id(s);
  auto take_cached = [&]() -> uintptr_t {  // get_free_block: same pool, same stream (:2555-2567)
    CaBlock *best = nullptr;
    for (auto &kv : d.blocks) {
      CaBlock &b = kv.second;
      if (b.cached && b.pool == pool && b.stream == stream && b.size >= size &&
          (best == nullptr || b.size < best->size))
        best = &b;
    }
    if (best == nullptr) return 0;
    best->cached = false;
    best->held = true;
    return best->base;
  };
  uintptr_t p = take_cached();
  if (p == 0 && run_free_memory_callbacks()) p = take_cached();  // at a miss, the callbacks (:1252-1256)
  if (p == 0) p = ca_new_block_locked(d, dev, size, stream, pool);
  if (p == 0 && !captures_underway(dev)) {
    // The out-of-memory retry (:1279-1293): without the device lock, npuSynchronizeDevice; then the workspace
    // allocator's empty_cache, release_cached_blocks (the outstanding events synchronised first) and a new block.
    C().caching_oom_retries++;
    lock.unlock();
    npu_sync_device(dev, "the caching allocator's out-of-memory retry (NPUCachingAllocator.cpp v2.7.1:1279-1293)");
    ws_free_all_blocks(dev, "the caching allocator's out-of-memory retry (workspace empty_cache)");
    lock.lock();
    ca_release_cached_locked(d);
    p = ca_new_block_locked(d, dev, size, stream, pool);
  }
  if (p == 0) throw OutOfMemoryError(oom_text(dev, size));
  d.held_bytes += d.blocks[p].size;
  C().live_caching_allocations++;
  caching_block_held();
  return reinterpret_cast<void *>(p);
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

CachingBlocks caching_blocks(int device) {
  CaDevice &d = g_ca[device];
  std::lock_guard<std::recursive_mutex> g(d.mu);
  CachingBlocks r;
  for (const auto &kv : d.blocks) r.allocated += kv.second.held, r.active += !kv.second.cached;
  return r;
}

void npu_synchronize_device() {
  npu_sync_device(cur_device(), "npu_synchronize_device()");
}
namespace detail {
void *caching_raw_alloc_with_stream(size_t nbytes, aclrtStream stream) {
  if (nbytes == 0) return nullptr;                 // NPUCachingAllocator.cpp v2.7.1:3754-3758
  return ca_malloc(cur_device(), nbytes, stream);  // the calling thread's device (:3756)
}
void *caching_allocate(size_t nbytes, int *device) {  // allocate (:3640-3664)
  if (nbytes >= (size_t(1) << 60)) throw OutOfMemoryError("NPU out of memory. Tried to allocate more than 1EB memory.");
  *device = cur_device();
  if (nbytes == 0) return nullptr;
  return ca_malloc(*device, nbytes, c10_npu::getCurrentNPUStream(static_cast<c10::DeviceIndex>(*device)).stream(false));
}
void caching_raw_delete(void *ptr) {  // free (:3257-3275, :1494-1531)
  if (ptr == nullptr) return;
  C().caching_frees++;
  if (t_queue_device >= 0) C().caching_frees_on_queue_threads++;
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  const int dev = ca_device_of(p);
  char buf[160];
  std::snprintf(buf, sizeof buf, "invalid device pointer: %p (acl_sim: raw_delete of a pointer the caching allocator "
                "did not hand out, or twice)", ptr);  // torch_npu: AT_ERROR (:3262-3265)
  if (dev < 0) throw std::runtime_error(buf);
  CaDevice &d = g_ca[dev];
  std::lock_guard<std::recursive_mutex> g(d.mu);  // free's device lock (:1498)
  auto it = d.blocks.find(p);
  if (it == d.blocks.end() || !it->second.held) throw std::runtime_error(buf);
  CaBlock &b = it->second;
  b.held = false;
  d.held_bytes -= b.size;
  C().live_caching_allocations--;
  caching_block_returned();
  if (b.uses.empty())
    ca_free_block_locked(d, p);
  else if (captures_underway(dev))  // no event while capturing: recorded once none is (:1520-1526)
    d.deferred.push_back(p);
  else
    ca_insert_events_locked(d, b);
}
void caching_record_stream(void *ptr, aclrtStream stream, int stream_device) {  // recordStream (:3439-3459, :1606-1613)
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  const int dev = ca_device_of(p);
  CaDevice &d = g_ca[dev < 0 ? 0 : dev];
  std::lock_guard<std::recursive_mutex> g(d.mu);
  auto it = dev < 0 ? d.blocks.end() : d.blocks.find(p);
  if (it == d.blocks.end() || !it->second.held)
    throw std::runtime_error("No allocated block can be found (acl_sim: recordStream of a block not handed out)");
  it->second.uses.emplace(stream, stream_device);
  if (captures_underway(dev)) it->second.capture_uses.emplace(stream, stream_device);
}
bool caching_has_captures_underway(int device) {
  return device >= 0 && device < kMaxDevices && captures_underway(device);
}
void register_free_memory_callback(const std::string &key, std::function<bool()> execute) {
  g_callback_writers.fetch_add(1);
  if (g_callback_readers.load() != 0) race_on_registry(("Register(\"" + key + "\")").c_str());
  bool twice;
  {
    std::lock_guard<std::mutex> g(callbacks().mu);
    twice = !callbacks().by_key.emplace(key, std::move(execute)).second;
  }
  g_callback_writers.fetch_sub(1);
  if (twice) {  // c10::Registry::Register, the same priority twice: it prints and ends the process
    std::fprintf(stderr, "Key already registered with the same priority: %s\n", key.c_str());
    std::exit(1);
  }
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

namespace acl_sim {
namespace detail {
struct StreamAccess {
  static c10_npu::NPUStream make(aclrtStream stream, int device, c10::StreamId id) {
    return c10_npu::NPUStream(stream, static_cast<c10::DeviceIndex>(device), id);
  }
};
}  // namespace detail
}  // namespace acl_sim

namespace c10_npu {

aclrtStream NPUStream::stream(const bool need_empty) const {  // NPUStream.cpp v2.7.1:787-796, :417-445
  if (need_empty) ::acl_sim::make_sure_queue_empty(device_, "NPUStream::stream(true)");
  return stream_;
}

NPUStream getStreamFromPool(const bool isHighPriority, c10::DeviceIndex device_index) {  // :447-473
  const int device = checked_device(device_index);
  DeviceStreams &d = g_streams[device];
  const int p = isHighPriority ? 1 : 0;
  std::call_once(d.pool_once[p], [&] {
    for (aclrtStream &s : d.pool[p]) s = new_stream(device);
  });
  const uint32_t i = d.next[p].fetch_add(1) % kStreamsPerPool;
  return ::acl_sim::detail::StreamAccess::make(d.pool[p][i], device, c10::StreamId((1 + p) << 5 | i));
}

NPUStream getNPUStreamFromPool(c10::DeviceIndex device) { return getStreamFromPool(false, device); }

NPUStream getCurrentNPUStream(c10::DeviceIndex device_index) {  // :517-525
  const int device = checked_device(device_index);
  const std::optional<NPUStream> &s = t_current_stream[device];
  return s ? *s : ::acl_sim::detail::StreamAccess::make(default_stream(device), device, 0);
}

void setCurrentNPUStream(NPUStream stream) {  // :733-744
  t_current_stream[stream.device_index()].emplace(stream);
}

}  // namespace c10_npu

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
    enqueue_task(dev, new_op_record(op_name, dev, true), op_name, func);
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
