// HOST SIMULATION of the ACL runtime subset used by torch-npu-inductor-patches
// (test double and dry-run tool; not CANN, runs no NPU code). Semantics are
// documented in include/acl_sim/control.h.
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
#include <thread>
#include <vector>

#include "acl/acl.h"
#include "acl_sim/control.h"
#include "internal.h"
#include "torch_npu/csrc/core/npu/NPUWorkspaceAllocator.h"

namespace acl_sim {
namespace {

// ---------------------------------------------------------------- heap counting
thread_local int t_suspend = 0;
thread_local bool t_counting = false;
thread_local uint64_t t_heap = 0;
thread_local uint64_t t_last_launch = 0;

// ---------------------------------------------------------------- counters
// Sharded per thread: each thread bumps its own shard with plain (relaxed)
// load + store, no locked instruction; counters() sums the shards, and
// reset_counters() records the sums as a baseline (shards are never written
// by other threads, and never freed, so counts of exited threads remain).
#define ACL_SIM_RESET_COUNTERS(X)                                                                       \
  X(allocator_requests) X(allocator_growths) X(sync_copies) X(async_copies) X(pageable_async_copies)   \
  X(memsets) X(launches) X(host_blocking) X(pinned_allocs) X(pinned_frees) X(device_allocs)            \
  X(device_frees) X(events_created) X(events_recorded) X(event_queries) X(errors)
#define ACL_SIM_LIVE_COUNTERS(X) \
  X(live_device_allocs) X(live_allocator_blocks) X(live_workspace_dataptrs) X(live_pinned) X(live_events)
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
std::mutex g_shard_mu;
std::vector<AtomicCounters *> &shards() {
  static auto *v = new std::vector<AtomicCounters *>();
  return *v;
}
Counters g_counter_baseline;  // under g_shard_mu
thread_local AtomicCounters *t_shard = nullptr;
AtomicCounters &new_shard() {
  ++t_suspend;  // simulation bookkeeping: not counted as the caller's heap allocation
  auto *c = new AtomicCounters();
  {
    std::lock_guard<std::mutex> g(g_shard_mu);
    shards().push_back(c);
  }
  --t_suspend;
  t_shard = c;
  return *c;
}
inline AtomicCounters &C() {
  AtomicCounters *c = t_shard;
  return c != nullptr ? *c : new_shard();
}

// ---------------------------------------------------------------- errors
std::mutex g_err_mu;
std::vector<ErrorReport> &errs() {
  static auto *v = new std::vector<ErrorReport>();
  return *v;
}

// ---------------------------------------------------------------- faults
enum Api {
  kApiMalloc, kApiFree, kApiMallocHost, kApiFreeHost, kApiMemcpy, kApiMemcpyAsync, kApiMemsetAsync,
  kApiCreateStream, kApiDestroyStream, kApiSynchronizeStream, kApiSynchronizeDevice, kApiCreateEvent,
  kApiDestroyEvent, kApiRecordEvent, kApiQueryEventStatus, kApiGetHardwareSyncAddr, kApiLaunch,
  kApiAllocator, kApiCount
};
const char *const kApiNames[kApiCount] = {
    "aclrtMalloc", "aclrtFree", "aclrtMallocHost", "aclrtFreeHost", "aclrtMemcpy", "aclrtMemcpyAsync",
    "aclrtMemsetAsync", "aclrtCreateStream", "aclrtDestroyStream", "aclrtSynchronizeStream",
    "aclrtSynchronizeDevice", "aclrtCreateEvent", "aclrtDestroyEvent", "aclrtRecordEvent",
    "aclrtQueryEventStatus", "aclrtGetHardwareSyncAddr", "aclrtLaunchKernelWithHostArgs", "malloc_with_stream"};
struct Fault {
  uint64_t at;
  aclError code;
};
// "The nth call counted from now" only needs calls counted while a fault is
// armed: with none armed (the common case) a call costs one atomic load; with
// one armed, calls are counted and matched under the fault mutex.
std::mutex g_fault_mu;
uint64_t g_calls[kApiCount];  // under g_fault_mu
std::atomic<bool> g_faults_armed{false};
std::vector<Fault> g_faults[kApiCount];

aclError fault(Api a) {
  if (!g_faults_armed.load(std::memory_order_acquire)) return ACL_SUCCESS;
  std::lock_guard<std::mutex> g(g_fault_mu);
  const uint64_t n = ++g_calls[a];
  for (const Fault &f : g_faults[a])
    if (f.at == n) return f.code;
  return ACL_SUCCESS;
}

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

char *host_view(uintptr_t dev) {
  Arena &a = arena();
  return a.host + (dev - reinterpret_cast<uintptr_t>(a.dev));
}
uintptr_t dev_alloc(size_t size, bool block) {
  std::lock_guard<std::mutex> g(g_mem_mu);
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
  al.init.assign(size, 0);
  allocs()[base] = std::move(al);
  C().device_allocs++;
  (block ? C().live_allocator_blocks : C().live_device_allocs)++;
  return base;
}

bool dev_free(uintptr_t p, bool block) {
  std::lock_guard<std::mutex> g(g_mem_mu);
  auto it = allocs().find(p);
  if (it == allocs().end() || it->second.freed || it->second.block != block) return false;
  Alloc &al = it->second;
  al.freed = true;
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
  (block ? C().live_allocator_blocks : C().live_device_allocs)--;
  return true;
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
enum class TaskKind : uint8_t { kPinnedCopy, kCopy, kMemset, kLaunch };
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
  Kernel *kernel;         // launch
  uint8_t *heap_args;     // launch: argument bytes beyond kInlineArgs (else nullptr)
  alignas(16) uint8_t args[kInlineArgs];
};
void run_task(const Task &t);

// One worker per stream; the queue is a growable ring of Task records under
// the stream's mutex. The worker takes the mutex once per task (completion
// of the previous one + pop of the next); producers notify only when the
// worker sleeps, and the worker notifies only when someone waits for it.
struct Stream {
  std::mutex mu;
  std::condition_variable cv, idle_cv;
  std::vector<Task> ring;  // capacity a power of two
  uint64_t head = 0, tail = 0;
  uint64_t enqueued = 0, completed = 0;
  bool stop = false, sleeping = false;
  int idle_waiters = 0;
  std::thread th;
  // Read by every API call on the calling thread: kept off the cache lines
  // the worker writes per task (above), so a call does not miss on them.
  alignas(64) std::atomic<bool> destroyed{false};
  // torch_npu workspace allocator: this stream's block (see malloc_with_stream)
  // Growth happens under ws_mu; a fitting request reads (base, size) without
  // it, as a seqlock (ws_ver odd while a growth rewrites them).
  std::atomic<uint64_t> ws_ver{0};
  std::atomic<uintptr_t> ws_base{0};
  std::atomic<size_t> ws_size{0};
  std::mutex ws_mu;
  Stream() : ring(256) {}
};
std::mutex g_streams_mu;
std::set<Stream *> &streams() {
  static auto *s = new std::set<Stream *>();
  return *s;
}
std::atomic<Stream *> g_default_stream{nullptr};

void worker(Stream *s) {
  Task t;
  bool have = false;
  std::unique_lock<std::mutex> l(s->mu);
  for (;;) {
    if (have) {
      s->completed++;
      if (s->idle_waiters != 0) s->idle_cv.notify_all();
      if (t.heap_args != nullptr) {
        internal::SimScope sc;
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

Stream *new_stream() {
  auto *s = new Stream();
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
    Stream *d = g_default_stream.load(std::memory_order_acquire);
    if (d != nullptr) return d;
    std::lock_guard<std::mutex> g(g_streams_mu);
    d = g_default_stream.load(std::memory_order_relaxed);
    if (d == nullptr) {
      d = new Stream();
      d->th = std::thread(worker, d);
      streams().insert(d);
      g_default_stream.store(d, std::memory_order_release);
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

// Appends a task (filled by `fill` in place, under the stream mutex); returns
// its queue position.
template <class F>
uint64_t enqueue(Stream *s, F &&fill) {
  uint64_t seq;
  bool wake;
  {
    std::lock_guard<std::mutex> l(s->mu);
    if (s->tail - s->head == s->ring.size()) {  // full: double, keeping order
      std::vector<Task> bigger(s->ring.size() * 2);
      const size_t mask = s->ring.size() - 1;
      for (uint64_t i = s->head; i != s->tail; ++i) bigger[i - s->head] = s->ring[i & mask];
      s->tail -= s->head;
      s->head = 0;
      s->ring.swap(bigger);
    }
    Task &t = s->ring[s->tail & (s->ring.size() - 1)];
    fill(t);
    s->tail++;
    seq = ++s->enqueued;
    // One notification per sleep: the worker sets `sleeping` again (under mu)
    // before it waits again, so back-to-back tasks (e.g. lock init + launch)
    // do not each pay for a wake-up.
    wake = s->sleeping;
    s->sleeping = false;
  }
  if (wake) s->cv.notify_one();
  return seq;
}
void wait_until(Stream *s, uint64_t seq) {
  std::unique_lock<std::mutex> l(s->mu);
  s->idle_waiters++;
  s->idle_cv.wait(l, [&] { return s->completed >= seq; });
  s->idle_waiters--;
}
void wait_idle(Stream *s) {
  uint64_t seq;
  {
    std::lock_guard<std::mutex> l(s->mu);
    seq = s->enqueued;
  }
  wait_until(s, seq);
}
void sync_all_streams() {
  std::vector<Stream *> all;
  {
    std::lock_guard<std::mutex> g(g_streams_mu);
    for (Stream *s : streams())
      if (!s->destroyed) all.push_back(s);
  }
  for (Stream *s : all) wait_idle(s);
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
struct Event {
  Stream *s = nullptr;
  uint64_t target = 0;
};
std::mutex g_ev_mu;
std::set<Event *> &events() {
  static auto *s = new std::set<Event *>();
  return *s;
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
std::atomic<int> g_memcpy_model{static_cast<int>(MemcpyModel::kWaits)};

uintptr_t hw_sync_addr() {
  static uintptr_t a = [] {
    uintptr_t p = dev_alloc(64, false);
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
  internal::SimScope sc;
  switch (t.kind) {
    case TaskKind::kPinnedCopy: {
      auto hs = reinterpret_cast<uintptr_t>(t.copy_kind == ACL_MEMCPY_DEVICE_TO_HOST ? t.dst : t.src);
      std::lock_guard<std::mutex> g(g_pin_mu);  // the pinned buffer cannot be freed mid-copy
      if (pinned_id_locked(hs, t.count) != t.id) {
        char buf[200];
        std::snprintf(buf, sizeof buf,
                      "aclrtMemcpyAsync: page-locked host buffer %#lx (%zu bytes) was freed before the queued copy ran",
                      static_cast<unsigned long>(hs), t.count);
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
      for (uint32_t b = 0; b < t.block_dim; ++b) {
        KernelCall call{args, t.count, t.block_dim, b, t.id, t.stream, t.kernel->user};
        t.kernel->fn(call);
      }
      return;
    }
  }
}

}  // namespace

// ================================================================ internal API
namespace internal {
SimScope::SimScope() { ++t_suspend; }
SimScope::~SimScope() { --t_suspend; }

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
  return r;
}

void reset_counters() {
  std::lock_guard<std::mutex> g(g_shard_mu);
  g_counter_baseline = sum_shards_locked();
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
  }
  return "?";
}

std::vector<ErrorReport> errors() {
  internal::SimScope scope;
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

void set_memcpy_model(MemcpyModel m) { g_memcpy_model = static_cast<int>(m); }
void set_device_base_offset(size_t bytes) { g_base_offset = bytes; }

void inject_fault(const char *api, uint64_t nth, aclError code) {
  internal::SimScope scope;
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
void clear_faults() {
  std::lock_guard<std::mutex> g(g_fault_mu);
  for (int i = 0; i < kApiCount; ++i) g_faults[i].clear();
  g_faults_armed.store(false, std::memory_order_release);
}

void reset() {
  reset_counters();
  clear_errors();
  clear_faults();
  internal::probe_reset();
  set_memcpy_model(MemcpyModel::kWaits);
  set_device_base_offset(0);
}

aclrtFuncHandle register_kernel(const char *name, KernelFn fn, void *user) {
  internal::SimScope scope;
  auto *k = new Kernel{name ? name : "kernel", fn, user};
  std::lock_guard<std::mutex> g(g_kern_mu);
  kernels().insert(k);
  return k;
}
uint64_t last_launch_id() { return t_last_launch; }

bool device_read(const void *dev, void *dst, size_t n, const char *who) {
  internal::SimScope scope;
  return dev_read(reinterpret_cast<uintptr_t>(dev), dst, n, who);
}
bool device_write(void *dev, const void *src, size_t n, const char *who) {
  internal::SimScope scope;
  return dev_write(reinterpret_cast<uintptr_t>(dev), src, n, who);
}
void *hardware_sync_addr() { return reinterpret_cast<void *>(hw_sync_addr()); }

void heap_count_begin() {
  t_heap = 0;
  t_counting = true;
}
uint64_t heap_count_end() {
  t_counting = false;
  return t_heap;
}
namespace detail {
void note_heap_alloc() noexcept {
  if (t_counting && t_suspend == 0) ++t_heap;
}
}  // namespace detail

}  // namespace acl_sim

// ================================================================ ACL API
using namespace acl_sim;

extern "C" {

aclError aclrtMalloc(void **devPtr, size_t size, aclrtMemMallocPolicy) {
  internal::SimScope scope;
  if (aclError e = fault(kApiMalloc)) return e;
  if (devPtr == nullptr || size == 0) return ACL_ERROR_INVALID_PARAM;
  uintptr_t p = dev_alloc(size, false);
  if (p == 0) return ACL_ERROR_BAD_ALLOC;
  *devPtr = reinterpret_cast<void *>(p);
  return ACL_SUCCESS;
}

aclError aclrtFree(void *devPtr) {
  internal::SimScope scope;
  if (aclError e = fault(kApiFree)) return e;
  if (!dev_free(reinterpret_cast<uintptr_t>(devPtr), false)) return ACL_ERROR_INVALID_PARAM;
  return ACL_SUCCESS;
}

aclError aclrtMallocHost(void **hostPtr, size_t size) {
  internal::SimScope scope;
  if (aclError e = fault(kApiMallocHost)) return e;
  if (hostPtr == nullptr || size == 0) return ACL_ERROR_INVALID_PARAM;
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
  internal::SimScope scope;
  if (aclError e = fault(kApiFreeHost)) return e;
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
  internal::SimScope scope;
  if (aclError e = fault(kApiMemcpy)) return e;
  if (count > destMax || dst == nullptr || src == nullptr) return ACL_ERROR_INVALID_PARAM;
  C().sync_copies++;
  C().host_blocking++;
  if (static_cast<MemcpyModel>(g_memcpy_model.load()) == MemcpyModel::kWaits) sync_all_streams();
  return do_copy(dst, src, count, kind, nullptr, true, "aclrtMemcpy");
}

aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, aclrtMemcpyKind kind,
                          aclrtStream stream) {
  internal::SimScope scope;
  if (aclError e = fault(kApiMemcpyAsync)) return e;
  if (count > destMax || dst == nullptr || src == nullptr) return ACL_ERROR_INVALID_PARAM;
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
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
  if (host_side != nullptr && pin_id != 0) {
    enqueue(s, fill);
    return ACL_SUCCESS;
  }
  // Pageable host memory (or device-to-device): complete on return.
  if (host_side != nullptr) {
    C().pageable_async_copies++;
    C().host_blocking++;
  }
  uint64_t seq = enqueue(s, fill);
  if (host_side != nullptr) wait_until(s, seq);
  return ACL_SUCCESS;
}

aclError aclrtMemsetAsync(void *devPtr, size_t maxCount, int32_t value, size_t count, aclrtStream stream) {
  internal::SimScope scope;
  if (aclError e = fault(kApiMemsetAsync)) return e;
  if (count > maxCount || devPtr == nullptr) return ACL_ERROR_INVALID_PARAM;
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  C().memsets++;
  enqueue(s, [&](Task &t) {
    t.kind = TaskKind::kMemset;
    t.value = static_cast<uint8_t>(value);
    t.stream = stream;
    t.dst = devPtr;
    t.count = count;
    t.heap_args = nullptr;
  });
  return ACL_SUCCESS;
}

aclError aclrtCreateStream(aclrtStream *stream) {
  internal::SimScope scope;
  if (aclError e = fault(kApiCreateStream)) return e;
  if (stream == nullptr) return ACL_ERROR_INVALID_PARAM;
  *stream = new_stream();
  return ACL_SUCCESS;
}

aclError aclrtDestroyStream(aclrtStream stream) {
  internal::SimScope scope;
  if (aclError e = fault(kApiDestroyStream)) return e;
  if (stream == nullptr) return ACL_ERROR_INVALID_PARAM;
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  wait_idle(s);
  {
    std::lock_guard<std::mutex> l(s->mu);
    s->stop = true;
  }
  s->cv.notify_all();
  s->th.join();
  std::lock_guard<std::mutex> g(g_streams_mu);
  s->destroyed.store(true, std::memory_order_release);  // the object is kept so stale handles are detected
  return ACL_SUCCESS;
}

aclError aclrtSynchronizeStream(aclrtStream stream) {
  internal::SimScope scope;
  if (aclError e = fault(kApiSynchronizeStream)) return e;
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  C().host_blocking++;
  wait_idle(s);
  return ACL_SUCCESS;
}

aclError aclrtSynchronizeDevice(void) {
  internal::SimScope scope;
  if (aclError e = fault(kApiSynchronizeDevice)) return e;
  C().host_blocking++;
  sync_all_streams();
  return ACL_SUCCESS;
}

aclError aclrtCreateEvent(aclrtEvent *event) {
  internal::SimScope scope;
  if (aclError e = fault(kApiCreateEvent)) return e;
  if (event == nullptr) return ACL_ERROR_INVALID_PARAM;
  auto *ev = new Event();
  {
    std::lock_guard<std::mutex> g(g_ev_mu);
    events().insert(ev);
  }
  C().events_created++;
  C().live_events++;
  *event = ev;
  return ACL_SUCCESS;
}

aclError aclrtDestroyEvent(aclrtEvent event) {
  internal::SimScope scope;
  if (aclError e = fault(kApiDestroyEvent)) return e;
  std::lock_guard<std::mutex> g(g_ev_mu);
  auto *ev = static_cast<Event *>(event);
  if (!events().erase(ev)) return ACL_ERROR_RT_INVALID_HANDLE;
  delete ev;
  C().live_events--;
  return ACL_SUCCESS;
}

aclError aclrtRecordEvent(aclrtEvent event, aclrtStream stream) {
  internal::SimScope scope;
  if (aclError e = fault(kApiRecordEvent)) return e;
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  std::lock_guard<std::mutex> g(g_ev_mu);
  auto *ev = static_cast<Event *>(event);
  if (!events().count(ev)) return ACL_ERROR_RT_INVALID_HANDLE;
  std::lock_guard<std::mutex> l(s->mu);
  ev->s = s;
  ev->target = s->enqueued;
  C().events_recorded++;
  return ACL_SUCCESS;
}

aclError aclrtQueryEventStatus(aclrtEvent event, aclrtEventRecordedStatus *status) {
  internal::SimScope scope;
  if (aclError e = fault(kApiQueryEventStatus)) return e;
  if (status == nullptr) return ACL_ERROR_INVALID_PARAM;
  std::lock_guard<std::mutex> g(g_ev_mu);
  auto *ev = static_cast<Event *>(event);
  if (!events().count(ev)) return ACL_ERROR_RT_INVALID_HANDLE;
  C().event_queries++;
  bool done = true;
  if (ev->s != nullptr) {
    std::lock_guard<std::mutex> l(ev->s->mu);
    done = ev->s->completed >= ev->target;
  }
  *status = done ? ACL_EVENT_RECORDED_STATUS_COMPLETE : ACL_EVENT_RECORDED_STATUS_NOT_READY;
  return ACL_SUCCESS;
}

aclError aclrtGetHardwareSyncAddr(void **addr) {
  internal::SimScope scope;
  if (aclError e = fault(kApiGetHardwareSyncAddr)) return e;
  if (addr == nullptr) return ACL_ERROR_INVALID_PARAM;
  *addr = reinterpret_cast<void *>(hw_sync_addr());
  return ACL_SUCCESS;
}

aclError aclrtLaunchKernelWithHostArgs(aclrtFuncHandle funcHandle, uint32_t blockDim, aclrtStream stream,
                                       aclrtLaunchKernelCfg *, void *hostArgs, size_t argsSize,
                                       aclrtPlaceHolderInfo *, size_t) {
  internal::SimScope scope;
  if (aclError e = fault(kApiLaunch)) return e;
  auto *k = static_cast<Kernel *>(funcHandle);
  if (!kernel_known(k)) return ACL_ERROR_RT_INVALID_HANDLE;
  if (blockDim == 0 || (argsSize > 0 && hostArgs == nullptr)) return ACL_ERROR_INVALID_PARAM;
  Stream *s = get_stream(stream);
  if (s == nullptr) return ACL_ERROR_RT_INVALID_HANDLE;
  // The argument bytes are copied now (call time), into the task record.
  uint8_t *heap_args = nullptr;
  if (argsSize > kInlineArgs) {
    heap_args = new uint8_t[argsSize];
    std::memcpy(heap_args, hostArgs, argsSize);
  }
  uint64_t id = ++g_launch_ids;
  t_last_launch = id;
  C().launches++;
  enqueue(s, [&](Task &t) {
    t.kind = TaskKind::kLaunch;
    t.block_dim = blockDim;
    t.stream = stream;
    t.count = argsSize;
    t.id = id;
    t.kernel = k;
    t.heap_args = heap_args;
    if (heap_args == nullptr && argsSize != 0) std::memcpy(t.args, hostArgs, argsSize);
  });
  return ACL_SUCCESS;
}

}  // extern "C"

// ================================================================ workspace allocator
namespace c10_npu {
namespace NPUWorkspaceAllocator {
namespace {
void release_dataptr(void *) { C().live_workspace_dataptrs--; }
}  // namespace

c10::DataPtr malloc_with_stream(size_t size, aclrtStream stream) {
  internal::SimScope scope;
  C().allocator_requests++;
  if (aclError e = fault(kApiAllocator)) {
    if (e == kAllocReturnsNull) return c10::DataPtr();
    char buf[160];
    std::snprintf(buf, sizeof buf, "acl_sim: NPU workspace allocator failed to provide %zu bytes (injected code %d)",
                  size, e);
    throw std::runtime_error(buf);
  }
  Stream *s = get_stream(stream);
  if (s == nullptr) throw std::runtime_error("acl_sim: malloc_with_stream on an invalid stream");
  if (size == 0) return c10::DataPtr();
  // The block lives in the stream object. Fast path: the request fits.
  const uint64_t v1 = s->ws_ver.load(std::memory_order_acquire);
  if ((v1 & 1) == 0) {
    const uintptr_t base = s->ws_base.load(std::memory_order_relaxed);
    const size_t have = s->ws_size.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s->ws_ver.load(std::memory_order_relaxed) == v1 && size <= have) {
      C().live_workspace_dataptrs++;
      return c10::DataPtr(reinterpret_cast<void *>(base), nullptr, &release_dataptr);
    }
  }
  std::lock_guard<std::mutex> g(s->ws_mu);
  if (size > s->ws_size.load(std::memory_order_relaxed)) {
    C().allocator_growths++;
    C().host_blocking++;
    sync_all_streams();
    const uint64_t v = s->ws_ver.load(std::memory_order_relaxed);
    s->ws_ver.store(v + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    const uintptr_t old = s->ws_base.load(std::memory_order_relaxed);
    if (old != 0) dev_free(old, true);
    constexpr size_t k2M = size_t(2) << 20;
    size_t want = (size + 32 + k2M - 1) / k2M * k2M;
    uintptr_t p = dev_alloc(want, true);
    s->ws_base.store(p, std::memory_order_relaxed);
    s->ws_size.store(p == 0 ? 0 : want, std::memory_order_relaxed);
    s->ws_ver.store(v + 2, std::memory_order_release);
    if (p == 0) throw std::runtime_error("acl_sim: NPU workspace allocator out of simulated memory");
  }
  C().live_workspace_dataptrs++;
  return c10::DataPtr(reinterpret_cast<void *>(s->ws_base.load(std::memory_order_relaxed)), nullptr,
                      &release_dataptr);
}
}  // namespace NPUWorkspaceAllocator
}  // namespace c10_npu
