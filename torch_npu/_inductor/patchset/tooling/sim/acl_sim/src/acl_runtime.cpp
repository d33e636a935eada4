// HOST SIMULATION of the ACL runtime subset used by torch-npu-inductor-patches
// (test double and dry-run tool; not CANN, runs no NPU code): the ACL core, which
// both the simulation (libacl_sim.a) and the host ACL library (../host/) are built
// from. torch_npu's stand-ins live in torch_npu_standins.cpp (simulation only).
// Semantics are documented in include/acl_sim/control.h.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "acl/acl.h"
#include "acl_sim/control.h"
#include "internal.h"
#include <cstdarg>
#include <unordered_map>

namespace acl_sim {
namespace {
using namespace internal;  // Api, kMaxDevices, AtomicCounters

thread_local uint64_t t_last_launch = 0;  // the calling thread's last launch id

// ---------------------------------------------------------------- counters
// Sharded per thread: each thread bumps its own shard with plain (relaxed)
// load + store, no locked instruction; counters() sums the shards, and
// reset_counters() records the sums as a baseline (shards are never written
// by other threads, and never freed, so counts of exited threads remain).
// The two lists are laid out by hand.
std::mutex g_shard_mu;
std::vector<AtomicCounters *> &shards() {
  static auto *v = new std::vector<AtomicCounters *>();
  return *v;
}
Counters g_counter_baseline;  // under g_shard_mu
thread_local AtomicCounters *t_shard = nullptr;
AtomicCounters &new_shard() {
  auto *c = new AtomicCounters();
  {
    std::lock_guard<std::mutex> g(g_shard_mu);
    shards().push_back(c);
  }
  t_shard = c;
  return *c;
}
inline AtomicCounters &C() {
  AtomicCounters *c = t_shard;
  return c != nullptr ? *c : new_shard();
}
std::atomic<int64_t> g_ca_live{0}, g_ca_peak{0};  // caching-allocator blocks held, all devices

// ---------------------------------------------------------------- errors
std::mutex g_err_mu;
std::vector<ErrorReport> &errs() {
  static auto *v = new std::vector<ErrorReport>();
  return *v;
}

// ---------------------------------------------------------------- faults
const char *const kApiNames[kApiCount] = {
    "aclrtMalloc", "aclrtFree", "aclrtMallocHost", "aclrtFreeHost", "aclrtMemcpy", "aclrtMemcpyAsync",
    "aclrtMemsetAsync", "aclrtCreateStream", "aclrtDestroyStream", "aclrtSynchronizeStream",
    "aclrtSynchronizeDevice", "aclrtCreateEvent", "aclrtDestroyEvent", "aclrtRecordEvent",
    "aclrtQueryEventStatus", "aclrtEventElapsedTime", "aclrtGetHardwareSyncAddr", "aclrtLaunchKernelWithHostArgs",
    "aclrtSetDevice", "aclrtGetDevice", "aclmdlRICaptureBegin", "aclmdlRICaptureGetInfo", "aclmdlRICaptureEnd",
    "aclmdlRIExecuteAsync", "aclmdlRIDestroy", "allocate_workspace", "raw_alloc_with_stream"};
struct Fault {
  uint64_t at;
  aclError code;
};
// "The nth call counted from now" only needs calls counted while a fault is
// armed: with none armed (the common case) a call costs one atomic load; with
// one armed, calls are counted and matched under the fault mutex.
struct Hook {
  uint64_t at;
  std::function<void()> fn;
};
std::mutex g_fault_mu;
uint64_t g_calls[kApiCount];  // under g_fault_mu
std::atomic<bool> g_faults_armed{false};
std::vector<Fault> g_faults[kApiCount];
std::vector<Hook> g_hooks[kApiCount];

// Pause points (control.h): armed by a thread for itself; state 0 armed, 1 stopped, 2 released, 3 let go.
struct Pause {
  std::string functions;  // ",a,b,"
  bool after;
  std::thread::id thread;
  uint32_t limit_ms;
  int state;
};
std::mutex g_pause_mu;
std::condition_variable g_pause_cv;
std::map<uint64_t, Pause> g_pauses;
uint64_t g_pause_next = 0;
thread_local int t_pauses_armed = 0;

}  // namespace
uint64_t arm_pause(const char *functions, bool after, uint32_t limit_ms) {
  std::lock_guard<std::mutex> g(g_pause_mu);
  const uint64_t id = ++g_pause_next;
  g_pauses[id] = Pause{"," + std::string(functions ? functions : "") + ",", after, std::this_thread::get_id(),
                       limit_ms, 0};
  ++t_pauses_armed;
  return id;
}
bool pause_reached(uint64_t id, uint32_t wait_ms) {
  std::unique_lock<std::mutex> lk(g_pause_mu);
  return g_pause_cv.wait_for(lk, std::chrono::milliseconds(wait_ms), [&] {
    auto it = g_pauses.find(id);
    return it != g_pauses.end() && it->second.state != 0;
  });
}
int release_pause(uint64_t id) {
  int n = 0;
  {
    std::lock_guard<std::mutex> g(g_pause_mu);
    for (auto &kv : g_pauses)
      if ((id == 0 || kv.first == id) && kv.second.state <= 1) kv.second.state = 2, ++n;
  }
  g_pause_cv.notify_all();
  return n;
}
void pause_point(const char *function, bool after) {
  if (t_pauses_armed == 0) return;
  const std::string name = "," + std::string(function) + ",";
  std::unique_lock<std::mutex> lk(g_pause_mu);
  for (auto &kv : g_pauses) {
    Pause &p = kv.second;
    if (p.state != 0 || p.thread != std::this_thread::get_id() || p.after != after ||
        p.functions.find(name) == std::string::npos)
      continue;
    --t_pauses_armed;
    p.state = 1;
    g_pause_cv.notify_all();
    if (!g_pause_cv.wait_for(lk, std::chrono::milliseconds(p.limit_ms), [&] { return p.state != 1; })) p.state = 3;
    g_pause_cv.notify_all();
    return;
  }
}
// The injected code of this call (0: none). A hook armed for it runs first,
// on this thread, outside the fault mutex; or is handed to the caller
// (`deferred`), who runs it where the call's documentation says.
namespace internal {
aclError fault(Api a, std::function<void()> *deferred) {
  if (t_pauses_armed != 0) pause_point(kApiNames[a], false);
  if (!g_faults_armed.load(std::memory_order_acquire)) return ACL_SUCCESS;
  aclError code = ACL_SUCCESS;
  std::function<void()> hook;
  {
    std::lock_guard<std::mutex> g(g_fault_mu);
    const uint64_t n = ++g_calls[a];
    for (const Fault &f : g_faults[a])
      if (f.at == n) code = f.code;
    for (Hook &h : g_hooks[a])
      if (h.at == n) hook = std::move(h.fn);
  }
  if (hook) {
    if (deferred != nullptr) {
      *deferred = std::move(hook);
    } else {
      hook();
    }
  }
  return code;
}
}  // namespace internal
namespace {

// ---------------------------------------------------------------- devices
std::atomic<int> g_device_count{8};
thread_local int t_device = -1;  // -1: never set, acts as device 0 (the simulation; see no_context)
inline int cur_device() { return t_device < 0 ? 0 : t_device; }
// CANN binds a context to a thread only (aclrtSetDevice retains the device's primary context and makes it current
// for the calling thread: src/runtime/api/impl/api_impl.cc:3445-3470, a thread-local reference,
// runtime/core/src/common/inner_thread_local.cpp:19-20). A thread that never set one has none: Runtime::CurrentContext
// finds no thread-local context and, without a default device from aclInit's configuration (acl/aclrt_impl/acl.cpp:
// 334-350, which torch_npu never sets), answers nullptr (runtime/core/src/runtime.cc:5397-5431); every call that
// needs it then fails with RT_ERROR_CONTEXT_NULL, ACL_ERROR_RT_CONTEXT_NULL to the caller (errcode_manage.cc:218).
// The host ACL library does the same for the calls listed at their definitions; the simulation (libacl_sim.a) keeps
// device 0 for such a thread (control.h).
inline bool no_context() {
#ifdef ACL_SIM_HOST_LIBRARY
  return t_device < 0;
#else
  return false;
#endif
}
// Set on a stream worker while it runs a kernel: checked accesses must be to this device's memory.
thread_local int t_kernel_device = -1;

// ---------------------------------------------------------------- device memory
constexpr size_t kArenaSize = size_t(64) << 30;
constexpr size_t kDevAlign = 512;
struct Arena {
  char *dev = nullptr;   // addresses handed out (PROT_NONE when memfd works)
  char *host = nullptr;  // the simulation's own view of the same bytes
  size_t next = 0;
  bool protected_view = false;
};
Arena &arena() {
  static Arena *a = [] {
    auto *r = new Arena();
    int fd = memfd_create("acl_sim_device", MFD_CLOEXEC);
    if (fd >= 0 && ftruncate(fd, static_cast<off_t>(kArenaSize)) == 0) {
      void *d = mmap(nullptr, kArenaSize, PROT_NONE, MAP_SHARED | MAP_NORESERVE, fd, 0);
      void *h = mmap(nullptr, kArenaSize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
      if (d != MAP_FAILED && h != MAP_FAILED) {
        r->dev = static_cast<char *>(d);
        r->host = static_cast<char *>(h);
        r->protected_view = true;
      }
    }
    if (!r->protected_view) {  // fallback: one view (host code could touch device memory)
      void *h = mmap(nullptr, kArenaSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (h == MAP_FAILED) {
        std::fprintf(stderr, "acl_sim: cannot reserve the device arena\n");
        std::abort();
      }
      r->dev = r->host = static_cast<char *>(h);
    }
    return r;
  }();
  return *a;
}

struct Alloc {
  uintptr_t base = 0;
  size_t size = 0;
  int device = 0;
  bool freed = false;
  bool block = false;  // allocator block
  std::vector<uint8_t> init;
};
std::mutex g_mem_mu;
std::map<uintptr_t, Alloc> &allocs() {
  static auto *m = new std::map<uintptr_t, Alloc>();
  return *m;
}
std::atomic<size_t> g_base_offset{0};
uint64_t g_capacity[kMaxDevices];  // under g_mem_mu; 0: unlimited
uint64_t g_in_use[kMaxDevices];    // under g_mem_mu: live bytes per device

char *host_view(uintptr_t dev) {
  Arena &a = arena();
  return a.host + (dev - reinterpret_cast<uintptr_t>(a.dev));
}
uintptr_t dev_alloc(size_t size, bool block, int device) {
  std::lock_guard<std::mutex> g(g_mem_mu);
  if (g_capacity[device] != 0 && (size > g_capacity[device] || g_in_use[device] > g_capacity[device] - size))
    return 0;  // the device is full
  Arena &a = arena();
  size_t off = g_base_offset.load();
  size_t start = (a.next + kDevAlign - 1) / kDevAlign * kDevAlign;
  if (start + off + size + kDevAlign > kArenaSize) return 0;
  uintptr_t base = reinterpret_cast<uintptr_t>(a.dev) + start + off;
  a.next = start + off + size + kDevAlign;  // a gap after each allocation
  Alloc al;
  al.base = base;
  al.size = size;
  al.block = block;
  al.device = device;
  al.init.assign(size, 0);
  allocs()[base] = std::move(al);
  g_in_use[device] += size;
  C().device_allocs++;
  if (!block) C().live_device_allocs++;
  return base;
}

bool dev_free(uintptr_t p, bool block) {
  std::lock_guard<std::mutex> g(g_mem_mu);
  auto it = allocs().find(p);
  if (it == allocs().end() || it->second.freed || it->second.block != block) return false;
  Alloc &al = it->second;
  al.freed = true;
  g_in_use[al.device] -= al.size;
  char *h = host_view(al.base);
  if (al.size <= (size_t(4) << 20)) {
    std::memset(h, 0xDD, al.size);  // poison
  } else {
    // Large: give the pages back (reads would see zeros, but every access
    // through the sim is flagged as use-after-free before touching bytes).
    size_t lo = (reinterpret_cast<uintptr_t>(h) + 4095) & ~uintptr_t(4095);
    size_t hi = (reinterpret_cast<uintptr_t>(h) + al.size) & ~uintptr_t(4095);
    if (hi > lo) madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_REMOVE);
  }
  std::vector<uint8_t>().swap(al.init);
  C().device_frees++;
  if (!block) C().live_device_allocs--;
  return true;
}

// Requires g_mem_mu. The allocation record whose [base, base + size) holds p (live or freed), or nullptr.
Alloc *find_locked(uintptr_t p) {
  auto &m = allocs();
  auto it = m.upper_bound(p);
  if (it == m.begin()) return nullptr;
  --it;
  return p < it->second.base + it->second.size ? &it->second : nullptr;
}

// Requires g_mem_mu. Returns the allocation if the access is fine.
Alloc *check_locked(uintptr_t p, size_t n, bool write, const char *who) {
  char buf[256];
  auto &m = allocs();
  auto it = m.upper_bound(p);
  if (it == m.begin()) {
    std::snprintf(buf, sizeof buf, "%s: %s of %zu bytes at %#lx: not in any device allocation", who,
                  write ? "write" : "read", n, static_cast<unsigned long>(p));
    internal::report(ErrorKind::kOutOfBounds, buf);
    return nullptr;
  }
  --it;
  Alloc &al = it->second;
  if (p >= al.base + al.size) {
    std::snprintf(buf, sizeof buf, "%s: %s of %zu bytes at %#lx: not in any device allocation", who,
                  write ? "write" : "read", n, static_cast<unsigned long>(p));
    internal::report(ErrorKind::kOutOfBounds, buf);
    return nullptr;
  }
  if (al.freed) {
    std::snprintf(buf, sizeof buf, "%s: %s of %zu bytes at %#lx: use after free of allocation [%#lx, +%zu)", who,
                  write ? "write" : "read", n, static_cast<unsigned long>(p), static_cast<unsigned long>(al.base),
                  al.size);
    internal::report(ErrorKind::kUseAfterFree, buf);
    return nullptr;
  }
  if (t_kernel_device >= 0 && al.device != t_kernel_device) {
    std::snprintf(buf, sizeof buf, "%s: %s of %zu bytes at %#lx: memory of device %d used by a kernel on device %d",
                  who, write ? "write" : "read", n, static_cast<unsigned long>(p), al.device, t_kernel_device);
    internal::report(ErrorKind::kCrossDevice, buf);
    return nullptr;
  }
  if (p + n > al.base + al.size || p + n < p) {
    std::snprintf(buf, sizeof buf, "%s: %s of %zu bytes at %#lx: exceeds allocation [%#lx, +%zu)", who,
                  write ? "write" : "read", n, static_cast<unsigned long>(p), static_cast<unsigned long>(al.base),
                  al.size);
    internal::report(ErrorKind::kOutOfBounds, buf);
    return nullptr;
  }
  if (!write) {
    size_t off = p - al.base;
    auto b = al.init.begin() + static_cast<ptrdiff_t>(off);
    auto bad = std::find(b, b + static_cast<ptrdiff_t>(n), uint8_t(0));
    if (bad != b + static_cast<ptrdiff_t>(n)) {
      std::snprintf(buf, sizeof buf, "%s: read of %zu bytes at %#lx: byte at offset %zu is uninitialised", who, n,
                    static_cast<unsigned long>(p), static_cast<size_t>(bad - b));
      internal::report(ErrorKind::kUninitialisedRead, buf);
      return nullptr;
    }
  }
  return &al;
}

void mark_init_locked(Alloc *al, uintptr_t p, size_t n) {
  size_t off = p - al->base;
  std::fill(al->init.begin() + static_cast<ptrdiff_t>(off), al->init.begin() + static_cast<ptrdiff_t>(off + n),
            uint8_t(1));
}

bool dev_write(uintptr_t p, const void *src, size_t n, const char *who) {
  std::lock_guard<std::mutex> g(g_mem_mu);
  Alloc *al = check_locked(p, n, true, who);
  if (!al) return false;
  std::memcpy(host_view(p), src, n);
  mark_init_locked(al, p, n);
  return true;
}
bool dev_fill(uintptr_t p, uint8_t v, size_t n, const char *who) {
  std::lock_guard<std::mutex> g(g_mem_mu);
  Alloc *al = check_locked(p, n, true, who);
  if (!al) return false;
  std::memset(host_view(p), v, n);
  mark_init_locked(al, p, n);
  return true;
}
bool dev_read(uintptr_t p, void *dst, size_t n, const char *who) {
  std::lock_guard<std::mutex> g(g_mem_mu);
  if (!check_locked(p, n, false, who)) return false;
  std::memcpy(dst, host_view(p), n);
  return true;
}

// ---------------------------------------------------------------- running kernels
struct Held {
  uint64_t launch_id;
  std::string kernel;
  aclrtStream stream;
  uintptr_t lo;
  uint64_t n;
  const char *what;
};
std::mutex g_run_mu;
std::vector<Held> &running() {
  static auto *v = new std::vector<Held>();
  return *v;
}
// A copy or memset (stream == writer, or host when is_host) writes [p, p+n):
// report if that lands in a region a kernel running elsewhere holds.
void check_write_vs_running(uintptr_t p, size_t n, aclrtStream writer, bool is_host, const char *who) {
  std::lock_guard<std::mutex> g(g_run_mu);
  for (const Held &h : running()) {
    if (!is_host && h.stream == writer) continue;
    if (p < h.lo + h.n && h.lo < p + n) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s wrote [%#lx, +%zu) inside the %s region of running kernel '%s' (launch %lu)",
                    who, static_cast<unsigned long>(p), n, h.what, h.kernel.c_str(),
                    static_cast<unsigned long>(h.launch_id));
      internal::report(ErrorKind::kOverlapWithRunningKernel, buf);
    }
  }
}

// ---------------------------------------------------------------- streams
// Fixed-size task record: what a queued copy, memset or launch needs (no
// std::function, no per-task heap allocation unless a launch's argument bytes
// exceed kInlineArgs).
struct Kernel;
enum class TaskKind : uint8_t { kPinnedCopy, kCopy, kMemset, kLaunch, kWaitEvent, kRecord };
constexpr size_t kInlineArgs = 192;
struct Task {
  TaskKind kind;
  aclrtMemcpyKind copy_kind;
  uint8_t value;          // memset
  uint32_t block_dim;     // launch
  aclrtStream stream;     // the handle the caller passed (writer identity / KernelCall::stream)
  void *dst;              // copy / memset
  const void *src;        // copy
  size_t count;           // copy / memset bytes; launch: argument bytes
  uint64_t id;            // pinned copy: page-locked buffer id; launch: launch id
  uint64_t origin;        // replayed task: launch -> the captured launch id; copy -> the model id (else 0)
  uint64_t req_seq;       // launch: last allocate_workspace request when issued
  int device;             // the stream's device
  Kernel *kernel;         // launch
  uint8_t *heap_args;     // launch: argument bytes beyond kInlineArgs (else nullptr)
  alignas(16) uint8_t args[kInlineArgs];
};
void run_task(const Task &t);

// One worker per stream; the queue is a growable ring of Task records under
// the stream's mutex. The worker takes the mutex once per task (completion
// of the previous one + pop of the next); producers notify only when the
// worker sleeps, and the worker notifies only when someone waits for it.
struct Model;
struct Event;
struct Capture {
  Model *model = nullptr;
  aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE;
  aclmdlRICaptureMode mode = ACL_MODEL_RI_CAPTURE_MODE_GLOBAL;
  std::thread::id thread;
};
// aclrtCreateStreamWithConfig's flags the double acts on (CANN's acl_rt.h; the ACL layer turns them into the runtime's
// RT_STREAM_PERSISTENT and RT_STREAM_CP_PROCESS_USE, acl/aclrt_impl/stream.cpp:53-92).
constexpr uint32_t kStreamPersistent = 0x04, kStreamDeviceUseOnly = 0x20;
struct Stream {
  std::mutex mu;
  int device = 0;
  uint32_t flags = 0;  // ACL stream flags (aclrtCreateStreamWithConfig); never changed after creation
  Capture *capture = nullptr;  // under mu
  std::condition_variable cv, idle_cv;
  std::vector<Task> ring;  // capacity a power of two
  uint64_t head = 0, tail = 0;
  uint64_t enqueued = 0, completed = 0;
  // The furthest queue position a host synchronisation (of the event, the stream or the device) waited
  // for: a record up to it is known complete to the host (see aclrtQueryEventStatus).
  uint64_t host_seen = 0;
  bool stop = false, sleeping = false;
  int idle_waiters = 0;
  // Events recorded while work was queued, not reached yet, in queue order (their targets ascend).
  Event *stamps_head = nullptr, *stamps_tail = nullptr;
  std::thread th;
  // Read by every API call on the calling thread: kept off the cache lines
  // the worker writes per task (above), so a call does not miss on them.
  alignas(64) std::atomic<bool> destroyed{false};
  Stream() : ring(256) {}
};
std::mutex g_streams_mu;
std::set<Stream *> &streams() {
  static auto *s = new std::set<Stream *>();
  return *s;
}
std::atomic<Stream *> g_default_stream[kMaxDevices];
// Streams per device (under g_streams_mu). CANN's runtime gives the 910B (the chip the double reports) 2038
// physical streams (maxPhysicalStreamNum, src/runtime/config/910_B_93/dev_info_reg.cc:255, what
// rtGetMaxStreamAndTask answers, api_impl.cc:1849-1876); the stream ids themselves come from the driver
// (npu_driver_res.cc:1248-1285), which CANN's aclrtCreateStream page bounds at 2048 on the A2 training products,
// less the default stream and the runtime's internal ones. The double counts the device's default stream (made by
// aclrtSetDevice in CANN, lazily here) among the 2038 and refuses the next creation with
// ACL_ERROR_RT_NO_STREAM_RESOURCE (the driver's no-stream-resource code, errcode_manage.cc:94).
constexpr uint32_t kDefaultStreamLimit = 2038;
uint32_t g_stream_limit[kMaxDevices];   // 0: kDefaultStreamLimit
uint32_t g_created_streams[kMaxDevices];  // live streams aclrtCreateStream* made (the default one not counted)

// A captured model: the tasks recorded on a capturing stream (argument bytes
// owned here), replayed by aclmdlRIExecuteAsync.
struct Model {
  uint64_t id = 0;  // also the id of the capture's private memory pool
  int device = 0;
  bool complete = false;  // capture ended successfully
  std::vector<Task> tasks;
  std::vector<std::unique_ptr<uint8_t[]>> args;  // heap argument bytes of captured launches
};
std::mutex g_model_mu;
std::set<Model *> &models() {
  static auto *s = new std::set<Model *>();
  return *s;
}
std::atomic<uint64_t> g_model_ids{0};

void stamp_reached_locked(Stream *s);

void worker(Stream *s) {
  Task t;
  bool have = false;
  std::unique_lock<std::mutex> l(s->mu);
  for (;;) {
    if (have) {
      s->completed++;
      if (s->stamps_head != nullptr) stamp_reached_locked(s);
      if (s->idle_waiters != 0) s->idle_cv.notify_all();
      if (t.heap_args != nullptr) {
        delete[] t.heap_args;
      }
      have = false;
    }
    while (!s->stop && s->head == s->tail) {
      s->sleeping = true;
      s->cv.wait(l);
      s->sleeping = false;
    }
    if (s->head == s->tail) return;
    t = s->ring[s->head & (s->ring.size() - 1)];
    s->head++;
    have = true;
    l.unlock();
    run_task(t);
    l.lock();
  }
}

#ifndef ACL_ERROR_RT_NO_STREAM_RESOURCE
#define ACL_ERROR_RT_NO_STREAM_RESOURCE 207008  // CANN's rt_error_codes.h (the simulation's header lacks it)
#endif
// A stream aclrtCreateStream / aclrtCreateStreamWithConfig asked for, on the current device; nullptr when the device
// has no stream left (its default stream counted: kDefaultStreamLimit).
Stream *new_stream(uint32_t flags) {
  const int dev = cur_device();
  {
    std::lock_guard<std::mutex> g(g_streams_mu);
    const uint32_t limit = g_stream_limit[dev] != 0 ? g_stream_limit[dev] : kDefaultStreamLimit;
    if (g_created_streams[dev] + 2 > limit) return nullptr;  // + the default stream + this one
    g_created_streams[dev]++;
  }
  auto *s = new Stream();
  s->device = dev;
  s->flags = flags;
  s->th = std::thread(worker, s);
  std::lock_guard<std::mutex> g(g_streams_mu);
  streams().insert(s);
  return s;
}

// Streams are never deleted (destroyed ones are kept to detect stale handles),
// so a handle once found in the registry stays a valid Stream object: each
// thread remembers a few, and only re-checks `destroyed`.
constexpr int kStreamMemo = 8;
thread_local Stream *t_known_streams[kStreamMemo];
thread_local unsigned t_known_next = 0;

// Registry path (default stream, or a handle this thread has not memoised yet).
__attribute__((noinline)) Stream *get_stream_slow(aclrtStream h) {
  if (h == nullptr) {
    const int dev = cur_device();
    Stream *d = g_default_stream[dev].load(std::memory_order_acquire);
    if (d != nullptr) return d;
    std::lock_guard<std::mutex> g(g_streams_mu);
    d = g_default_stream[dev].load(std::memory_order_relaxed);
    if (d == nullptr) {
      d = new Stream();
      d->device = dev;
      d->th = std::thread(worker, d);
      streams().insert(d);
      g_default_stream[dev].store(d, std::memory_order_release);
    }
    return d;
  }
  auto *s = static_cast<Stream *>(h);
  for (Stream *k : t_known_streams)
    if (k == s) return s->destroyed.load(std::memory_order_acquire) ? nullptr : s;
  {
    std::lock_guard<std::mutex> g(g_streams_mu);
    if (!streams().count(s)) return nullptr;
  }
  t_known_streams[t_known_next++ % kStreamMemo] = s;
  return s->destroyed.load(std::memory_order_acquire) ? nullptr : s;
}
// Per-call path: a memoised handle only re-checks `destroyed` (inlined into
// every API entry point; the registry lookup stays out of line).
inline __attribute__((always_inline)) Stream *get_stream(aclrtStream h) {
  if (h != nullptr) {
    auto *s = static_cast<Stream *>(h);
    for (Stream *k : t_known_streams)
      if (k == s) return s->destroyed.load(std::memory_order_acquire) ? nullptr : s;
  }
  return get_stream_slow(h);
}

void report_invalidated(Stream *s, const char *why);

// Requires s->mu. Marks the stream's capture invalidated (reported once).
void invalidate_locked(Stream *s, const char *why) {
  if (s->capture == nullptr || s->capture->status == ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED) return;
  s->capture->status = ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED;
  C().captures_invalidated++;
  report_invalidated(s, why);
}

// Result of offering a task to a stream.
enum class Submit { kQueued, kCaptured, kInvalidated };

// Requires s->mu. Appends a task (filled by `fill` in place) to the stream's queue; returns its queue
// position. `*wake`: the caller notifies s->cv once it released the mutex.
template <class F>
uint64_t push_locked(Stream *s, F &&fill, bool *wake) {
  if (s->tail - s->head == s->ring.size()) {  // full: double, keeping order
    std::vector<Task> bigger(s->ring.size() * 2);
    const size_t mask = s->ring.size() - 1;
    for (uint64_t i = s->head; i != s->tail; ++i) bigger[i - s->head] = s->ring[i & mask];
    s->tail -= s->head;
    s->head = 0;
    s->ring.swap(bigger);
  }
  Task &t = s->ring[s->tail & (s->ring.size() - 1)];
  t.origin = 0;
  t.req_seq = 0;
  fill(t);
  t.device = s->device;
  s->tail++;
  // One notification per sleep: the worker sets `sleeping` again (under mu)
  // before it waits again, so back-to-back tasks (e.g. lock init + launch)
  // do not each pay for a wake-up.
  *wake = s->sleeping;
  s->sleeping = false;
  return ++s->enqueued;
}

// Appends a task (filled by `fill` in place, under the stream mutex) to the
// stream's queue, or to its capture; returns the queue position (0 if not queued).
template <class F>
uint64_t enqueue(Stream *s, F &&fill, Submit *how = nullptr) {
  uint64_t seq;
  bool wake;
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (s->capture != nullptr) {
      if (s->capture->status != ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE) {
        if (how != nullptr) *how = Submit::kInvalidated;
        Task t;
        t.heap_args = nullptr;
        fill(t);
        if (t.heap_args != nullptr) {
          delete[] t.heap_args;
        }
        return 0;
      }
      Model *m = s->capture->model;
      m->tasks.emplace_back();
      Task &t = m->tasks.back();
      t.origin = 0;
      t.req_seq = 0;
      fill(t);
      t.device = s->device;
      if (t.heap_args != nullptr) {
        m->args.emplace_back(t.heap_args);  // owned by the model from now on
      }
      C().captured_tasks++;
      if (how != nullptr) *how = Submit::kCaptured;
      return 0;
    }
    if (how != nullptr) *how = Submit::kQueued;
    seq = push_locked(s, fill, &wake);
  }
  if (wake) s->cv.notify_one();
  return seq;
}
// Waits until the stream ran its first `seq` tasks; false if `deadline` (when given) passed first.
// `host_sync`: the wait is a host synchronisation (aclrtSynchronizeEvent / Stream / Device), which makes
// the records it covers known complete.
using Deadline = std::chrono::steady_clock::time_point;
bool wait_until(Stream *s, uint64_t seq, bool host_sync, const Deadline *deadline = nullptr) {
  std::unique_lock<std::mutex> l(s->mu);
  s->idle_waiters++;
  const auto reached = [&] { return s->completed >= seq; };
  const bool ok =
      deadline == nullptr ? (s->idle_cv.wait(l, reached), true) : s->idle_cv.wait_until(l, *deadline, reached);
  s->idle_waiters--;
  if (ok && host_sync && seq > s->host_seen) s->host_seen = seq;
  return ok;
}
bool wait_idle(Stream *s, bool host_sync, const Deadline *deadline = nullptr) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> l(s->mu);
    seq = s->enqueued;
  }
  return wait_until(s, seq, host_sync, deadline);
}
// Waits for every stream of `device` (-1: all devices); false if `deadline` passed first.
bool sync_all_streams(int device, bool host_sync, const Deadline *deadline = nullptr) {
  std::vector<Stream *> all;
  {
    std::lock_guard<std::mutex> g(g_streams_mu);
    for (Stream *s : streams())
      if (!s->destroyed && (device < 0 || s->device == device)) all.push_back(s);
  }
  for (Stream *s : all)
    if (!wait_idle(s, host_sync, deadline)) return false;
  return true;
}
// A synchronisation's timeout in milliseconds (-1: none) as a deadline, or nullptr.
const Deadline *deadline_after(int32_t timeout_ms, Deadline *storage) {
  if (timeout_ms < 0) return nullptr;
  *storage = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  return storage;
}
// A device-wide synchronising call on `device`: invalidates every capture
// on that device (only those begun in GLOBAL mode, or by this thread, when
// `global_only`). Returns true when one was active (the call must fail then).
bool invalidate_captures_on(int device, const char *why, bool global_only) {
  std::vector<Stream *> all;
  {
    std::lock_guard<std::mutex> g(g_streams_mu);
    for (Stream *s : streams())
      if (!s->destroyed && s->device == device) all.push_back(s);
  }
  bool hit = false;
  for (Stream *s : all) {
    std::lock_guard<std::mutex> l(s->mu);
    if (s->capture == nullptr || s->capture->status != ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE) continue;
    if (global_only && s->capture->mode != ACL_MODEL_RI_CAPTURE_MODE_GLOBAL &&
        !(s->capture->mode == ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL && s->capture->thread == std::this_thread::get_id()))
      continue;
    invalidate_locked(s, why);
    hit = true;
  }
  return hit;
}

