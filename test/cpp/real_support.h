// Test support for the launch helper's C++ tests on a RELEASED torch_npu's own runtime: compiled against
// the wheel's headers, linked against its libtorch_npu.so and the host ACL library (a TEST DOUBLE of CANN,
// tooling/sim/acl_sim/host/, loaded only into the test's child process) by
// tooling/releases/cpp_tests.py, and run there after `import torch_npu` (real_runner.h). torch_npu's task
// queue, caching allocator and OpCommand are the wheel's; what a kernel received comes from the double's
// probe kernel, through its control surface (host_acl.h).
//
// The launch is the one the generated launcher makes (launch_codegen.launcher_source written by hand in the
// same shape): LaunchMemory on the calling thread, only the LaunchRegions copied into the lambda handed to
// OpCommand::RunOpApiV2, handed() right after that call returns.
#pragma once
#include <acl/acl.h>
#include <host_acl.h>
#include <npu_launch_resources.h>
#include <sys/syscall.h>
#include <torch_npu/csrc/core/npu/NPUCachingAllocator.h>
#include <torch_npu/csrc/core/npu/NPUFunctions.h>
#include <torch_npu/csrc/framework/OpCommand.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "check.h"
#include "probe_launch.h"

namespace t {

// ---- values out of the double's JSON (its own output: flat keys, numbers, booleans, integer lists) ------
inline size_t json_key(const std::string &o, const char *key, size_t from = 0) {
  const size_t at = o.find(std::string("\"") + key + "\":", from);
  if (at == std::string::npos)
    throw Failure(std::string("host ACL library JSON lacks '") + key + "': " + o.substr(0, 200));
  return at + std::strlen(key) + 3;
}
inline long long json_int(const std::string &o, const char *key, size_t from = 0) {
  return std::strtoll(o.c_str() + json_key(o, key, from), nullptr, 10);
}
inline unsigned long long json_uint(const std::string &o, const char *key, size_t from = 0) {
  return std::strtoull(o.c_str() + json_key(o, key, from), nullptr, 10);
}
inline bool json_bool(const std::string &o, const char *key) { return o.compare(json_key(o, key), 4, "true") == 0; }
inline std::vector<int64_t> json_ints(const std::string &o, const char *key) {
  std::vector<int64_t> v;
  const char *p = o.c_str() + json_key(o, key) + 1;  // past '['
  while (*p != ']' && *p != '\0') {
    char *end = nullptr;
    v.push_back(std::strtoll(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
  }
  return v;
}

// ---- the probe kernel: what each launch received (the double's probe records) -------------------------
struct Extent {
  uintptr_t base = 0;
  uint64_t size = 0;
  int device = -1;
};
struct ProbeRecord {
  uint64_t launch_id = 0;
  int device = 0;
  int32_t grid[3] = {0, 0, 0};
  bool decoded = false, ffts_ok = false, regions_overlap = false, locks_unchanged = false, workspace_written = false;
  uintptr_t lock_ptr = 0, workspace_ptr = 0;
  std::vector<int64_t> lock_slots_at_start;
  int overlaps_with_running = 0, access_errors = 0;
  uint64_t lock_overrun = 0, workspace_overrun = 0;
  Extent lock_extent, workspace_extent;  // the device allocation each region lies in (the caching allocator's segment)
};
inline bool probe_record(uint64_t id, ProbeRecord *r) {
  const char *j = acl_host_probe_record_json(id);
  if (j == nullptr) return false;
  const std::string o = j;
  r->launch_id = json_uint(o, "launch_id");
  r->device = int(json_int(o, "device"));
  const std::vector<int64_t> g = json_ints(o, "grid");
  for (size_t i = 0; i < 3 && i < g.size(); ++i) r->grid[i] = int32_t(g[i]);
  r->decoded = json_bool(o, "decoded");
  r->ffts_ok = json_bool(o, "ffts_ok");
  r->regions_overlap = json_bool(o, "regions_overlap");
  r->locks_unchanged = json_bool(o, "locks_unchanged");
  r->workspace_written = json_bool(o, "workspace_written");
  r->lock_ptr = uintptr_t(json_uint(o, "lock_ptr"));
  r->workspace_ptr = uintptr_t(json_uint(o, "workspace_ptr"));
  r->lock_slots_at_start = json_ints(o, "lock_slots_at_start");
  r->overlaps_with_running = int(json_int(o, "overlaps_with_running"));
  r->access_errors = int(json_int(o, "access_errors"));
  r->lock_overrun = json_uint(o, "lock_overrun");
  r->workspace_overrun = json_uint(o, "workspace_overrun");
  for (auto [key, e] :
       {std::make_pair("lock_extent", &r->lock_extent), std::make_pair("workspace_extent", &r->workspace_extent)}) {
    const size_t at = json_key(o, key);
    e->base = uintptr_t(json_uint(o, "base", at));
    e->size = json_uint(o, "size", at);
    e->device = int(json_int(o, "device", at));
  }
  return true;
}
inline ProbeRecord record(uint64_t id) {
  ProbeRecord r;
  if (!probe_record(id, &r)) throw Failure("no probe record for launch " + std::to_string(id));
  return r;
}

// A probe kernel, loaded as a binary through ACL (the double's text format, host_acl.h).
inline aclrtFuncHandle probe(const std::string &name, uint64_t lock_bytes, uint64_t ws_bytes, uint32_t us = 0,
                             bool ffts = false) {
  const std::string bin = "ACL_HOST_PROBE_BINARY 1\nkernel " + name + " has_ffts=" + (ffts ? "1" : "0") +
                          " simt_only=0 lock_bytes=" + std::to_string(lock_bytes) +
                          " workspace_bytes=" + std::to_string(ws_bytes) +
                          " own_args_bytes=12 sim_time_us=" + std::to_string(us) + "\n";
  aclrtBinHandle b = nullptr;
  aclrtFuncHandle f = nullptr;
  if (aclrtBinaryLoadFromData(bin.data(), bin.size(), nullptr, &b) != ACL_SUCCESS ||
      aclrtBinaryGetFunction(b, name.c_str(), &f) != ACL_SUCCESS)
    throw Failure("loading probe kernel " + name + " failed");
  return f;
}
inline uint64_t launch(aclrtFuncHandle h, aclrtStream s, void *locks, void *ws, uint32_t block_num,
                       const int32_t grid[3], bool ffts = false) {
  if (launch_rc(h, s, locks, ws, block_num, grid, ffts) != ACL_SUCCESS) throw Failure("launch failed");
  return acl_host_last_launch_id();
}

// ---- the double's counters (ACL calls) and torch_npu's allocator statistics ---------------------------
struct Counters {
  uint64_t memsets, launches, sync_copies, async_copies, pageable_async_copies, pinned_allocs, host_blocking,
      events_created, events_recorded, event_queries, device_synchronizations, errors;
};
inline Counters counters() {
  const std::string o = acl_host_counters_json();
  return Counters{json_uint(o, "memsets"),
                  json_uint(o, "launches"),
                  json_uint(o, "sync_copies"),
                  json_uint(o, "async_copies"),
                  json_uint(o, "pageable_async_copies"),
                  json_uint(o, "pinned_allocs"),
                  json_uint(o, "host_blocking"),
                  json_uint(o, "events_created"),
                  json_uint(o, "events_recorded"),
                  json_uint(o, "event_queries"),
                  json_uint(o, "device_synchronizations"),
                  json_uint(o, "errors")};
}
inline uint64_t device_memory_in_use(int device) {
  const std::vector<int64_t> v = json_ints(acl_host_counters_json(), "device_memory_in_use");
  return size_t(device) < v.size() ? uint64_t(v[size_t(device)]) : 0;
}
// torch_npu's own caching allocator, for `device` (its DeviceStats; reset per case by the runner).
struct Blocks {
  int64_t requests, frees, live, peak, retries, ooms;
  int64_t active;  // allocated, or freed but waiting for an event on a stream that used it
};
inline Blocks blocks(int device = 0) {
  const auto s = c10_npu::NPUCachingAllocator::getDeviceStats(device);
  const auto &a = s.allocation[0];  // StatType::AGGREGATE
  return Blocks{a.allocated, a.freed, a.current, a.peak, s.num_alloc_retries, s.num_ooms, s.active[0].current};
}

inline std::string errors_text() {
  const std::string r = acl_host_report_json();
  const size_t a = r.find("\"errors\":"), b = r.find(",\"probe_records\":");
  return a == std::string::npos || b == std::string::npos ? r.substr(0, 2000)
                                                          : r.substr(a, std::min<size_t>(b - a, 4000));
}
inline int error_count(const char *kind) { return acl_host_error_count_of(kind); }
// aclAppLog messages of `level` since the case began.
inline std::vector<std::string> app_logs(int level) {
  std::vector<std::string> out;
  int lv = 0;
  for (int i = 0; const char *m = acl_host_app_log(i, &lv); ++i)
    if (lv == level) out.push_back(m);
  return out;
}
inline long tid() { return static_cast<long>(syscall(SYS_gettid)); }
// Threads (gettid) that called ACL function `fn` since the case began, from the report's "calls".
inline std::vector<long> callers(const char *fn) {
  const std::string r = acl_host_report_json();
  std::vector<long> out;
  const size_t at = r.find(std::string("\"") + fn + "\":{\"calls\":");
  if (at == std::string::npos) return out;
  const size_t th = r.find("\"threads\":{", at);
  for (const char *p = r.c_str() + th + 11; *p == '"';) {
    char *end = nullptr;
    out.push_back(std::strtol(p + 1, &end, 10));
    p = end + 2;                 // past '":'
    std::strtoull(p, &end, 10);  // the count
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

// Device allocations the double refused since the case began (aclrtMalloc and the caching allocator's
// aclrtMallocAlign32: an injected fault, or past the device's memory), from the report's "calls".
inline uint64_t refused_allocations() {
  const std::string r = acl_host_report_json();
  uint64_t n = 0;
  for (const char *fn : {"aclrtMalloc", "aclrtMallocAlign32"}) {
    const size_t at = r.find(std::string("\"") + fn + "\":{\"calls\":");
    if (at != std::string::npos) n += json_uint(r, "failed", at);
  }
  return n;
}

// ---- devices, streams, torch_npu's task queue -----------------------------------------------------------
inline void set_device(int d) {
  if (c10_npu::SetDevice(static_cast<c10::DeviceIndex>(d)) != ACL_SUCCESS) throw Failure("SetDevice failed");
}
// Streams torch_npu manages: the helper takes launch memory only for the calling thread's current stream (torch_npu
// launches nowhere else). Stream i of `device` (and priority): the first use takes a whole pool at once, so the
// pool's round robin gives each index a stream of its own.
inline std::vector<c10_npu::NPUStream> &npu_streams() {
  static std::vector<c10_npu::NPUStream> all;  // made on the case's thread before any other thread asks
  return all;
}
inline aclrtStream stream(int i, int device = 0, bool high_priority = false) {
  constexpr int kPool = 32;  // torch_npu's streams per pool
  static std::vector<c10_npu::NPUStream> pools[2][2];
  auto &pool = pools[device][high_priority];
  if (pool.empty()) {
    for (int k = 0; k < kPool; ++k) pool.push_back(c10_npu::getStreamFromPool(high_priority, device));
    npu_streams().insert(npu_streams().end(), pool.begin(), pool.end());
  }
  if (i >= kPool) throw Failure("a pool has 32 streams");
  return pool[i].stream(false);
}
// Stream i, with none of the caching allocator's cached blocks left (for any stream): its next request is a new segment.
inline aclrtStream fresh_stream(int i, int device = 0) {
  c10_npu::NPUCachingAllocator::emptyCache(true);
  return stream(i, device);
}
// A small segment (2 MiB) cached for `s`: small requests for it hit the cache. A miss runs the allocator's free-memory
// callbacks, the helper's among them, which give idle kept blocks back: a case about keeping warms its streams.
inline void warm(aclrtStream s) {
  c10_npu::NPUCachingAllocator::raw_delete(c10_npu::NPUCachingAllocator::raw_alloc_with_stream(4096, s));
}
// While alive, `s` is the calling thread's current stream: what a wrapper launches on.
class OnStream {
 public:
  explicit OnStream(aclrtStream s) : before_(c10_npu::getCurrentNPUStream()) {
    for (const c10_npu::NPUStream &n : npu_streams())
      if (n.stream(false) == s) {
        c10_npu::setCurrentNPUStream(n);
        return;
      }
    throw Failure("not a stream of t::stream()");
  }
  OnStream(const OnStream &) = delete;
  OnStream &operator=(const OnStream &) = delete;
  ~OnStream() { c10_npu::setCurrentNPUStream(before_); }

 private:
  c10_npu::NPUStream before_;
};
inline void sync(aclrtStream s) {
  if (aclrtSynchronizeStream(s) != ACL_SUCCESS) throw Failure("aclrtSynchronizeStream failed");
}
// Waits until torch_npu's queue of the calling thread's device has run all it was given (a task of the test's
// own, last in it; with the queue off it runs at once). Queue thread id of that task: `*ran_on`.
inline void drain(long *ran_on = nullptr) {
  struct Done {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    long tid = 0;
  };
  auto d = std::make_shared<Done>();
  at_npu::native::OpCommand::RunOpApiV2("tnip_cpp_tests_drain", [d]() -> int {
    std::lock_guard<std::mutex> g(d->mu);
    d->done = true;
    d->tid = t::tid();
    d->cv.notify_all();
    return 0;
  });
  std::unique_lock<std::mutex> lk(d->mu);
  if (!d->cv.wait_for(lk, std::chrono::seconds(60), [&] { return d->done; }))
    throw Failure("torch_npu's task queue did not run the test's task within 60 s");
  if (ran_on != nullptr) *ran_on = d->tid;
}
// The queue drained, then the device synchronised.
inline void sync_all() {
  drain();
  if (aclrtSynchronizeDevice() != ACL_SUCCESS) throw Failure("aclrtSynchronizeDevice failed");
}
// Holds torch_npu's queue of the calling thread's device: a task of the test's own waits in it until open(),
// so the launches queued meanwhile run only after their calls returned (a busy device). With the queue off
// it holds nothing (on() false).
class QueueGate {
 public:
  QueueGate() : s_(std::make_shared<State>()) {
    auto s = s_;
    const long caller = tid();
    at_npu::native::OpCommand::RunOpApiV2("tnip_cpp_tests_gate", [s, caller]() -> int {
      std::unique_lock<std::mutex> lk(s->mu);
      s->reached = true;
      s->inline_ = t::tid() == caller;
      s->cv.notify_all();
      s->cv.wait(lk, [&] { return s->open || s->inline_; });
      return 0;
    });
    std::unique_lock<std::mutex> lk(s_->mu);
    if (!s_->cv.wait_for(lk, std::chrono::seconds(60), [&] { return s_->reached; }))
      throw Failure("torch_npu's queue thread did not reach the gate within 60 s");
  }
  ~QueueGate() { open(); }
  bool on() const { return !s_->inline_; }
  void open() {
    std::lock_guard<std::mutex> g(s_->mu);
    s_->open = true;
    s_->cv.notify_all();
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool reached = false, open = false, inline_ = false;
  };
  std::shared_ptr<State> s_;
};

inline uint64_t last_launch_id() { return acl_host_last_launch_id(); }

// Holds stream `s` (the double's stream hold, host_acl.h): what is queued on it afterwards waits until release(), or
// the end of the hold's scope (a failing case never leaves a stream held). For "a kernel has not finished yet" by
// construction, where a kernel's run time would only make it likely. The hold is a launch of the calling thread's:
// read its last launch id before holding. kLimitMs only bounds a hang (a case that never releases); release() says
// whether the hold was still in force then.
class StreamHold {
 public:
  static constexpr uint32_t kLimitMs = 60000;
  explicit StreamHold(aclrtStream s) : id_(acl_host_stream_hold(s, kLimitMs)) {
    if (id_ == 0) throw Failure("the host ACL library could not hold the stream");
  }
  StreamHold(const StreamHold &) = delete;
  StreamHold &operator=(const StreamHold &) = delete;
  ~StreamHold() {
    if (id_ != 0) acl_host_stream_release(id_);
  }
  void release() {
    const int held = acl_host_stream_release(id_);
    id_ = 0;
    if (held != 1) throw Failure("the stream hold let go by its limit before the case released it (a hang?)");
  }

 private:
  uint64_t id_;
};


}  // namespace t

#include "generated_launch.h"  // the launch of the generated shape, through torch_npu's OpCommand

#define CHECK_NO_SIM_ERRORS()                                                                       \
  do {                                                                                              \
    if (acl_host_error_count() != 0)                                                                \
      ::t::fail(__FILE__, __LINE__, "the host ACL library reported errors: " + ::t::errors_text()); \
  } while (0)