// Capture state of a stream (NONE when not capturing).
aclmdlRICaptureStatus capture_status(Stream *s) {
  std::lock_guard<std::mutex> l(s->mu);
  return s->capture == nullptr ? ACL_MODEL_RI_CAPTURE_STATUS_NONE : s->capture->status;
}

// ---------------------------------------------------------------- pinned memory
struct Pinned {
  size_t size;
  uint64_t id;
};
std::mutex g_pin_mu;
std::map<uintptr_t, Pinned> &pinned() {
  static auto *m = new std::map<uintptr_t, Pinned>();
  return *m;
}
uint64_t g_pin_next_id = 0;
std::atomic<uint64_t> g_pin_gen{0};  // bumped (under g_pin_mu) by every aclrtMallocHost / aclrtFreeHost

// Requires g_pin_mu. Id of the live pinned buffer containing [p, p+n), or 0.
uint64_t pinned_id_locked(uintptr_t p, size_t n, uintptr_t *base = nullptr, size_t *size = nullptr) {
  auto &m = pinned();
  auto it = m.upper_bound(p);
  if (it == m.begin()) return 0;
  --it;
  if (p + n <= it->first + it->second.size && p + n >= p) {
    if (base != nullptr) *base = it->first;
    if (size != nullptr) *size = it->second.size;
    return it->second.id;
  }
  return 0;
}

// Host-side "is this source page-locked?" at call time. A per-thread memo of
// the last buffer found is valid while no pinned buffer was allocated or
// freed since (generation unchanged); otherwise the registry is searched.
struct PinMemo {
  uintptr_t base;
  size_t size;
  uint64_t id;
  uint64_t gen;
};
thread_local PinMemo t_pin_memo{0, 0, 0, 0};
uint64_t pinned_id_now(uintptr_t p, size_t n) {
  PinMemo &m = t_pin_memo;
  if (m.id != 0 && m.gen == g_pin_gen.load(std::memory_order_acquire) && p >= m.base && p + n >= p &&
      p + n <= m.base + m.size)
    return m.id;
  std::lock_guard<std::mutex> g(g_pin_mu);
  uintptr_t base = 0;
  size_t size = 0;
  const uint64_t id = pinned_id_locked(p, n, &base, &size);
  if (id != 0) m = PinMemo{base, size, id, g_pin_gen.load(std::memory_order_relaxed)};
  return id;
}

// ---------------------------------------------------------------- events
// An event's last record: a task on its stream (CANN: Event::Record submits an EVENT_RECORD task,
// src/runtime/core/src/event/event.cc:533,560), and its queue position. When the stream's worker
// has run it, the event is stamped with that moment (aclrtEventElapsedTime reads the stamps); until
// then it waits in the stream's list, linked through the event itself (no allocation per record).
// `fresh`: no query has answered for this record yet and no host synchronisation covered it; the
// first query then answers NOT_READY whatever the worker did meanwhile (aclrtQueryEventStatus says
// why). Under g_ev_mu: the record and `fresh`; under s->mu: the stamp and the list.
// CANN's event flag bits (pkg_inc/runtime/runtime/event.h:56-63): ACL_EVENT_SYNC is DDSYNC_NS,
// ACL_EVENT_CAPTURE_STREAM_PROGRESS is STREAM_MARK; aclrtCreateEvent makes RT_EVENT_DEFAULT.
constexpr uint32_t kEvDdsyncNs = 0x01, kEvStreamMark = 0x02, kEvDdsync = 0x04, kEvTimeLine = 0x08, kEvMc2 = 0x10,
                   kEvExternal = 0x20, kEvIpc = 0x40;
constexpr uint32_t kEvDefault = kEvDdsync | kEvTimeLine | kEvStreamMark;
// An event another stream can wait for; only those take one of the device's event ids (CANN:
// IsEventWithoutWaitTask, src/runtime/core/inc/event/event.hpp:133-136; no id on a STARS device such as the
// Ascend910B the double reports, event.cc:441-445).
bool waitable(uint32_t flag) { return (flag & (kEvDdsync | kEvDdsyncNs | kEvExternal | kEvIpc)) != 0; }
struct Event {
  Stream *s = nullptr;
  uint64_t target = 0;
  int device = 0;
  int64_t stamp_ns = -1;  // steady clock; -1: not reached yet
  bool pending = false;   // in s's list
  bool fresh = false;
  uint32_t flag = kEvDefault;
  bool ex = false;        // made by aclrtCreateEventExWithFlag (CANN's "new mode")
  bool holds_id = false;  // holds one of its device's event ids as its own (until destroyed)
  Event *prev = nullptr, *next = nullptr;
};
std::mutex g_ev_mu;
std::set<Event *> &events() {
  static auto *s = new std::set<Event *>();
  return *s;
}

// A device's event ids (under g_ev_mu). CANN (event.cc): aclrtCreateEvent's event takes a new id at every
// record and lets the previous one go once that record was reached (:536-546, :380-391, :109-124, :191-231);
// aclrtCreateEventWithFlag with a waitable flag other than the default takes one at creation and keeps it
// (:457-481, api_impl.cc:2062-2067); aclrtCreateEventExWithFlag's waitable event takes one per record, given
// back when that record is reached; a destroyed event's ids go back once its records are reached
// (event_task.cc:165-187). CANN's documentation gives 65535 per device (A2 training products); at the limit
// the runtime retries, reclaiming finished tasks, and on a device without a task thread gives up after 1000
// tries with ACL_ERROR_RT_NO_EVENT_RESOURCE (event.cc:401-427). The double gives up at once.
constexpr uint32_t kDefaultEventIds = 65535;
uint32_t g_ev_limit[kMaxDevices];    // 0: kDefaultEventIds
uint32_t g_ev_holders[kMaxDevices];  // events holding an id of their own
// Records holding an id until they are reached.
std::vector<std::pair<Stream *, uint64_t>> &ev_pending_ids(int device) {
  static auto *v = new std::vector<std::pair<Stream *, uint64_t>>[kMaxDevices];
  return v[device];
}
uint32_t ev_limit(int device) { return g_ev_limit[device] != 0 ? g_ev_limit[device] : kDefaultEventIds; }
// Requires g_ev_mu and no stream mutex. The ids of `device` in use now (records reached give theirs back).
uint32_t ev_ids_in_use(int device) {
  auto &v = ev_pending_ids(device);
  v.erase(std::remove_if(v.begin(), v.end(),
                         [](const std::pair<Stream *, uint64_t> &r) {
                           std::lock_guard<std::mutex> l(r.first->mu);
                           return r.first->completed >= r.second;
                         }),
          v.end());
  return g_ev_holders[device] + static_cast<uint32_t>(v.size());
}
// Which ids a record of `ev` takes: one per record (aclrtCreateEvent's, and ExWithFlag's waitable ones).
bool id_per_record(const Event *ev) { return waitable(ev->flag) && (ev->ex || ev->flag == kEvDefault); }
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
// Requires ev->s->mu.
void unlink_stamp_locked(Event *ev) {
  Stream *s = ev->s;
  (ev->prev != nullptr ? ev->prev->next : s->stamps_head) = ev->next;
  (ev->next != nullptr ? ev->next->prev : s->stamps_tail) = ev->prev;
  ev->prev = ev->next = nullptr;
  ev->pending = false;
}
// Requires g_ev_mu. Takes the event out of its stream's list (a new record, or its destruction).
void drop_stamp(Event *ev) {
  if (ev->s == nullptr) return;
  std::lock_guard<std::mutex> l(ev->s->mu);
  if (ev->pending) unlink_stamp_locked(ev);
}
// Requires s->mu (the worker, after a task): stamps the events the stream has now reached.
void stamp_reached_locked(Stream *s) {
  const int64_t now = now_ns();
  while (s->stamps_head != nullptr && s->stamps_head->target <= s->completed) {
    Event *ev = s->stamps_head;
    ev->stamp_ns = now;
    unlink_stamp_locked(ev);
  }
}

// ---------------------------------------------------------------- kernels
struct Kernel {
  std::string name;
  KernelFn fn;
  void *user;
};
std::mutex g_kern_mu;
std::set<Kernel *> &kernels() {
  static auto *s = new std::set<Kernel *>();
  return *s;
}
std::atomic<uint64_t> g_launch_ids{0};
// Kernels are never unregistered: a handle once found stays valid.
constexpr int kKernelMemo = 8;
thread_local Kernel *t_known_kernels[kKernelMemo];
thread_local unsigned t_known_kernel_next = 0;
bool kernel_known(Kernel *k) {
  for (Kernel *x : t_known_kernels)
    if (x == k && k != nullptr) return true;
  {
    std::lock_guard<std::mutex> g(g_kern_mu);
    if (!kernels().count(k)) return false;
  }
  t_known_kernels[t_known_kernel_next++ % kKernelMemo] = k;
  return true;
}

uintptr_t hw_sync_addr() {
  static uintptr_t a = [] {
    uintptr_t p = dev_alloc(64, false, 0);
    static const char zeros[64] = {};
    dev_write(p, zeros, 64, "hardware sync init");
    C().live_device_allocs--;  // not a user allocation
    C().device_allocs--;
    return p;
  }();
  return a;
}

// Performs one copy between host and device memory right now, with checks.
aclError do_copy(void *dst, const void *src, size_t count, aclrtMemcpyKind kind, aclrtStream writer, bool is_host,
                 const char *who) {
  auto d = reinterpret_cast<uintptr_t>(dst);
  auto s = reinterpret_cast<uintptr_t>(src);
  switch (kind) {
    case ACL_MEMCPY_HOST_TO_HOST:
      std::memcpy(dst, src, count);
      return ACL_SUCCESS;
    case ACL_MEMCPY_HOST_TO_DEVICE:
      check_write_vs_running(d, count, writer, is_host, who);
      dev_write(d, src, count, who);
      return ACL_SUCCESS;
    case ACL_MEMCPY_DEVICE_TO_HOST:
      dev_read(s, dst, count, who);
      return ACL_SUCCESS;
    case ACL_MEMCPY_DEVICE_TO_DEVICE: {
      std::vector<uint8_t> tmp(count);
      check_write_vs_running(d, count, writer, is_host, who);
      if (dev_read(s, tmp.data(), count, who)) dev_write(d, tmp.data(), count, who);
      return ACL_SUCCESS;
    }
  }
  return ACL_ERROR_INVALID_PARAM;
}

// Runs one queued task on its stream's worker thread.
void run_task(const Task &t) {
  switch (t.kind) {
    case TaskKind::kPinnedCopy: {
      auto hs = reinterpret_cast<uintptr_t>(t.copy_kind == ACL_MEMCPY_DEVICE_TO_HOST ? t.dst : t.src);
      std::lock_guard<std::mutex> g(g_pin_mu);  // the pinned buffer cannot be freed mid-copy
      if (pinned_id_locked(hs, t.count) != t.id) {
        char buf[240];
        if (t.origin != 0) {
          C().stale_replay_sources++;
          std::snprintf(buf, sizeof buf,
                        "replay of captured model %lu: its aclrtMemcpyAsync re-reads page-locked host buffer %#lx "
                        "(%zu bytes), freed after the capture",
                        static_cast<unsigned long>(t.origin), static_cast<unsigned long>(hs), t.count);
        } else {
          std::snprintf(buf, sizeof buf,
                        "aclrtMemcpyAsync: page-locked host buffer %#lx (%zu bytes) was freed before the queued copy ran",
                        static_cast<unsigned long>(hs), t.count);
        }
        internal::report(ErrorKind::kStalePinnedSource, buf);
        return;
      }
      do_copy(t.dst, t.src, t.count, t.copy_kind, t.stream, false, "aclrtMemcpyAsync");
      return;
    }
    case TaskKind::kCopy:
      do_copy(t.dst, t.src, t.count, t.copy_kind, t.stream, false, "aclrtMemcpyAsync");
      return;
    case TaskKind::kMemset: {
      auto p = reinterpret_cast<uintptr_t>(t.dst);
      check_write_vs_running(p, t.count, t.stream, false, "aclrtMemsetAsync");
      dev_fill(p, t.value, t.count, "aclrtMemsetAsync");
      return;
    }
    case TaskKind::kLaunch: {
      const void *args = t.heap_args != nullptr ? static_cast<const void *>(t.heap_args) : t.args;
      t_kernel_device = t.device;
      for (uint32_t b = 0; b < t.block_dim; ++b) {
        KernelCall call{args, t.count, t.block_dim, b, t.id, t.stream, t.kernel->user, t.device, t.req_seq, t.origin};
        t.kernel->fn(call);
      }
      t_kernel_device = -1;
      return;
    }
    case TaskKind::kWaitEvent:  // aclrtStreamWaitEvent (host library): `dst` waited-for stream, `id` its position
      wait_until(static_cast<Stream *>(t.dst), t.id, false);
      return;
    case TaskKind::kRecord:  // aclrtRecordEvent: reaching it is all it does (the worker stamps the event)
      return;
  }
}


void report_invalidated(Stream *s, const char *why) {
  char buf[240];
  std::snprintf(buf, sizeof buf, "graph capture on stream %p (device %d) invalidated: %s", static_cast<void *>(s),
                s->device, why);
  internal::report(ErrorKind::kCaptureInvalidated, buf);
}

// ---------------------------------------------------------------- workspace requests
// Every allocate_workspace request's extent, per block, so that a kernel's
// pointer can be mapped to the request it came from (the block itself is
// larger: rounded up to 2 MiB). A block keeps its last kReqHistory requests:
// enough for every launch a benchmark keeps in flight on one stream (fewer
// made a queued kernel's request unknown, reported as an overrun).
struct Req {
  uint64_t seq;
  uint64_t size;
};
constexpr size_t kReqHistory = size_t(1) << 17;
std::mutex g_req_mu;
std::unordered_map<uintptr_t, std::deque<Req>> &req_history() {
  static auto *m = new std::unordered_map<uintptr_t, std::deque<Req>>();
  return *m;
}
std::atomic<uint64_t> g_req_seq{0};
void note_request(uintptr_t block, uint64_t size) {
  std::lock_guard<std::mutex> g(g_req_mu);
  auto &d = req_history()[block];
  d.push_back(Req{g_req_seq.fetch_add(1, std::memory_order_relaxed) + 1, size});
  if (d.size() > kReqHistory) d.pop_front();
}

// ---------------------------------------------------------------- aclAppLog
std::mutex g_log_mu;
std::vector<AppLog> &logs() {
  static auto *v = new std::vector<AppLog>();
  return *v;
}

// The torch_npu stand-ins' hooks (set_standin_hooks); none in the host library.
std::atomic<void (*)()> g_standin_reset{nullptr};
std::atomic<void (*)(int, uint64_t)> g_standin_model_released{nullptr};
void model_released(int device, uint64_t id) {
  if (auto *f = g_standin_model_released.load(std::memory_order_acquire)) f(device, id);
}
}  // namespace

// ================================================================ internal API
namespace internal {

void report(ErrorKind kind, const std::string &message) {
  std::lock_guard<std::mutex> g(g_err_mu);
  errs().push_back(ErrorReport{kind, message});
  C().errors++;
}

int hold_region(uint64_t launch_id, const std::string &kernel, aclrtStream stream, uintptr_t lo, uint64_t n,
                const char *what) {
  if (n == 0) return 0;
  std::lock_guard<std::mutex> g(g_run_mu);
  int overlaps = 0;
  for (const Held &h : running()) {
    if (h.launch_id == launch_id) continue;
    if (lo < h.lo + h.n && h.lo < lo + n) {
      ++overlaps;
      char buf[320];
      std::snprintf(buf, sizeof buf,
                    "kernel '%s' (launch %lu) %s region [%#lx, +%lu) overlaps the %s region of kernel '%s' "
                    "(launch %lu) running at the same time",
                    kernel.c_str(), static_cast<unsigned long>(launch_id), what, static_cast<unsigned long>(lo),
                    static_cast<unsigned long>(n), h.what, h.kernel.c_str(), static_cast<unsigned long>(h.launch_id));
      report(ErrorKind::kOverlapWithRunningKernel, buf);
    }
  }
  running().push_back(Held{launch_id, kernel, stream, lo, n, what});
  return overlaps;
}

void release_regions(uint64_t launch_id) {
  std::lock_guard<std::mutex> g(g_run_mu);
  auto &v = running();
  v.erase(std::remove_if(v.begin(), v.end(), [&](const Held &h) { return h.launch_id == launch_id; }), v.end());
}

// What the torch_npu stand-ins take from the core (internal.h).
AtomicCounters &shard() { return C(); }
void caching_block_held() {
  const int64_t now = g_ca_live.fetch_add(1, std::memory_order_relaxed) + 1;
  int64_t peak = g_ca_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_ca_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}
void caching_block_returned() { g_ca_live.fetch_sub(1, std::memory_order_relaxed); }

int current_device() { return cur_device(); }
void set_thread_device(int device) { t_device = device; }

uintptr_t device_alloc(size_t size, bool block, int device) { return dev_alloc(size, block, device); }
bool device_free(uintptr_t p, bool block) { return dev_free(p, block); }
void note_workspace_request(uintptr_t block, uint64_t size) { note_request(block, size); }
void device_memory(int device, uint64_t *total, uint64_t *in_use) {
  std::lock_guard<std::mutex> g(g_mem_mu);
  *total = g_capacity[device] != 0 ? g_capacity[device] : kArenaSize;
  *in_use = g_in_use[device];
}

aclrtStream resolve_stream(aclrtStream handle) { return get_stream(handle); }
aclmdlRICaptureStatus stream_capture_status(aclrtStream resolved) {
  return capture_status(static_cast<Stream *>(resolved));
}
uint64_t active_capture_id(aclrtStream resolved) {
  auto *s = static_cast<Stream *>(resolved);
  std::lock_guard<std::mutex> l(s->mu);
  return s->capture != nullptr && s->capture->status == ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE ? s->capture->model->id : 0;
}
bool invalidate_device_captures(int device, const char *why, bool global_only) {
  return invalidate_captures_on(device, why, global_only);
}
void wait_device_streams(int device) { sync_all_streams(device, true); }
bool captures_underway(int device) {
  std::lock_guard<std::mutex> g(g_streams_mu);
  for (Stream *st : streams()) {
    if (st->destroyed || st->device != device) continue;
    std::lock_guard<std::mutex> l(st->mu);
    if (st->capture != nullptr) return true;
  }
  return false;
}
std::vector<int> devices_with_streams() {
  std::set<int> used;
  std::lock_guard<std::mutex> g(g_streams_mu);
  for (Stream *st : streams())
    if (!st->destroyed) used.insert(st->device);
  return std::vector<int>(used.begin(), used.end());
}

void set_standin_hooks(void (*on_reset)(), void (*on_model_released)(int device, uint64_t id)) {
  g_standin_reset.store(on_reset, std::memory_order_release);
  g_standin_model_released.store(on_model_released, std::memory_order_release);
}
}  // namespace internal

// ================================================================ control API
namespace {
Counters sum_shards_locked() {
  Counters r;
  for (const AtomicCounters *c : shards()) {
#define ACL_SIM_SUM(n) r.n += c->n.get();
    ACL_SIM_RESET_COUNTERS(ACL_SIM_SUM)
    ACL_SIM_LIVE_COUNTERS(ACL_SIM_SUM)
#undef ACL_SIM_SUM
  }
  return r;
}
}  // namespace

Counters counters() {
  std::lock_guard<std::mutex> g(g_shard_mu);
  Counters r = sum_shards_locked();
#define ACL_SIM_SUB(n) r.n -= g_counter_baseline.n;
  ACL_SIM_RESET_COUNTERS(ACL_SIM_SUB)
#undef ACL_SIM_SUB
  r.peak_live_caching_allocations = static_cast<uint64_t>(g_ca_peak.load(std::memory_order_relaxed));
  return r;
}

void reset_counters() {
  std::lock_guard<std::mutex> g(g_shard_mu);
  g_counter_baseline = sum_shards_locked();
  g_ca_peak.store(g_ca_live.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

const char *error_kind_name(ErrorKind k) {
  switch (k) {
    case ErrorKind::kOutOfBounds: return "out-of-bounds";
    case ErrorKind::kUseAfterFree: return "use-after-free";
    case ErrorKind::kUninitialisedRead: return "uninitialised-read";
    case ErrorKind::kStalePinnedSource: return "stale-pinned-source";
    case ErrorKind::kRegionOverlapInKernel: return "region-overlap-in-kernel";
    case ErrorKind::kOverlapWithRunningKernel: return "overlap-with-running-kernel";
    case ErrorKind::kLocksChangedWhileRunning: return "locks-changed-while-running";
    case ErrorKind::kBadArguments: return "bad-arguments";
    case ErrorKind::kCrossDevice: return "cross-device";
    case ErrorKind::kCaptureInvalidated: return "capture-invalidated";
    case ErrorKind::kRegionOverrun: return "region-overrun";
    case ErrorKind::kAllocatorRace: return "allocator-race";
    case ErrorKind::kSelfWait: return "self-wait";
  }
  return "?";
}

std::vector<ErrorReport> errors() {
  std::lock_guard<std::mutex> g(g_err_mu);
  return errs();
}
size_t error_count(ErrorKind k) {
  std::lock_guard<std::mutex> g(g_err_mu);
  size_t n = 0;
  for (const ErrorReport &e : errs()) n += e.kind == k;
  return n;
}
void clear_errors() {
  std::lock_guard<std::mutex> g(g_err_mu);
  errs().clear();
}

void set_device_base_offset(size_t bytes) { g_base_offset = bytes; }

void inject_fault(const char *api, uint64_t nth, aclError code) {
  for (int i = 0; i < kApiCount; ++i) {
    if (std::strcmp(api, kApiNames[i]) == 0) {
      std::lock_guard<std::mutex> g(g_fault_mu);
      g_faults[i].push_back(Fault{g_calls[i] + nth, code});
      g_faults_armed.store(true, std::memory_order_release);
      return;
    }
  }
  throw std::invalid_argument(std::string("acl_sim::inject_fault: unknown api ") + api);
}
void on_call(const char *api, uint64_t nth, std::function<void()> fn) {
  for (int i = 0; i < kApiCount; ++i) {
    if (std::strcmp(api, kApiNames[i]) == 0) {
      std::lock_guard<std::mutex> g(g_fault_mu);
      g_hooks[i].push_back(Hook{g_calls[i] + nth, std::move(fn)});
      g_faults_armed.store(true, std::memory_order_release);
      return;
    }
  }
  throw std::invalid_argument(std::string("acl_sim::on_call: unknown api ") + api);
}
void clear_faults() {
  std::lock_guard<std::mutex> g(g_fault_mu);
  for (int i = 0; i < kApiCount; ++i) {
    g_faults[i].clear();
    g_hooks[i].clear();
  }
  g_faults_armed.store(false, std::memory_order_release);
}


void set_device_count(int n) {
  if (n < 1 || n > kMaxDevices) throw std::invalid_argument("acl_sim::set_device_count: 1..16");
  g_device_count = n;
}
int device_count() { return g_device_count.load(); }

std::vector<AppLog> app_logs() {
  std::lock_guard<std::mutex> g(g_log_mu);
  return logs();
}
void clear_app_logs() {
  std::lock_guard<std::mutex> g(g_log_mu);
  logs().clear();
}


uint64_t model_task_count(aclmdlRI model) {
  std::lock_guard<std::mutex> g(g_model_mu);
  auto *m = static_cast<Model *>(model);
  return models().count(m) ? m->tasks.size() : 0;
}

const char *extent_kind_name(ExtentKind k) {
  switch (k) {
    case ExtentKind::kNone: return "none";
    case ExtentKind::kDeviceMalloc: return "device-malloc";
    case ExtentKind::kWorkspaceRequest: return "workspace-request";
  }
  return "?";
}
bool allocation_extent(const void *ptr, Extent *out, uint64_t request_seq) {
  const auto p = reinterpret_cast<uintptr_t>(ptr);
  Extent e;
  {
    std::lock_guard<std::mutex> g(g_mem_mu);
    Alloc *al = find_locked(p);
    if (al == nullptr) {
      *out = e;
      return false;
    }
    e.kind = al->block ? ExtentKind::kWorkspaceRequest : ExtentKind::kDeviceMalloc;
    e.base = e.block_base = al->base;
    e.size = e.block_size = al->size;
    e.device = al->device;
    e.freed = al->freed;
  }
  if (e.kind == ExtentKind::kWorkspaceRequest) {
    std::lock_guard<std::mutex> g(g_req_mu);
    auto it = req_history().find(e.block_base);
    bool found = false;
    if (it != req_history().end()) {
      for (auto r = it->second.rbegin(); r != it->second.rend(); ++r) {
        if (request_seq == 0 || r->seq <= request_seq) {
          e.size = r->size;
          e.request_seq = r->seq;
          found = true;
          break;
        }
      }
    }
    if (!found) e.size = 0;  // no request on this block before that point
  }
  *out = e;
  return true;
}

void set_event_id_limit(int device, uint32_t n) {
  if (device < 0 || device >= kMaxDevices) throw std::invalid_argument("acl_sim::set_event_id_limit: bad device");
  std::lock_guard<std::mutex> g(g_ev_mu);
  g_ev_limit[device] = n;
}
uint32_t event_ids_in_use(int device) {
  if (device < 0 || device >= kMaxDevices) return 0;
  std::lock_guard<std::mutex> g(g_ev_mu);
  return ev_ids_in_use(device);
}

void set_stream_limit(int device, uint32_t n) {
  if (device < 0 || device >= kMaxDevices) throw std::invalid_argument("acl_sim::set_stream_limit: bad device");
  std::lock_guard<std::mutex> g(g_streams_mu);
  g_stream_limit[device] = n;
}

void set_device_memory_capacity(int device, uint64_t bytes) {
  if (device < 0 || device >= kMaxDevices) throw std::invalid_argument("acl_sim::set_device_memory_capacity: bad device");
  std::lock_guard<std::mutex> g(g_mem_mu);
  g_capacity[device] = bytes;
}
uint64_t device_memory_in_use(int device) {
  if (device < 0 || device >= kMaxDevices) return 0;
  std::lock_guard<std::mutex> g(g_mem_mu);
  return g_in_use[device];
}
void reset() {
  if (auto *f = g_standin_reset.load(std::memory_order_acquire)) f();  // the task queues unpaused, their records
  {
    std::lock_guard<std::mutex> g(g_mem_mu);
    for (uint64_t &c : g_capacity) c = 0;
  }
  {
    std::lock_guard<std::mutex> g(g_ev_mu);
    for (uint32_t &n : g_ev_limit) n = 0;
  }
  {
    std::lock_guard<std::mutex> g(g_streams_mu);
    for (uint32_t &n : g_stream_limit) n = 0;
  }
  reset_counters();
  clear_errors();
  clear_faults();
  release_pause(0);
  internal::probe_reset();
  set_device_base_offset(0);
  clear_app_logs();
}

aclrtFuncHandle register_kernel(const char *name, KernelFn fn, void *user) {
  auto *k = new Kernel{name ? name : "kernel", fn, user};
  std::lock_guard<std::mutex> g(g_kern_mu);
  kernels().insert(k);
  return k;
}
uint64_t last_launch_id() { return t_last_launch; }
uint64_t latest_launch_id() { return g_launch_ids.load(); }

bool device_read(const void *dev, void *dst, size_t n, const char *who) {
  return dev_read(reinterpret_cast<uintptr_t>(dev), dst, n, who);
}
bool device_write(void *dev, const void *src, size_t n, const char *who) {
  return dev_write(reinterpret_cast<uintptr_t>(dev), src, n, who);
}
void *hardware_sync_addr() { return reinterpret_cast<void *>(hw_sync_addr()); }


}  // namespace acl_sim


// ================================================================ ACL API
using namespace acl_sim;

namespace {

// aclrtSynchronizeStream(WithTimeout): the stream's work, or ACL_ERROR_RT_STREAM_SYNC_TIMEOUT once `timeout_ms`
// (-1: none) passed (CANN: stream.cpp:137-165, api_impl.cc:1704-1765).
// A stream made with ACL_STREAM_PERSISTENT or ACL_STREAM_DEVICE_USE_ONLY returns at once, before the context is
// looked at (CANN's ApiErrorDecorator::StreamSynchronize, src/runtime/api/impl/api_error.cc:1451-1458: its runtime
// flags RT_STREAM_PERSISTENT / RT_STREAM_CP_PROCESS_USE, or RT_STREAM_AICPU, which no ACL flag gives); otherwise the
// thread needs a context (api_impl.cc:1706-1707).
aclError sync_stream(aclrtStream stream, int32_t timeout_ms) {
  if (stream == nullptr && no_context()) return ACL_ERROR_RT_CONTEXT_NULL;  // no current device: no default stream
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (s->capture != nullptr) {
      invalidate_locked(s, "aclrtSynchronizeStream on the capturing stream");
      return ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT;
    }
  }
  if ((s->flags & (kStreamPersistent | kStreamDeviceUseOnly)) != 0) return ACL_SUCCESS;
  if (no_context()) return ACL_ERROR_RT_CONTEXT_NULL;
  C().host_blocking++;
  Deadline d;
  return wait_idle(s, true, deadline_after(timeout_ms, &d)) ? ACL_SUCCESS : ACL_ERROR_RT_STREAM_SYNC_TIMEOUT;
}

// Work the host puts on a stream made with ACL_STREAM_PERSISTENT (CANN runs its tasks only when a model bound to it
// runs) or ACL_STREAM_DEVICE_USE_ONLY (for the device's own use: CANN refuses an AI CPU launch on it,
// api_error.cc:1229-1235, and its binding to a model, :3910-3916): the double models neither, so it refuses such work
// as not supported.
aclError unmodelled_stream(const Stream *s) {
  return (s->flags & (kStreamPersistent | kStreamDeviceUseOnly)) != 0 ? ACL_ERROR_RT_FEATURE_NOT_SUPPORT : ACL_SUCCESS;
}

// aclrtSynchronizeDevice(WithTimeout): every stream of the current device (CANN: device.cpp:159-184).
aclError sync_device(int32_t timeout_ms) {
  if (no_context()) return ACL_ERROR_RT_CONTEXT_NULL;  // CANN: api_impl.cc:3978-3979
  const int dev = cur_device();
  if (invalidate_captures_on(dev, "aclrtSynchronizeDevice while a stream of the device captures", false))
    return ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT;
  C().host_blocking++;
  C().device_synchronizations++;
  Deadline d;
  return sync_all_streams(dev, true, deadline_after(timeout_ms, &d)) ? ACL_SUCCESS : ACL_ERROR_RT_STREAM_SYNC_TIMEOUT;
}

// Device of the allocation record (live or freed) holding p, or -1.
int alloc_device(const void *p) {
  std::lock_guard<std::mutex> g(g_mem_mu);
  Alloc *al = find_locked(reinterpret_cast<uintptr_t>(p));
  return al == nullptr ? -1 : al->device;
}

// Call-time checks of a copy's two sides against `device` (the stream's, or
// the current one): device memory of another device, or device memory where
// the kind says host memory, is refused as on hardware. Out-of-bounds and
// use-after-free are left to the stream (reported when the copy runs).
aclError check_copy_sides(void *dst, const void *src, aclrtMemcpyKind kind, int device) {
  const bool dst_dev = kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
  const bool src_dev = kind == ACL_MEMCPY_DEVICE_TO_HOST || kind == ACL_MEMCPY_DEVICE_TO_DEVICE;
  const int dd = alloc_device(dst), sd = alloc_device(src);
  if (dst_dev ? (dd >= 0 && dd != device) : dd >= 0) return ACL_ERROR_RT_PARAM_INVALID;
  if (src_dev ? (sd >= 0 && sd != device) : sd >= 0) return ACL_ERROR_RT_PARAM_INVALID;
  return ACL_SUCCESS;
}

aclError submitted(Submit how) {
  return how == Submit::kInvalidated ? ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED : ACL_SUCCESS;
}

// aclrtCreateEvent (flag RT_EVENT_DEFAULT), aclrtCreateEventWithFlag, aclrtCreateEventExWithFlag (`ex`). The flag
// checks are CANN's (src/runtime/api/impl/api_error.cc:1628-1679); the kinds the double does not model (MC2,
// EXTERNAL, IPC) are refused as not supported.
aclError make_event(aclrtEvent *event, uint32_t flag, bool ex) {
  if (event == nullptr) return ACL_ERROR_INVALID_PARAM;
  const uint32_t most = ex ? (kEvDdsyncNs | kEvStreamMark | kEvDdsync | kEvTimeLine | kEvIpc)
                           : (kEvDdsyncNs | kEvStreamMark | kEvDdsync | kEvTimeLine | kEvMc2 | kEvExternal);
  for (uint32_t alone : {kEvMc2, kEvExternal, kEvIpc})
    if ((flag & alone) != 0 && (flag & ~alone) != 0) return ACL_ERROR_RT_PARAM_INVALID;
  if ((flag & most) == 0 || flag > most) return ACL_ERROR_RT_PARAM_INVALID;
  if ((flag & (kEvMc2 | kEvExternal | kEvIpc)) != 0) return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
  if (no_context()) return ACL_ERROR_RT_CONTEXT_NULL;  // CANN: api_impl.cc:2044-2045, :2075-2076
  auto *ev = new Event();
  ev->device = cur_device();
  ev->flag = flag;
  ev->ex = ex;
  {
    std::lock_guard<std::mutex> g(g_ev_mu);
    if (!ex && flag != kEvDefault && waitable(flag)) {  // its id now (CANN retries 10 times, 50 ms apart)
      if (ev_ids_in_use(ev->device) + 1 > ev_limit(ev->device)) {
        delete ev;
        return ACL_ERROR_RT_NO_EVENT_RESOURCE;
      }
      ev->holds_id = true;
      g_ev_holders[ev->device]++;
    }
    events().insert(ev);
  }
  C().events_created++;
  C().live_events++;
  *event = ev;
  return ACL_SUCCESS;
}

}  // namespace

extern "C" {

aclError aclrtSetDevice(int32_t deviceId) {
  if (aclError e = fault(kApiSetDevice)) return e;
  if (deviceId < 0 || deviceId >= g_device_count.load()) return ACL_ERROR_INVALID_DEVICE;
  t_device = deviceId;
  return ACL_SUCCESS;
}

aclError aclrtGetDevice(int32_t *deviceId) {
  if (aclError e = fault(kApiGetDevice)) return e;
  if (deviceId == nullptr) return ACL_ERROR_INVALID_PARAM;
#ifdef ACL_SIM_HOST_LIBRARY
  // CANN: no device (context) set on this thread is an error; torch_npu's lazy init relies on it.
  if (t_device < 0) return ACL_ERROR_RT_CONTEXT_NULL;
#endif
  *deviceId = cur_device();
  return ACL_SUCCESS;
}

void aclAppLog(aclLogLevel logLevel, const char *func, const char *file, uint32_t line, const char *fmt, ...) {
  char buf[2048];
  buf[0] = '\0';
  if (fmt != nullptr) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
  }
  AppLog l{logLevel, func != nullptr ? func : "", file != nullptr ? file : "", line, buf};
  std::lock_guard<std::mutex> g(g_log_mu);
  logs().push_back(std::move(l));
  C().app_logs++;
}

aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy) {
  if (aclError e = fault(kApiMalloc)) return e;
  if (devPtr == nullptr || size == 0) return ACL_ERROR_INVALID_PARAM;
  if (no_context()) return ACL_ERROR_RT_CONTEXT_NULL;  // CANN: ApiImpl::DevMalloc, api_impl.cc:2337-2338
  uintptr_t p = dev_alloc(size, false, cur_device());
  // The device is full: the runtime's code, the one torch_npu's caching allocator takes for out of memory
  // (NPUCachingAllocator.cpp v2.7.1:1297; CANN's aclrtMalloc page names no code).
  if (p == 0) return ACL_ERROR_RT_MEMORY_ALLOCATION;
  *devPtr = reinterpret_cast<void *>(p);
  return ACL_SUCCESS;
}

aclError aclrtFree(void *devPtr) {
  if (aclError e = fault(kApiFree)) return e;
  if (!dev_free(reinterpret_cast<uintptr_t>(devPtr), false)) return ACL_ERROR_INVALID_PARAM;
  return ACL_SUCCESS;
}

aclError aclrtMallocHost(void **hostPtr, size_t size) {
  if (aclError e = fault(kApiMallocHost)) return e;
  if (hostPtr == nullptr || size == 0) return ACL_ERROR_INVALID_PARAM;
  // Never kinder than CUDA's rule for implicitly synchronising calls (CANN says nothing): see control.h.
  if (invalidate_captures_on(cur_device(), "aclrtMallocHost while a stream of the device captures (global mode)",
                             true))
    return ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT;
  size_t rounded = (size + 4095) / 4096 * 4096;
  void *p = std::aligned_alloc(4096, rounded);
  if (p == nullptr) return ACL_ERROR_BAD_ALLOC;
  std::memset(p, 0xCB, rounded);
  {
    std::lock_guard<std::mutex> g(g_pin_mu);
    pinned()[reinterpret_cast<uintptr_t>(p)] = Pinned{size, ++g_pin_next_id};
    g_pin_gen.fetch_add(1, std::memory_order_release);
  }
  C().pinned_allocs++;
  C().live_pinned++;
  *hostPtr = p;
  return ACL_SUCCESS;
}

aclError aclrtFreeHost(void *hostPtr) {
  if (aclError e = fault(kApiFreeHost)) return e;
  if (invalidate_captures_on(cur_device(), "aclrtFreeHost while a stream of the device captures (global mode)", true))
    return ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT;
  std::lock_guard<std::mutex> g(g_pin_mu);  // held: a running copy from it finishes first
  auto it = pinned().find(reinterpret_cast<uintptr_t>(hostPtr));
  if (it == pinned().end()) return ACL_ERROR_INVALID_PARAM;
  std::memset(hostPtr, 0xDF, it->second.size);  // poison
  pinned().erase(it);
  g_pin_gen.fetch_add(1, std::memory_order_release);
  std::free(hostPtr);
  C().pinned_frees++;
  C().live_pinned--;
  return ACL_SUCCESS;
}

aclError aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind) {
  if (aclError e = fault(kApiMemcpy)) return e;
  if (count > destMax || dst == nullptr || src == nullptr) return ACL_ERROR_INVALID_PARAM;
  if (no_context()) return ACL_ERROR_RT_CONTEXT_NULL;  // CANN: ApiImpl::MemCopySync, api_impl.cc:2750-2751
  const int dev = cur_device();
  if (aclError e = check_copy_sides(dst, src, kind, dev)) return e;
  if (invalidate_captures_on(dev, "synchronous aclrtMemcpy while the device captures", true))
    return ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT;
  C().sync_copies++;
  C().host_blocking++;
  // At once, as CANN's runtime copies (api_impl.cc:2745-2774: through the driver, no stream waited for): work
  // queued before it may still run, and a kernel that uses these bytes sees them change (reported).
  return do_copy(dst, src, count, kind, nullptr, true, "aclrtMemcpy");
}

aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind,
                          aclrtStream stream) {
  if (aclError e = fault(kApiMemcpyAsync)) return e;
  if (count > destMax || dst == nullptr || src == nullptr) return ACL_ERROR_INVALID_PARAM;
  // CANN's aclrtMemcpyAsync page: a host-to-host copy is not supported on the training products.
  if (kind == ACL_MEMCPY_HOST_TO_HOST) return ACL_ERROR_RT_FEATURE_NOT_SUPPORT;
  if (no_context()) return ACL_ERROR_RT_CONTEXT_NULL;  // CANN: ApiImpl::MemcpyAsync, api_impl.cc:2874-2875
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  if (s->device != cur_device()) return ACL_ERROR_RT_STREAM_CONTEXT;
  if (aclError e = unmodelled_stream(s)) return e;
  if (aclError e = check_copy_sides(dst, src, kind, s->device)) return e;
  C().async_copies++;
  // Which side is host memory?
  const void *host_side = nullptr;
  if (kind == ACL_MEMCPY_HOST_TO_DEVICE || kind == ACL_MEMCPY_HOST_TO_HOST) host_side = src;
  if (kind == ACL_MEMCPY_DEVICE_TO_HOST) host_side = dst;
  uint64_t pin_id = 0;
  if (host_side != nullptr) pin_id = pinned_id_now(reinterpret_cast<uintptr_t>(host_side), count);
  auto fill = [&](Task &t) {
    t.kind = pin_id != 0 ? TaskKind::kPinnedCopy : TaskKind::kCopy;
    t.copy_kind = kind;
    t.stream = stream;
    t.dst = dst;
    t.src = src;
    t.count = count;
    t.id = pin_id;
    t.heap_args = nullptr;
  };
  Submit how = Submit::kQueued;
  if (host_side != nullptr && pin_id != 0) {
    enqueue(s, fill, &how);
    return submitted(how);
  }
  // Pageable host memory (or device-to-device): complete on return; a
  // pageable copy cannot be captured (it would block the host).
  if (host_side != nullptr) {
    const aclmdlRICaptureStatus cs = capture_status(s);
    if (cs == ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE) {
      std::lock_guard<std::mutex> l(s->mu);
      invalidate_locked(s, "aclrtMemcpyAsync from pageable host memory (host-blocking) into a capture");
      return ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT;
    }
    if (cs == ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED) return ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED;
    C().pageable_async_copies++;
    C().host_blocking++;
  }
  uint64_t seq = enqueue(s, fill, &how);
  if (host_side != nullptr && how == Submit::kQueued) wait_until(s, seq, false);
  return submitted(how);
}

aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream) {
  if (aclError e = fault(kApiMemsetAsync)) return e;
  if (count > maxCount || devPtr == nullptr) return ACL_ERROR_INVALID_PARAM;
  if (no_context()) return ACL_ERROR_RT_CONTEXT_NULL;  // CANN: ApiImpl::MemsetAsync, api_impl.cc:3219-3220
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  if (s->device != cur_device()) return ACL_ERROR_RT_STREAM_CONTEXT;
  if (aclError e = unmodelled_stream(s)) return e;
  const int d = alloc_device(devPtr);
  if (d >= 0 && d != s->device) return ACL_ERROR_RT_PARAM_INVALID;
  C().memsets++;
  Submit how = Submit::kQueued;
  enqueue(
      s,
      [&](Task &t) {
        t.kind = TaskKind::kMemset;
        t.value = static_cast<uint8_t>(value);
        t.stream = stream;
        t.dst = devPtr;
        t.count = count;
        t.heap_args = nullptr;
      },
      &how);
  return submitted(how);
}

aclError aclrtCreateStream(aclrtStream *stream) {
  if (aclError e = fault(kApiCreateStream)) return e;
  return internal::create_stream(stream, 0);
}

aclError aclrtDestroyStream(aclrtStream stream) {
  if (aclError e = fault(kApiDestroyStream)) return e;
  return internal::destroy_stream(stream, false);
}

aclError aclrtSynchronizeStream(aclrtStream stream) {
  if (aclError e = fault(kApiSynchronizeStream)) return e;
  return sync_stream(stream, -1);
}

aclError aclrtSynchronizeDevice(void) {
  if (aclError e = fault(kApiSynchronizeDevice)) return e;
  return sync_device(-1);
}

aclError aclrtCreateEvent(aclrtEvent *event) {
  if (aclError e = fault(kApiCreateEvent)) return e;
  return make_event(event, kEvDefault, false);
}

aclError aclrtDestroyEvent(aclrtEvent event) {
  if (aclError e = fault(kApiDestroyEvent)) return e;
  std::lock_guard<std::mutex> g(g_ev_mu);
  auto *ev = static_cast<Event *>(event);
  if (!events().erase(ev)) return ACL_ERROR_RT_INVALID_HANDLE;
  if (ev->holds_id) {  // back once its last record is reached (a record not reached yet keeps the event)
    g_ev_holders[ev->device]--;
    if (ev->s != nullptr) ev_pending_ids(ev->device).emplace_back(ev->s, ev->target);
  }
  drop_stamp(ev);
  delete ev;
  C().live_events--;
  return ACL_SUCCESS;
}

aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream) {
  if (aclError e = fault(kApiRecordEvent)) return e;
  if (no_context()) return ACL_ERROR_RT_CONTEXT_NULL;  // CANN: ApiImpl::EventRecord, api_impl.cc:2137-2138
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  if (s->device != cur_device()) return ACL_ERROR_RT_STREAM_CONTEXT;
  if (aclError e = unmodelled_stream(s)) return e;
  std::lock_guard<std::mutex> g(g_ev_mu);
  auto *ev = static_cast<Event *>(event);
  if (!events().count(ev)) return ACL_ERROR_RT_INVALID_HANDLE;
  if (ev->device != s->device) return ACL_ERROR_RT_INVALID_HANDLE;  // an event of another device
  // A record that takes an id takes it before the previous one goes back: at the limit it fails.
  const bool takes_id = id_per_record(ev);
  const bool ids_left = !takes_id || ev_ids_in_use(ev->device) + 1 <= ev_limit(ev->device);
  std::lock_guard<std::mutex> l(s->mu);
  if (s->capture != nullptr) {
    if (s->capture->status != ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE) return ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED;
    invalidate_locked(s, "aclrtRecordEvent on the capturing stream");
    return ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT;
  }
  if (!ids_left) return ACL_ERROR_RT_NO_EVENT_RESOURCE;
  if (takes_id && !ev->ex) {  // aclrtCreateEvent's: the new id is its own; the previous record's goes back once reached
    if (ev->holds_id) ev_pending_ids(ev->device).emplace_back(ev->s, ev->target);
    if (!ev->holds_id) g_ev_holders[ev->device]++;
    ev->holds_id = true;
  }
  // The last record is forgotten. Two stream locks at once only here, under g_ev_mu: no other order exists.
  if (ev->s == s) {
    if (ev->pending) unlink_stamp_locked(ev);
  } else {
    drop_stamp(ev);
  }
  // The record is a task of its own: reached only once the worker has run it, even on an idle stream.
  bool wake = false;
  ev->target = push_locked(
      s,
      [&](Task &t) {
        t.kind = TaskKind::kRecord;
        t.stream = stream;
        t.heap_args = nullptr;
      },
      &wake);
  if (takes_id && ev->ex) ev_pending_ids(ev->device).emplace_back(s, ev->target);  // back once reached
  ev->s = s;
  ev->stamp_ns = -1;
  ev->fresh = true;
  ev->pending = true;
  ev->prev = s->stamps_tail;
  (s->stamps_tail != nullptr ? s->stamps_tail->next : s->stamps_head) = ev;
  s->stamps_tail = ev;
  C().events_recorded++;
  if (wake) s->cv.notify_one();  // under s->mu: the worker wakes into the lock, harmless
  return ACL_SUCCESS;
}

aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status) {
  if (aclError e = fault(kApiQueryEventStatus)) return e;
  if (status == nullptr) return ACL_ERROR_INVALID_PARAM;
  int ev_device;
  {
    std::lock_guard<std::mutex> g(g_ev_mu);
    auto *ev = static_cast<Event *>(event);
    if (!events().count(ev)) return ACL_ERROR_RT_INVALID_HANDLE;
    ev_device = ev->device;
  }
  // torch_npu skips event queries while any capture is underway on the device
  // because they are illegal in capture (NPUCachingAllocator.cpp v2.7.1:1199-1210).
  if (invalidate_captures_on(ev_device, "aclrtQueryEventStatus while a stream of the device captures (global mode)",
                             true))
    return ACL_ERROR_RT_CAPTURE_MODE_NOT_SUPPORT;
  std::lock_guard<std::mutex> g(g_ev_mu);
  auto *ev = static_cast<Event *>(event);
  if (!events().count(ev)) return ACL_ERROR_RT_INVALID_HANDLE;
  C().event_queries++;
  // CANN answers from the record's state, which the runtime moves to "recorded" only once the device
  // reported the record task done (Event::QueryEventStatus, event.cc:1189-1214; RecordComplete :831):
  // a query made right after the record finds it not reached. The double answers so on the first query
  // of every record, whatever its worker did meanwhile (deterministic on a loaded machine), unless a
  // host synchronisation already covered the record; later queries answer whether the stream reached it.
  // Never recorded: CANN's "new mode" (ExWithFlag) answers complete, the others not ready (event.cc:1193-1198).
  bool done = ev->ex;
  if (ev->s != nullptr) {
    std::lock_guard<std::mutex> l(ev->s->mu);
    done = ev->s->completed >= ev->target && (!ev->fresh || ev->s->host_seen >= ev->target);
    ev->fresh = false;
  }
  *status = done ? ACL_EVENT_RECORDED_STATUS_COMPLETE : ACL_EVENT_RECORDED_STATUS_NOT_READY;
  return ACL_SUCCESS;
}

// CANN (acl_rt.h): the time between two events, each recorded and complete. Never waits. CANN's runtime
// (event.cc:1247-1279): an event never recorded is RT_ERROR_EVENT_RECORDER_NULL, which reaches the caller as
// ACL_ERROR_RT_INTERNAL_ERROR (errcode_manage.cc:197); a record whose completion the host has not taken in
// yet has no stamp: ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID. The end reached before the start: CANN gives a
// negative time; the double refuses with ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL.
aclError aclrtEventElapsedTime(float *ms, aclrtEvent startEvent, aclrtEvent endEvent) {
  if (aclError e = fault(kApiEventElapsedTime)) return e;
  if (ms == nullptr) return ACL_ERROR_INVALID_PARAM;
  std::lock_guard<std::mutex> g(g_ev_mu);
  int64_t stamp[2];
  Event *evs[2] = {static_cast<Event *>(startEvent), static_cast<Event *>(endEvent)};
  for (int i = 0; i < 2; ++i)
    if (!events().count(evs[i])) return ACL_ERROR_RT_INVALID_HANDLE;
  for (int i = 0; i < 2; ++i)
    if (evs[i]->s == nullptr) return ACL_ERROR_RT_INTERNAL_ERROR;
  for (int i = 0; i < 2; ++i) {
    // Known complete to the host only through a query after the first, or a host synchronisation.
    std::lock_guard<std::mutex> l(evs[i]->s->mu);
    if (evs[i]->pending || (evs[i]->fresh && evs[i]->s->host_seen < evs[i]->target))
      return ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID;
    stamp[i] = evs[i]->stamp_ns;
    if (stamp[i] < 0) return ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID;  // a record aclrtDestroyStreamForce dropped
  }
  if (stamp[1] < stamp[0]) return ACL_ERROR_RT_EVENT_TIMESTAMP_REVERSAL;
  *ms = static_cast<float>(static_cast<double>(stamp[1] - stamp[0]) / 1e6);
  return ACL_SUCCESS;
}

aclError aclrtGetHardwareSyncAddr(void **addr) {
  if (aclError e = fault(kApiGetHardwareSyncAddr)) return e;
  if (addr == nullptr) return ACL_ERROR_INVALID_PARAM;
  *addr = reinterpret_cast<void *>(hw_sync_addr());
  return ACL_SUCCESS;
}

aclError aclrtLaunchKernelWithHostArgs(aclrtFuncHandle funcHandle, uint32_t blockDim, aclrtStream stream,
                                       aclrtLaunchKernelCfg *, void *hostArgs, size_t argsSize,
                                       aclrtPlaceHolderInfo *, size_t) {
  if (aclError e = fault(kApiLaunch)) return e;
#ifdef ACL_SIM_HOST_LIBRARY
  // CANN's ACL layer: both pointers must be given, whatever argsSize says (acl/aclrt_impl/kernel.cpp:496-497). The
  // simulation (libacl_sim.a) still takes a null hostArgs with argsSize 0 (its own tests launch so).
  if (funcHandle == nullptr || hostArgs == nullptr) return ACL_ERROR_INVALID_PARAM;
#endif
  auto *k = static_cast<Kernel *>(funcHandle);
  if (!kernel_known(k)) return ACL_ERROR_RT_INVALID_HANDLE;
  if (blockDim == 0 || (argsSize > 0 && hostArgs == nullptr)) return ACL_ERROR_INVALID_PARAM;
  if (no_context()) return ACL_ERROR_RT_CONTEXT_NULL;  // CANN: ApiImpl::LaunchKernelV2, api_impl.cc:1307-1308
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  if (s->device != cur_device()) return ACL_ERROR_RT_STREAM_CONTEXT;
  if (aclError e = unmodelled_stream(s)) return e;
  // The argument bytes are copied now (call time), into the task record.
  uint8_t *heap_args = nullptr;
  if (argsSize > kInlineArgs) {
    heap_args = new uint8_t[argsSize];
    std::memcpy(heap_args, hostArgs, argsSize);
  }
  uint64_t id = ++g_launch_ids;
  const uint64_t req_seq = g_req_seq.load(std::memory_order_relaxed);
  Submit how = Submit::kQueued;
  enqueue(
      s,
      [&](Task &t) {
        t.kind = TaskKind::kLaunch;
        t.block_dim = blockDim;
        t.stream = stream;
        t.count = argsSize;
        t.id = id;
        t.req_seq = req_seq;
        t.kernel = k;
        t.heap_args = heap_args;
        if (heap_args == nullptr && argsSize != 0) std::memcpy(t.args, hostArgs, argsSize);
      },
      &how);
  if (how == Submit::kInvalidated) return ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED;
  t_last_launch = id;
  C().launches++;
  return ACL_SUCCESS;
}

aclError aclmdlRICaptureBegin(aclrtStream stream, aclmdlRICaptureMode mode) {
  if (aclError e = fault(kApiCaptureBegin)) return e;
  if (mode != ACL_MODEL_RI_CAPTURE_MODE_GLOBAL && mode != ACL_MODEL_RI_CAPTURE_MODE_THREAD_LOCAL &&
      mode != ACL_MODEL_RI_CAPTURE_MODE_RELAXED)
    return ACL_ERROR_INVALID_PARAM;
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  if (s->device != cur_device()) return ACL_ERROR_RT_STREAM_CONTEXT;
  if (aclError e = unmodelled_stream(s)) return e;
  std::lock_guard<std::mutex> l(s->mu);
  if (s->capture != nullptr) return ACL_ERROR_RT_STREAM_CAPTURED;
  auto *m = new Model();
  m->id = ++g_model_ids;
  m->device = s->device;
  s->capture = new Capture{m, ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE, mode, std::this_thread::get_id()};
  return ACL_SUCCESS;
}

// CANN (model_ri.cpp:62-91): the stream must be given (no default stream here) and at least one of status and
// modelRI; an invalid handle is ACL_ERROR_RT_INVALID_HANDLE (runtime_handle_guard.cc:70-92); a stream that does
// not capture: NONE and no model (context_aclgraph.cc:656-688).
aclError aclmdlRICaptureGetInfo(aclrtStream stream, aclmdlRICaptureStatus *status, aclmdlRI *modelRI) {
  if (aclError e = fault(kApiCaptureGetInfo)) return e;
  if (stream == nullptr || (status == nullptr && modelRI == nullptr)) return ACL_ERROR_INVALID_PARAM;
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  std::lock_guard<std::mutex> l(s->mu);
  if (status != nullptr) *status = s->capture == nullptr ? ACL_MODEL_RI_CAPTURE_STATUS_NONE : s->capture->status;
  if (modelRI != nullptr) *modelRI = s->capture == nullptr ? nullptr : s->capture->model;
  return ACL_SUCCESS;
}

aclError aclmdlRICaptureEnd(aclrtStream stream, aclmdlRI *modelRI) {
  if (aclError e = fault(kApiCaptureEnd)) return e;
  if (modelRI == nullptr) return ACL_ERROR_INVALID_PARAM;
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  Capture *c;
  {
    std::lock_guard<std::mutex> l(s->mu);
    c = s->capture;
    if (c == nullptr) return ACL_ERROR_RT_STREAM_NOT_CAPTURED;
    s->capture = nullptr;
  }
  Model *m = c->model;
  const bool ok = c->status == ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE;
  delete c;
  if (!ok) {
    model_released(m->device, m->id);
    delete m;
    *modelRI = nullptr;
    return ACL_ERROR_RT_STREAM_CAPTURE_INVALIDATED;
  }
  m->complete = true;
  {
    std::lock_guard<std::mutex> g(g_model_mu);
    models().insert(m);
  }
  C().live_models++;
  *modelRI = m;
  return ACL_SUCCESS;
}

aclError aclmdlRIExecuteAsync(aclmdlRI modelRI, aclrtStream stream) {
  if (aclError e = fault(kApiExecuteAsync)) return e;
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  if (s->device != cur_device()) return ACL_ERROR_RT_STREAM_CONTEXT;
  if (aclError e = unmodelled_stream(s)) return e;
  std::lock_guard<std::mutex> g(g_model_mu);  // held: the model cannot be destroyed meanwhile
  auto *m = static_cast<Model *>(modelRI);
  if (!models().count(m)) return ACL_ERROR_RT_INVALID_HANDLE;
  if (m->device != s->device) return ACL_ERROR_RT_STREAM_CONTEXT;
  if (capture_status(s) != ACL_MODEL_RI_CAPTURE_STATUS_NONE) return ACL_ERROR_RT_STREAM_CAPTURED;
  for (const Task &orig : m->tasks) {
    Task copy = orig;
    copy.stream = stream;
    if (orig.kind == TaskKind::kLaunch) {
      copy.id = ++g_launch_ids;
      if (orig.heap_args != nullptr) {
        copy.heap_args = new uint8_t[orig.count];
        std::memcpy(copy.heap_args, orig.heap_args, orig.count);
      }
    }
    copy.origin = orig.kind == TaskKind::kLaunch ? orig.id : m->id;
    enqueue(s, [&](Task &t) { t = copy; });
  }
  C().replays++;
  return ACL_SUCCESS;
}

aclError aclmdlRIDestroy(aclmdlRI modelRI) {
  if (aclError e = fault(kApiRIDestroy)) return e;
  std::lock_guard<std::mutex> g(g_model_mu);
  auto *m = static_cast<Model *>(modelRI);
  if (!models().erase(m)) return ACL_ERROR_RT_INVALID_HANDLE;
  model_released(m->device, m->id);  // torch_npu: NPUGraph::reset -> releasePool (NPUGraph.cpp v2.7.1:338)
  delete m;  // replays already queued carry their own copies
  C().live_models--;
  return ACL_SUCCESS;
}

}  // extern "C"

// ================================================================ host library hooks
// What the host ACL library (acl_sim/host/, a test double of CANN's shared libraries) needs of the
// stream and event internals; declared in internal.h.
namespace acl_sim {
namespace internal {
// CANN (event.cc:586-632, :709-761): an ExWithFlag event never recorded is not waited for; a wait for an event
// of the other kinds never recorded fails (ACL_ERROR_RT_PARAM_INVALID); an event that cannot be waited for
// (no ACL_EVENT_SYNC among its flags, CANN's documentation of aclrtCreateEventExWithFlag) is refused: CANN's
// runtime lets an ExWithFlag one pass without waiting and fails an older kind's unless its record is done.
// The waiting stream must be of the thread's current context (ApiImpl::StreamWaitEvent, api_impl.cc:1594-1595 no
// context: ACL_ERROR_RT_CONTEXT_NULL; :1609-1610 another context's stream: ACL_ERROR_RT_STREAM_CONTEXT).
aclError stream_wait_event(aclrtStream stream, aclrtEvent event) {
  if (no_context()) return ACL_ERROR_RT_CONTEXT_NULL;
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  if (s->device != cur_device()) return ACL_ERROR_RT_STREAM_CONTEXT;
  if (aclError e = unmodelled_stream(s)) return e;
  Stream *other;
  uint64_t target;
  {
    std::lock_guard<std::mutex> g(g_ev_mu);
    auto *ev = static_cast<Event *>(event);
    if (!events().count(ev)) return ACL_ERROR_RT_INVALID_HANDLE;
    other = ev->s;
    target = ev->target;
    if (other == nullptr && ev->ex) return ACL_SUCCESS;
    if (other == nullptr) return ACL_ERROR_RT_PARAM_INVALID;
    if (!waitable(ev->flag)) return ev->ex ? ACL_ERROR_RT_FEATURE_NOT_SUPPORT : ACL_ERROR_RT_PARAM_INVALID;
  }
  if (other == s) return ACL_SUCCESS;  // already ordered
  Submit how = Submit::kQueued;
  enqueue(
      s,
      [&](Task &t) {
        t.kind = TaskKind::kWaitEvent;
        t.stream = stream;
        t.dst = other;
        t.id = target;
        t.heap_args = nullptr;
      },
      &how);
  return submitted(how);
}

aclError create_event(aclrtEvent *event, uint32_t flag, bool ex) { return make_event(event, flag, ex); }

// aclrtCreateStream (flags 0) and aclrtCreateStreamWithConfig (its caller checked the flags): on the current device,
// which the thread must have (ApiImpl::StreamCreate, api_impl.cc:1484-1485); at the device's stream limit
// ACL_ERROR_RT_NO_STREAM_RESOURCE (new_stream).
aclError create_stream(aclrtStream *stream, uint32_t flags) {
  if (stream == nullptr) return ACL_ERROR_INVALID_PARAM;
  if (no_context()) return ACL_ERROR_RT_CONTEXT_NULL;
  Stream *s = new_stream(flags);
  if (s == nullptr) return ACL_ERROR_RT_NO_STREAM_RESOURCE;
  *stream = s;
  return ACL_SUCCESS;
}

// aclrtDestroyStream (`force` false) and aclrtDestroyStreamForce (true): a stream of the thread's current context
// (ApiImpl::StreamDestroy, api_impl.cc:1579-1589: none ACL_ERROR_RT_CONTEXT_NULL, another context's stream
// ACL_ERROR_RT_STREAM_CONTEXT), not capturing (api_error.cc:1390-1392). aclrtDestroyStream waits for the stream's
// work. aclrtDestroyStreamForce drops what the stream has not started (CANN: Stream::TearDown with the force flag
// submits a forced stream recycle and reclaims every pending task, stream.cc:1409-1476, stars_engine.cc:490-498); the
// task the stream runs ends first. Each dropped task is reclaimed on the host as completed (Complete ->
// DoCompleteSuccessForEventRecordTask -> Event::RecordComplete, task_manager.cc:435-444, event_task.cc:204-233,
// event.cc:831-845): a dropped record leaves its event recorded (queries complete, synchronisations return, its
// event id goes back) with no time the device wrote, so aclrtEventElapsedTime refuses it
// (ACL_ERROR_RT_EVENT_TIMESTAMP_INVALID); a wait another stream queued for it is let through. A dropped copy, fill
// or kernel never touches memory.
aclError destroy_stream(aclrtStream stream, bool force) {
  if (stream == nullptr) return ACL_ERROR_INVALID_PARAM;
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  if (capture_status(s) != ACL_MODEL_RI_CAPTURE_STATUS_NONE) return ACL_ERROR_RT_STREAM_CAPTURED;
  if (no_context()) return ACL_ERROR_RT_CONTEXT_NULL;
  if (s->device != cur_device()) return ACL_ERROR_RT_STREAM_CONTEXT;
  if (!force) wait_idle(s, true);
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (force) {
      const size_t mask = s->ring.size() - 1;
      for (uint64_t i = s->head; i != s->tail; ++i) {
        Task &t = s->ring[i & mask];
        if (t.heap_args != nullptr) {
          delete[] t.heap_args;
          t.heap_args = nullptr;
        }
      }
      s->head = s->tail;
    }
    s->stop = true;
  }
  s->cv.notify_all();
  s->th.join();
  if (force) {
    std::lock_guard<std::mutex> l(s->mu);
    while (s->stamps_head != nullptr) {  // the records dropped (those reached were stamped by the worker)
      Event *ev = s->stamps_head;
      ev->stamp_ns = -1;
      unlink_stamp_locked(ev);
    }
    s->completed = s->enqueued;
    s->host_seen = s->enqueued;
    if (s->idle_waiters != 0) s->idle_cv.notify_all();
  }
  std::lock_guard<std::mutex> g(g_streams_mu);
  s->destroyed.store(true, std::memory_order_release);  // the object is kept so stale handles are detected
  g_created_streams[s->device]--;
  return ACL_SUCCESS;
}

aclError synchronize_stream(aclrtStream stream, int32_t timeout_ms) { return sync_stream(stream, timeout_ms); }
aclError synchronize_device(int32_t timeout_ms) { return sync_device(timeout_ms); }

aclError synchronize_event(aclrtEvent event) {
  Stream *s;
  uint64_t target;
  {
    std::lock_guard<std::mutex> g(g_ev_mu);
    auto *ev = static_cast<Event *>(event);
    if (!events().count(ev)) return ACL_ERROR_RT_INVALID_HANDLE;
    s = ev->s;
    target = ev->target;
  }
  if (s != nullptr) {
    C().host_blocking++;
    wait_until(s, target, true);
  }
  return ACL_SUCCESS;
}

// CANN's aclrtStreamQuery answers complete at once for a PERSISTENT or DEVICE_USE_ONLY stream (api_error.cc:1487-1494).
aclError stream_idle(aclrtStream stream, bool *idle) {
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  if ((s->flags & (kStreamPersistent | kStreamDeviceUseOnly)) != 0) {
    *idle = true;
    return ACL_SUCCESS;
  }
  std::lock_guard<std::mutex> l(s->mu);
  *idle = s->completed >= s->enqueued;
  return ACL_SUCCESS;
}

int stream_device(aclrtStream stream) {
  Stream *s = get_stream(stream);
  return s == nullptr ? -1 : s->device;
}

int thread_device() { return t_device; }

bool model_id(aclmdlRI model, uint64_t *id) {
  auto *m = static_cast<Model *>(model);
  bool known;
  {
    std::lock_guard<std::mutex> g(g_model_mu);
    known = models().count(m) != 0;
  }
  std::lock_guard<std::mutex> g(g_streams_mu);
  for (auto it = streams().begin(); !known && it != streams().end(); ++it) {  // a model still being captured
    std::lock_guard<std::mutex> l((*it)->mu);
    known = (*it)->capture != nullptr && (*it)->capture->model == m;
  }
  if (known) *id = m->id;
  return known;
}
}  // namespace internal
}  // namespace acl_sim
