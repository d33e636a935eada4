// torch-npu-inductor-patches: per-launch workspace and sync-lock memory for
// Triton-Ascend kernels launched from Inductor's generated C++ wrapper.
//
// Header-only: generated wrappers compile it in. It uses only public ACL names
// (acl/acl.h) and torch_npu's workspace allocator entry point, so the same
// source compiles against the real CANN + torch_npu headers and against the
// host simulation in ../acl_sim (the build picks the include root).
//
// ---------------------------------------------------------------------------
// Usage, inside a launch lambda (one launch at a time per thread):
//
//   auto res = torch_npu_patchset::acquire_launch_resources(
//       "triton_foo", stream, grid_0, grid_1, grid_2, block_num,
//       workspace_per_block, layout);
//   args.sync_block_lock = res.locks();
//   args.workspace_addr = res.workspace();
//   aclrtLaunchKernelWithHostArgs(..., stream, ...);
//   // `res` goes out of scope after the launch has been issued.
//
// Destroy (or let go out of scope) a LaunchResources only after the launch
// that uses it has been issued on the stream, and do not hold two of them on
// one thread at once: see "Stream turn" below.
//
// ---------------------------------------------------------------------------
// Sizes (checked 64-bit arithmetic; overflow -> std::overflow_error, a total
// above the cap -> std::length_error; both thrown before any allocation, the
// message names the kernel and the numbers):
//
//   workspace_bytes = workspace_per_block * grid_x * grid_y * grid_z
//                     (triton-ascend's rule: per *program*, not per launched block)
//   P (participants) = block_num * participant_factor
//   lock_bytes: legacy  = legacy_slots * 8
//               packed  = ordered * 64 + unordered * (1 + 2 * P) * 64
//
// Lock content at kernel start (int64 slots):
//   legacy layout:   slot[0 .. legacy_slots)            = init_value
//   packed layout:   [ordered region]   ordered locks, 8 slots (one 64-byte
//                                        line) each, every slot = init_value
//                    [unordered region] unordered locks, (1 + 2P) * 8 slots
//                                        each; slot 0 of each lock = P, the
//                                        others 0
//   Legacy and packed counts together are rejected (std::invalid_argument).
//
// Memory: ONE request to c10_npu::NPUWorkspaceAllocator::malloc_with_stream
// for the stream, carved as
//
//   base' = round_up(base, 512)
//   [base', base' + lock_bytes)                           locks
//   [base' + round_up(lock_bytes, 512), ... + workspace)   workspace
//
// and total_bytes() = (end of the last region) + 511 bytes of slack, so the
// alignment never depends on the allocator's base alignment. Zero-sized parts
// get nullptr; a launch that needs neither part makes no request at all.
//
// Why 512 bytes: a multiple of the 64-byte line that each ordered lock owns
// and of the 64-byte alignment older CANN demands for async copies; it is also
// the granularity torch_npu's own device allocators round blocks to, so the
// regions start exactly where a separately allocated buffer would.
//
// Why malloc_with_stream and not at_npu::native::allocate_workspace: the
// latter wraps the same DataPtr into an at::Tensor (storage, TensorImpl,
// dispatcher-visible metadata). A launcher needs the address and an owner,
// i.e. the c10::DataPtr, nothing else; skipping the tensor saves host work on
// every launch and keeps the helper free of ATen.
//
// That allocator keeps one block per stream and hands the same pointer to
// every request that fits (DOMAIN.md section 4). Taking one request per launch
// and carving it is what keeps locks and workspace disjoint; stream order keeps
// consecutive launches on one stream apart.
//
// Stream turn: because every request on a stream returns the same memory, the
// sequence "request, initialise locks, launch" must not interleave with
// another thread doing the same on that stream (the second initialisation
// would land before the first kernel). acquire_launch_resources therefore
// takes a per-stream turn (64 striped gates, no allocation; uncontended it is
// one CAS to take and one exchange to give back, and only a contended take
// blocks) that the returned LaunchResources releases when destroyed. Acquiring again for the same stream
// on a thread that still holds a LaunchResources for it throws
// std::logic_error instead of deadlocking (the two would alias).
//
// Lock initialisation is stream-ordered, before the kernel:
//   * content whose bytes are all equal (all zero; init -1 -> 0xFF; any
//     legacy/ordered-only content whose init_value repeats one byte):
//     aclrtMemsetAsync;
//   * otherwise aclrtMemcpyAsync (host to device) from a page-locked buffer
//     (aclrtMallocHost) in a process-wide cache keyed by (layout, init_value,
//     P). Entries are immutable once filled; lookup allocates nothing, and a
//     repeated hit (same thread, stream already known to the entry) takes no
//     mutex (a per-thread memo validated by the entry's incarnation). The
//     cache is bounded (default 64 entries / 64 MiB); an evicted buffer gets
//     an ACL event recorded on every stream that copied from it and is freed
//     only after aclrtQueryEventStatus reports all of them complete (polled,
//     never waited for, at later acquires).
// The helper never calls aclrtMemcpy or any synchronising API, and once warm
// performs no host heap allocation per launch.
//
// Errors: any ACL failure -> std::runtime_error
//   "torch_npu_patchset: kernel '<name>': <call> failed with error 0x<code>"
// and the allocator failing (exception or empty DataPtr) -> std::runtime_error
// naming the kernel and the byte count. Nothing stays allocated for the
// failed launch: the DataPtr is released, a pinned buffer made for it freed.
// Cache housekeeping (eviction, reaping) may also surface ACL errors this way;
// the cache stays consistent and retries later.
//
// Configuration (environment, read once per process):
//   TORCH_NPU_PATCHSET_MAX_LAUNCH_BYTES   cap on total_bytes() per launch,
//                                         default 8 GiB (8589934592)
//   TORCH_NPU_PATCHSET_PINNED_CACHE_ENTRIES  default 64 (minimum 1)
//   TORCH_NPU_PATCHSET_PINNED_CACHE_BYTES    default 64 MiB
// Values are plain decimal byte/entry counts; an invalid value is reported on
// stderr once and the default is used. set_max_launch_bytes() and
// set_pinned_cache_limits() override them programmatically.
//
// Thread safety: all functions may be called from any thread. Streams that a
// cached pinned buffer was copied on must stay valid while the buffer is
// cached (torch_npu's streams live for the whole process).
#pragma once

#include <acl/acl.h>
#include <torch_npu/csrc/core/npu/NPUWorkspaceAllocator.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace torch_npu_patchset {

struct LockLayout {                 // what a kernel's lock memory must hold at launch
  uint64_t legacy_slots = 0;        // metadata lock_num: that many int64 slots, each = init_value
  uint32_t ordered = 0;             // packed sync_block_lock_layout, low 32 bits: ordered locks
  uint32_t unordered = 0;           // high 32 bits: unordered locks
  uint32_t participant_factor = 1;  // 2 for mix-mode kernels with automatic sub-block tiling
  int64_t init_value = 0;
};

constexpr uint64_t kRegionAlignment = 512;
constexpr uint64_t kDefaultMaxLaunchBytes = uint64_t(8) << 30;
constexpr uint64_t kDefaultPinnedCacheEntries = 64;
constexpr uint64_t kDefaultPinnedCacheBytes = uint64_t(64) << 20;

// What acquire_launch_resources will request, computed without side effects.
struct LaunchSizes {
  uint64_t participants = 0;      // P (0 when there are no unordered locks)
  uint64_t lock_bytes = 0;
  uint64_t workspace_bytes = 0;
  uint64_t workspace_offset = 0;  // from the aligned base
  uint64_t total_bytes = 0;       // the allocator request (0: no request)
};

namespace detail {

inline const char *kname(const char *k) noexcept { return (k != nullptr && *k != '\0') ? k : "<unnamed>"; }

[[noreturn]] __attribute__((noinline, cold)) inline void throw_acl(const char *kernel, const char *call, aclError code) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "torch_npu_patchset: kernel '%s': %s failed with error 0x%x", kname(kernel), call,
                static_cast<unsigned>(code));
  throw std::runtime_error(buf);
}

[[noreturn]] __attribute__((noinline, cold)) inline void throw_overflow(const char *kernel, const char *what, uint64_t a, uint64_t b) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "torch_npu_patchset: kernel '%s': %s overflows 64 bits (%llu and %llu)", kname(kernel), what,
                static_cast<unsigned long long>(a), static_cast<unsigned long long>(b));
  throw std::overflow_error(buf);
}

inline uint64_t add(const char *kernel, const char *what, uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_expect(__builtin_add_overflow(a, b, &r), 0)) throw_overflow(kernel, what, a, b);
  return r;
}
inline uint64_t align_up(const char *kernel, const char *what, uint64_t v) {
  return add(kernel, what, v, kRegionAlignment - 1) & ~(kRegionAlignment - 1);
}

// Strict decimal parse of an environment variable; invalid -> warning + default.
inline uint64_t env_u64(const char *name, uint64_t def, uint64_t min_value) {
  const char *s = std::getenv(name);
  if (s == nullptr || *s == '\0') return def;
  bool ok = *s >= '0' && *s <= '9';
  char *end = nullptr;
  errno = 0;
  unsigned long long v = ok ? std::strtoull(s, &end, 10) : 0;
  ok = ok && errno == 0 && end != nullptr && *end == '\0' && v >= min_value;
  if (!ok) {
    std::fprintf(stderr, "torch_npu_patchset: ignoring invalid %s='%s' (want a decimal integer >= %llu); using %llu\n",
                 name, s, static_cast<unsigned long long>(min_value), static_cast<unsigned long long>(def));
    return def;
  }
  return static_cast<uint64_t>(v);
}

inline std::atomic<uint64_t> &max_launch_bytes_storage() {
  static std::atomic<uint64_t> v{env_u64("TORCH_NPU_PATCHSET_MAX_LAUNCH_BYTES", kDefaultMaxLaunchBytes, 1)};
  return v;
}

}  // namespace detail

// Cap on total_bytes() of one launch (env TORCH_NPU_PATCHSET_MAX_LAUNCH_BYTES, default 8 GiB).
inline uint64_t max_launch_bytes() { return detail::max_launch_bytes_storage().load(std::memory_order_relaxed); }
inline void set_max_launch_bytes(uint64_t bytes) {
  detail::max_launch_bytes_storage().store(bytes, std::memory_order_relaxed);
}

namespace detail {
// Error paths of compute_launch_sizes / acquire_launch_resources: out of line
// and cold, so the success path carries no message formatting (and stays small
// enough to inline).
[[noreturn]] __attribute__((noinline, cold)) inline void throw_both_layouts(const char *kernel,
                                                                          const LockLayout &locks) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "torch_npu_patchset: kernel '%s': lock layout has both a legacy slot count (%llu) and a packed "
                "layout (%u ordered, %u unordered); expected one of them",
                kname(kernel), static_cast<unsigned long long>(locks.legacy_slots), locks.ordered, locks.unordered);
  throw std::invalid_argument(buf);
}
[[noreturn]] __attribute__((noinline, cold)) inline void throw_no_participants(const char *kernel, uint32_t block_num,
                                                                             const LockLayout &locks) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "torch_npu_patchset: kernel '%s': %u unordered locks need a positive participant count, got "
                "block_num %u x participant_factor %u",
                kname(kernel), locks.unordered, block_num, locks.participant_factor);
  throw std::invalid_argument(buf);
}
[[noreturn]] __attribute__((noinline, cold)) inline void throw_workspace_overflow(const char *kernel,
                                                                                uint64_t workspace_per_block,
                                                                                uint32_t grid_x, uint32_t grid_y,
                                                                                uint32_t grid_z) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "torch_npu_patchset: kernel '%s': workspace size overflows 64 bits: %llu bytes per block x grid "
                "%u x %u x %u",
                kname(kernel), static_cast<unsigned long long>(workspace_per_block), grid_x, grid_y, grid_z);
  throw std::overflow_error(buf);
}
[[noreturn]] __attribute__((noinline, cold)) inline void throw_lock_overflow(const char *kernel, uint32_t block_num,
                                                                           const LockLayout &locks) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "torch_npu_patchset: kernel '%s': lock size overflows 64 bits: legacy slots %llu, ordered %u, "
                "unordered %u, participants %u blocks x %u",
                kname(kernel), static_cast<unsigned long long>(locks.legacy_slots), locks.ordered, locks.unordered,
                block_num, locks.participant_factor);
  throw std::overflow_error(buf);
}
[[noreturn]] __attribute__((noinline, cold)) inline void throw_over_cap(const char *kernel, const LaunchSizes &s,
                                                                      uint64_t workspace_per_block, uint32_t grid_x,
                                                                      uint32_t grid_y, uint32_t grid_z, uint64_t cap) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "torch_npu_patchset: kernel '%s': launch needs %llu bytes (locks %llu, workspace %llu = %llu per "
                "block x grid %u x %u x %u), over the limit of %llu bytes (TORCH_NPU_PATCHSET_MAX_LAUNCH_BYTES)",
                kname(kernel), static_cast<unsigned long long>(s.total_bytes),
                static_cast<unsigned long long>(s.lock_bytes), static_cast<unsigned long long>(s.workspace_bytes),
                static_cast<unsigned long long>(workspace_per_block), grid_x, grid_y, grid_z,
                static_cast<unsigned long long>(cap));
  throw std::length_error(buf);
}
}  // namespace detail

__attribute__((always_inline)) inline LaunchSizes compute_launch_sizes(const char *kernel_name, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                                        uint32_t block_num, uint64_t workspace_per_block, const LockLayout &locks) {
  using namespace detail;
  LaunchSizes s;
  if (grid_x == 0 || grid_y == 0 || grid_z == 0) return s;
  const bool packed = locks.ordered != 0 || locks.unordered != 0;
  if (__builtin_expect(packed && locks.legacy_slots != 0, 0)) throw_both_layouts(kernel_name, locks);
  if (__builtin_expect(locks.unordered != 0 && (block_num == 0 || locks.participant_factor == 0), 0))
    throw_no_participants(kernel_name, block_num, locks);
  uint64_t ws = 0;
  if (__builtin_mul_overflow(workspace_per_block, uint64_t(grid_x), &ws) ||
      __builtin_mul_overflow(ws, uint64_t(grid_y), &ws) || __builtin_mul_overflow(ws, uint64_t(grid_z), &ws))
    throw_workspace_overflow(kernel_name, workspace_per_block, grid_x, grid_y, grid_z);
  uint64_t lock = 0;
  bool lock_overflow = false;
  if (!packed) {
    lock_overflow = __builtin_mul_overflow(locks.legacy_slots, uint64_t(8), &lock);
  } else {
    lock = uint64_t(locks.ordered) * 64;  // < 2^38
    if (locks.unordered != 0) {
      s.participants = uint64_t(block_num) * locks.participant_factor;  // < 2^64: product of two 32-bit values
      uint64_t per = 0, un = 0;
      lock_overflow = __builtin_mul_overflow(s.participants, uint64_t(2), &per) ||
                      __builtin_add_overflow(per, uint64_t(1), &per) ||
                      __builtin_mul_overflow(per, uint64_t(64), &per) ||
                      __builtin_mul_overflow(per, uint64_t(locks.unordered), &un) ||
                      __builtin_add_overflow(lock, un, &lock);
    }
  }
  if (__builtin_expect(lock_overflow, 0)) throw_lock_overflow(kernel_name, block_num, locks);
  s.lock_bytes = lock;
  s.workspace_bytes = ws;
  if (lock == 0 && ws == 0) return s;
  s.workspace_offset = (lock != 0 && ws != 0) ? align_up(kernel_name, "workspace offset", lock) : 0;
  uint64_t end =
      ws != 0 ? add(kernel_name, "launch bytes (workspace offset + workspace)", s.workspace_offset, ws) : lock;
  s.total_bytes = add(kernel_name, "launch bytes (+ alignment slack)", end, kRegionAlignment - 1);
  const uint64_t cap = max_launch_bytes();
  if (__builtin_expect(s.total_bytes > cap, 0))
    throw_over_cap(kernel_name, s, workspace_per_block, grid_x, grid_y, grid_z, cap);
  return s;
}

// Writes the lock content for `layout` (see the top of this file) into `out`.
inline void fill_lock_content(const LockLayout &layout, uint64_t participants, int64_t *out, uint64_t slots) noexcept {
  if (layout.ordered == 0 && layout.unordered == 0) {
    for (uint64_t i = 0; i < slots; ++i) out[i] = layout.init_value;
    return;
  }
  uint64_t i = 0;
  const uint64_t ordered_slots = uint64_t(layout.ordered) * 8;
  for (; i < ordered_slots && i < slots; ++i) out[i] = layout.init_value;
  const uint64_t per = (1 + 2 * participants) * 8;
  for (uint64_t u = 0; u < layout.unordered; ++u) {
    for (uint64_t j = 0; j < per && i < slots; ++j, ++i) out[i] = j == 0 ? static_cast<int64_t>(participants) : 0;
  }
}

namespace detail {

// True (and the byte) when the whole lock content is one repeated byte.
inline bool uniform_byte(const LockLayout &layout, uint8_t *byte) noexcept {
  if (layout.unordered != 0) return false;  // slot 0 = P >= 1, the rest 0
  const uint64_t v = static_cast<uint64_t>(layout.init_value);
  if (v != (v & 0xFF) * UINT64_C(0x0101010101010101)) return false;
  *byte = static_cast<uint8_t>(v);
  return true;
}

// ---- per-stream turn --------------------------------------------------------
// A gate is a three-state lock word (0 free, 1 held, 2 held with possible
// waiters; Drepper's "mutex2"): an uncontended take is one CAS and a release
// one exchange. Only a contended take blocks, on the gate's condition variable
// (the release then takes the gate mutex and notifies, so no wake-up is lost).
// `owner` and `stream` are written only by the holder; a thread reading its own
// identity in `owner` therefore holds the gate.
struct alignas(64) StreamGate {
  std::atomic<uint32_t> state{0};
  std::atomic<uintptr_t> owner{0};        // thread_self() of the holder, 0 when free
  std::atomic<aclrtStream> stream{nullptr};
  std::mutex m;                           // contended path only
  std::condition_variable cv;
};
constexpr size_t kStreamGates = 64;
inline StreamGate *stream_gates() {
  static StreamGate *g = new StreamGate[kStreamGates];  // never destroyed: usable during static teardown
  return g;
}
inline size_t gate_index(aclrtStream s) noexcept {
  uint64_t x = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(s));
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return static_cast<size_t>(x % kStreamGates);
}
// A nonzero identity of the calling thread (the address of a thread_local).
inline uintptr_t thread_self() noexcept {
  static thread_local char marker;
  return reinterpret_cast<uintptr_t>(&marker);
}

class StreamTurn {
 public:
  StreamTurn() noexcept = default;
  StreamTurn(StreamTurn &&o) noexcept : gate_(o.gate_) { o.gate_ = nullptr; }
  StreamTurn &operator=(StreamTurn &&o) noexcept {
    if (this != &o) {
      release();
      gate_ = o.gate_;
      o.gate_ = nullptr;
    }
    return *this;
  }
  StreamTurn(const StreamTurn &) = delete;
  StreamTurn &operator=(const StreamTurn &) = delete;
  ~StreamTurn() { release(); }

  static StreamTurn take(const char *kernel, aclrtStream stream) {
    StreamGate &g = stream_gates()[gate_index(stream)];
    const uintptr_t me = thread_self();
    if (__builtin_expect(g.owner.load(std::memory_order_relaxed) == me, 0)) {  // only this thread stores `me` there
      if (g.stream.load(std::memory_order_relaxed) == stream) throw_reentrant(kernel);
      return StreamTurn();  // another stream sharing the gate: the outer holder already excludes others
    }
    uint32_t expected = 0;
    if (__builtin_expect(
            !g.state.compare_exchange_strong(expected, 1, std::memory_order_acquire, std::memory_order_relaxed), 0))
      wait_contended(g);
    g.owner.store(me, std::memory_order_relaxed);
    g.stream.store(stream, std::memory_order_relaxed);
    StreamTurn t;
    t.gate_ = &g;
    return t;
  }

  void release() noexcept {
    if (gate_ == nullptr) return;
    StreamGate &g = *gate_;
    gate_ = nullptr;
    g.owner.store(0, std::memory_order_relaxed);
    g.stream.store(nullptr, std::memory_order_relaxed);
    if (__builtin_expect(g.state.exchange(0, std::memory_order_release) == 2, 0)) wake_one(g);
  }

 private:
  [[noreturn]] __attribute__((noinline, cold)) static void throw_reentrant(const char *kernel) {
    char buf[512];
    std::snprintf(buf, sizeof buf,
                  "torch_npu_patchset: kernel '%s': this thread still holds launch resources for the same stream; "
                  "issue that launch and release them first (the workspace allocator would hand both launches "
                  "the same memory)",
                  kname(kernel));
    throw std::logic_error(buf);
  }
  __attribute__((noinline)) static void wait_contended(StreamGate &g) {
    std::unique_lock<std::mutex> l(g.m);
    while (g.state.exchange(2, std::memory_order_acquire) != 0) g.cv.wait(l);
  }
  __attribute__((noinline)) static void wake_one(StreamGate &g) noexcept {
    { std::lock_guard<std::mutex> l(g.m); }  // a waiter between its exchange and wait holds m
    g.cv.notify_one();
  }

  StreamGate *gate_ = nullptr;
};

}  // namespace detail

struct PinnedCacheStats {
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t parked = 0;  // evicted buffers waiting for their copies
  uint64_t hits = 0, misses = 0, evictions = 0, freed = 0;
  uint64_t max_entries = 0, max_bytes = 0;
};

namespace detail {

struct LockContentKey {
  uint64_t legacy_slots;
  uint32_t ordered;
  uint32_t unordered;
  uint64_t participants;
  int64_t init_value;
  bool operator==(const LockContentKey &o) const noexcept {
    return legacy_slots == o.legacy_slots && ordered == o.ordered && unordered == o.unordered &&
           participants == o.participants && init_value == o.init_value;
  }
};

// Process-wide cache of page-locked lock images (see the top of this file).
//
// Hit path without the cache mutex: each thread keeps a small memo of the
// entries it used last, as (entry, incarnation). Entry objects are pooled and
// never freed, so a memo pointer is always safe to read; `state` carries the
// incarnation and an "evicted" bit, so a recycled or evicting entry never
// matches a memo. A lock-free hit is only taken when the stream is already in
// the entry's stream list (adding one needs the mutex), and it is bracketed by
// `users`:
//   reader:  users++; state == memo? (else slow path); enqueue the copy;
//            state still == memo? else register the stream as "late"; users--
//   evictor: state |= evicted; record an event on every listed stream; park
//   reaper:  frees only when users == 0, every late stream got an event
//            recorded (after the late copy was enqueued) and all events completed.
// All four state/users accesses are seq_cst, so either the reader sees the
// eviction or the evictor's events are recorded after the reader's copy on a
// stream that is listed; a copy is therefore always covered by an event.
// LRU is approximate on the lock-free path: a hit stamps the current tick
// (advanced by every locked operation) instead of advancing it.
class PinnedLockCache {
 public:
  static PinnedLockCache &instance() {
    static PinnedLockCache *c = new PinnedLockCache();  // never destroyed: ACL may be gone at exit
    return *c;
  }

  // Enqueue the copy of the lock image for `key` into `dst` on `stream`.
  void copy_locks(const char *kernel, aclrtStream stream, void *dst, const LockContentKey &key,
                  const LockLayout &layout, uint64_t bytes) {
    Memo &m = memo();
    for (MemoSlot &slot : m.slots) {
      if (slot.entry == nullptr || slot.bytes != bytes || !(slot.key == key)) continue;
      Entry &e = *slot.entry;
      e.users.fetch_add(1, std::memory_order_seq_cst);
      if (e.state.load(std::memory_order_seq_cst) != slot.state || !e.has_stream_fast(stream)) {
        e.users.fetch_sub(1, std::memory_order_release);
        break;  // evicted, recycled, or a new stream for it: locked path
      }
      const aclError rc = aclrtMemcpyAsync(dst, bytes, e.host, bytes, ACL_MEMCPY_HOST_TO_DEVICE, stream);
      if (rc == ACL_SUCCESS) {
        if (e.state.load(std::memory_order_seq_cst) != slot.state) note_late(e, stream);
        e.last_use.store(tick_.load(std::memory_order_relaxed), std::memory_order_relaxed);
        e.fast_hits.fetch_add(1, std::memory_order_relaxed);
      }
      e.users.fetch_sub(1, std::memory_order_release);
      if (rc != ACL_SUCCESS) throw_acl(kernel, "aclrtMemcpyAsync", rc);
      return;
    }
    copy_locks_locked(kernel, stream, dst, key, layout, bytes, m);
  }

  void reap_if_parked(const char *kernel) {
    if (!has_parked_.load(std::memory_order_acquire)) return;
    std::lock_guard<std::mutex> g(mu_);
    reap_locked(kernel);
  }

  // Evicts every entry; returns how many evicted buffers still wait for copies.
  uint64_t trim(const char *who) {
    std::lock_guard<std::mutex> g(mu_);
    while (!entries_.empty()) evict_lru_locked(who);
    reap_locked(who);
    return parked_.size();
  }

  void set_limits(uint64_t max_entries, uint64_t max_bytes) {
    std::lock_guard<std::mutex> g(mu_);
    max_entries_ = max_entries < 1 ? 1 : max_entries;
    max_bytes_ = max_bytes;
    entries_.reserve(max_entries_ + 1);
    while (entries_.size() > max_entries_ || (bytes_ > max_bytes_ && !entries_.empty())) evict_lru_locked("<pinned cache>");
  }

  PinnedCacheStats stats() {
    std::lock_guard<std::mutex> g(mu_);
    PinnedCacheStats s;
    s.entries = entries_.size();
    s.bytes = bytes_;
    s.parked = parked_.size();
    s.hits = hits_;
    for (const Entry *e : entries_) s.hits += e->fast_hits.load(std::memory_order_relaxed);
    for (const Parked &p : parked_) s.hits += p.entry->fast_hits.load(std::memory_order_relaxed);
    s.misses = misses_;
    s.evictions = evictions_;
    s.freed = freed_;
    s.max_entries = max_entries_;
    s.max_bytes = max_bytes_;
    return s;
  }

 private:
  static constexpr uint32_t kInlineStreams = 16;
  static constexpr uint64_t kEvicted = 1;  // low bit of Entry::state; the rest is the incarnation
  struct Entry {
    std::atomic<uint64_t> state{kEvicted};  // (incarnation << 1) | evicted; pooled entries are "evicted"
    std::atomic<uint32_t> users{0};         // lock-free hits in progress
    std::atomic<uint32_t> nstreams{0};      // published prefix of `streams`
    std::atomic<uint64_t> last_use{0};
    std::atomic<uint64_t> fast_hits{0};
    std::atomic<aclrtStream> streams[kInlineStreams] = {};
    // Below: written under mu_ only, while the entry is not live (or, for the
    // vectors, read under mu_ only). `host` is read lock-free after `state`.
    LockContentKey key{};
    void *host = nullptr;
    uint64_t bytes = 0;
    std::vector<aclrtStream> more_streams;  // beyond kInlineStreams (those always take the locked path)
    std::vector<aclrtStream> late_streams;  // copied lock-free while eviction began: need an event

    bool has_stream_fast(aclrtStream s) const noexcept {
      const uint32_t n = nstreams.load(std::memory_order_acquire);
      for (uint32_t i = 0; i < n; ++i)
        if (streams[i].load(std::memory_order_relaxed) == s) return true;
      return false;
    }
  };
  struct Parked {
    Entry *entry = nullptr;
    std::vector<aclrtEvent> events;  // recorded at eviction on each of its streams (+ late ones at reaping)
  };
  struct MemoSlot {
    Entry *entry;
    uint64_t state;
    uint64_t bytes;
    LockContentKey key;
  };
  static constexpr int kMemoSlots = 4;
  struct Memo {
    MemoSlot slots[kMemoSlots];
    unsigned next;
  };
  static Memo &memo() noexcept {
    static thread_local Memo m{};  // trivially constructible: no TLS guard, no allocation
    return m;
  }

  PinnedLockCache()
      : max_entries_(env_u64("TORCH_NPU_PATCHSET_PINNED_CACHE_ENTRIES", kDefaultPinnedCacheEntries, 1)),
        max_bytes_(env_u64("TORCH_NPU_PATCHSET_PINNED_CACHE_BYTES", kDefaultPinnedCacheBytes, 0)) {
    entries_.reserve(max_entries_ + 1);
  }

  static void remember(Memo &m, Entry *e, uint64_t state, const LockContentKey &key, uint64_t bytes) noexcept {
    for (MemoSlot &slot : m.slots) {
      if (slot.entry != nullptr && slot.bytes == bytes && slot.key == key) {
        slot = MemoSlot{e, state, bytes, key};
        return;
      }
    }
    m.slots[m.next++ % kMemoSlots] = MemoSlot{e, state, bytes, key};
  }

  void note_late(Entry &e, aclrtStream s) {
    std::lock_guard<std::mutex> g(mu_);
    e.late_streams.push_back(s);  // rare: only when an eviction raced this hit
  }

  // Requires mu_. Adds `s` to the entry's streams (first copy on this stream only).
  static void note_stream_locked(Entry &e, aclrtStream s) {
    const uint32_t n = e.nstreams.load(std::memory_order_relaxed);
    for (uint32_t i = 0; i < n; ++i)
      if (e.streams[i].load(std::memory_order_relaxed) == s) return;
    for (aclrtStream x : e.more_streams)
      if (x == s) return;
    if (n < kInlineStreams) {
      e.streams[n].store(s, std::memory_order_relaxed);
      e.nstreams.store(n + 1, std::memory_order_release);
    } else {
      e.more_streams.push_back(s);
    }
  }

  void copy_locks_locked(const char *kernel, aclrtStream stream, void *dst, const LockContentKey &key,
                         const LockLayout &layout, uint64_t bytes, Memo &m) {
    std::lock_guard<std::mutex> g(mu_);
    reap_locked(kernel);
    for (Entry *e : entries_) {
      if (e->key == key && e->bytes == bytes) {
        // Listed before the copy is queued: an eviction records an event after it.
        note_stream_locked(*e, stream);
        aclError rc = aclrtMemcpyAsync(dst, bytes, e->host, bytes, ACL_MEMCPY_HOST_TO_DEVICE, stream);
        if (rc != ACL_SUCCESS) throw_acl(kernel, "aclrtMemcpyAsync", rc);
        e->last_use.store(tick_.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        ++hits_;
        remember(m, e, e->state.load(std::memory_order_relaxed), key, bytes);
        return;
      }
    }
    ++misses_;
    while (!entries_.empty() && (entries_.size() >= max_entries_ || bytes_ + bytes > max_bytes_)) evict_lru_locked(kernel);
    if (parked_.capacity() < parked_.size() + max_entries_) parked_.reserve(parked_.size() + max_entries_);
    if (pool_.capacity() < pool_.size() + parked_.size() + max_entries_ + 1)
      pool_.reserve(pool_.size() + parked_.size() + max_entries_ + 1);
    Entry *e = nullptr;
    if (!pool_.empty()) {
      e = pool_.back();
      pool_.pop_back();
    } else {
      e = new Entry();  // cold path only; entries are pooled, never freed
    }
    void *host = nullptr;
    aclError rc = aclrtMallocHost(&host, bytes);
    if (rc != ACL_SUCCESS) {
      pool_.push_back(e);  // capacity reserved above
      throw_acl(kernel, "aclrtMallocHost", rc);
    }
    fill_lock_content(layout, key.participants, static_cast<int64_t *>(host), bytes / 8);
    rc = aclrtMemcpyAsync(dst, bytes, host, bytes, ACL_MEMCPY_HOST_TO_DEVICE, stream);
    if (rc != ACL_SUCCESS) {
      (void)aclrtFreeHost(host);  // nothing was queued from it
      pool_.push_back(e);
      throw_acl(kernel, "aclrtMemcpyAsync", rc);
    }
    e->key = key;
    e->bytes = bytes;
    e->host = host;
    e->more_streams.clear();
    e->late_streams.clear();
    e->fast_hits.store(0, std::memory_order_relaxed);
    e->streams[0].store(stream, std::memory_order_relaxed);
    e->nstreams.store(1, std::memory_order_relaxed);
    e->last_use.store(tick_.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    const uint64_t live = (e->state.load(std::memory_order_relaxed) | kEvicted) + 1;  // next incarnation, live
    e->state.store(live, std::memory_order_seq_cst);  // publishes the fields above
    entries_.push_back(e);  // capacity reserved: cannot throw
    bytes_ += bytes;
    remember(m, e, live, key, bytes);
  }

  void evict_lru_locked(const char *kernel) {
    size_t v = 0;
    for (size_t i = 1; i < entries_.size(); ++i)
      if (entries_[i]->last_use.load(std::memory_order_relaxed) < entries_[v]->last_use.load(std::memory_order_relaxed))
        v = i;
    Entry &e = *entries_[v];
    Parked p;
    p.entry = &e;
    const uint32_t n = e.nstreams.load(std::memory_order_relaxed);
    p.events.reserve(n + e.more_streams.size());
    parked_.reserve(parked_.size() + 1);
    const uint64_t live = e.state.load(std::memory_order_relaxed);
    // Evicted first: a lock-free hit that still sees "live" after queuing its
    // copy queued it before the events below are recorded.
    e.state.store(live | kEvicted, std::memory_order_seq_cst);
    auto fail = [&](const char *call, aclError rc) {
      for (aclrtEvent x : p.events) (void)aclrtDestroyEvent(x);
      e.state.store(live, std::memory_order_seq_cst);  // the entry stays cached and valid
      throw_acl(kernel, call, rc);
    };
    auto record = [&](aclrtStream s) {
      aclrtEvent ev = nullptr;
      aclError rc = aclrtCreateEvent(&ev);
      if (rc != ACL_SUCCESS) fail("aclrtCreateEvent", rc);
      p.events.push_back(ev);
      rc = aclrtRecordEvent(ev, s);
      if (rc != ACL_SUCCESS) fail("aclrtRecordEvent", rc);
    };
    for (uint32_t i = 0; i < n; ++i) record(e.streams[i].load(std::memory_order_relaxed));
    for (aclrtStream s : e.more_streams) record(s);
    parked_.push_back(std::move(p));  // capacity reserved above
    has_parked_.store(true, std::memory_order_release);
    bytes_ -= e.bytes;
    if (v + 1 != entries_.size()) entries_[v] = entries_.back();
    entries_.pop_back();
    ++evictions_;
  }

  // Frees parked buffers whose events all completed. Never waits.
  void reap_locked(const char *kernel) {
    size_t i = 0;
    while (i < parked_.size()) {
      Parked &p = parked_[i];
      Entry &e = *p.entry;
      if (e.users.load(std::memory_order_seq_cst) != 0) {  // a lock-free hit is still queuing
        ++i;
        continue;
      }
      while (!e.late_streams.empty()) {  // recorded now: after the late copies were queued
        if (p.events.capacity() == p.events.size()) p.events.reserve(p.events.size() + e.late_streams.size());
        aclrtEvent ev = nullptr;
        aclError rc = aclrtCreateEvent(&ev);
        if (rc != ACL_SUCCESS) throw_acl(kernel, "aclrtCreateEvent", rc);  // retried at the next reap
        rc = aclrtRecordEvent(ev, e.late_streams.back());
        if (rc != ACL_SUCCESS) {
          (void)aclrtDestroyEvent(ev);
          throw_acl(kernel, "aclrtRecordEvent", rc);
        }
        p.events.push_back(ev);
        e.late_streams.pop_back();
      }
      bool done = true;
      for (aclrtEvent ev : p.events) {
        aclrtEventRecordedStatus st = ACL_EVENT_RECORDED_STATUS_NOT_READY;
        aclError rc = aclrtQueryEventStatus(ev, &st);
        if (rc != ACL_SUCCESS) throw_acl(kernel, "aclrtQueryEventStatus", rc);
        if (st != ACL_EVENT_RECORDED_STATUS_COMPLETE) {
          done = false;
          break;
        }
      }
      if (!done) {
        ++i;
        continue;
      }
      if (pool_.size() == pool_.capacity()) pool_.reserve(pool_.size() * 2 + 8);  // before anything is freed
      while (!p.events.empty()) {
        aclError rc = aclrtDestroyEvent(p.events.back());
        if (rc != ACL_SUCCESS) throw_acl(kernel, "aclrtDestroyEvent", rc);  // retried at the next reap
        p.events.pop_back();
      }
      aclError rc = aclrtFreeHost(e.host);
      if (rc != ACL_SUCCESS) throw_acl(kernel, "aclrtFreeHost", rc);  // retried at the next reap
      ++freed_;
      hits_ += e.fast_hits.exchange(0, std::memory_order_relaxed);
      e.host = nullptr;
      pool_.push_back(&e);  // capacity reserved at every miss
      if (i + 1 != parked_.size()) parked_[i] = std::move(parked_.back());
      parked_.pop_back();
    }
    has_parked_.store(!parked_.empty(), std::memory_order_release);
  }

  std::mutex mu_;
  std::vector<Entry *> entries_;
  std::vector<Parked> parked_;
  std::vector<Entry *> pool_;  // recycled entries (never freed: memos may still point at them)
  std::atomic<bool> has_parked_{false};
  std::atomic<uint64_t> tick_{0};
  uint64_t max_entries_;
  uint64_t max_bytes_;
  uint64_t bytes_ = 0;
  uint64_t hits_ = 0, misses_ = 0, evictions_ = 0, freed_ = 0;
};

}  // namespace detail

inline PinnedCacheStats pinned_cache_stats() { return detail::PinnedLockCache::instance().stats(); }
inline void set_pinned_cache_limits(uint64_t max_entries, uint64_t max_bytes) {
  detail::PinnedLockCache::instance().set_limits(max_entries, max_bytes);
}
// Evicts all cached lock images and frees those whose copies have run; returns
// how many still wait (call again later). Never blocks.
inline uint64_t trim_pinned_cache() { return detail::PinnedLockCache::instance().trim("<pinned cache>"); }

namespace detail {
// what == nullptr: the allocator returned an empty DataPtr.
[[noreturn]] __attribute__((noinline, cold)) inline void throw_allocator_failed(const char *kernel, uint64_t bytes,
                                                                              const char *what) {
  char buf[768];
  if (what != nullptr)
    std::snprintf(buf, sizeof buf,
                  "torch_npu_patchset: kernel '%s': NPUWorkspaceAllocator::malloc_with_stream(%llu bytes) failed: %s",
                  kname(kernel), static_cast<unsigned long long>(bytes), what);
  else
    std::snprintf(buf, sizeof buf,
                  "torch_npu_patchset: kernel '%s': NPUWorkspaceAllocator::malloc_with_stream(%llu bytes) returned "
                  "no memory",
                  kname(kernel), static_cast<unsigned long long>(bytes));
  throw std::runtime_error(buf);
}
}  // namespace detail

class LaunchResources {  // move-only owner; keeps the allocation alive until the launch is issued
 public:
  LaunchResources() noexcept = default;
  LaunchResources(LaunchResources &&o) noexcept
      : turn_(std::move(o.turn_)),
        data_(std::move(o.data_)),
        locks_(o.locks_),
        workspace_(o.workspace_),
        lock_bytes_(o.lock_bytes_),
        workspace_bytes_(o.workspace_bytes_),
        total_bytes_(o.total_bytes_) {
    o.locks_ = o.workspace_ = nullptr;
    o.lock_bytes_ = o.workspace_bytes_ = o.total_bytes_ = 0;
  }
  LaunchResources &operator=(LaunchResources &&o) noexcept {
    if (this != &o) {
      data_ = c10::DataPtr();  // release in the same order as the destructor
      turn_ = std::move(o.turn_);
      data_ = std::move(o.data_);
      locks_ = o.locks_;
      workspace_ = o.workspace_;
      lock_bytes_ = o.lock_bytes_;
      workspace_bytes_ = o.workspace_bytes_;
      total_bytes_ = o.total_bytes_;
      o.locks_ = o.workspace_ = nullptr;
      o.lock_bytes_ = o.workspace_bytes_ = o.total_bytes_ = 0;
    }
    return *this;
  }
  LaunchResources(const LaunchResources &) = delete;
  LaunchResources &operator=(const LaunchResources &) = delete;
  ~LaunchResources() = default;  // data_ is released first, then the stream turn

  void *locks() const noexcept { return locks_; }          // nullptr when there are no lock bytes
  void *workspace() const noexcept { return workspace_; }  // nullptr when there are no workspace bytes
  uint64_t lock_bytes() const noexcept { return lock_bytes_; }
  uint64_t workspace_bytes() const noexcept { return workspace_bytes_; }
  uint64_t total_bytes() const noexcept { return total_bytes_; }  // the allocator request, 0 if none

 private:
  friend LaunchResources acquire_launch_resources(const char *, aclrtStream, uint32_t, uint32_t, uint32_t, uint32_t,
                                                  uint64_t, const LockLayout &);
  detail::StreamTurn turn_;  // declared first: destroyed last
  c10::DataPtr data_;
  void *locks_ = nullptr;
  void *workspace_ = nullptr;
  uint64_t lock_bytes_ = 0;
  uint64_t workspace_bytes_ = 0;
  uint64_t total_bytes_ = 0;
};

inline LaunchResources acquire_launch_resources(const char *kernel_name, aclrtStream stream, uint32_t grid_x,
                                                uint32_t grid_y, uint32_t grid_z, uint32_t block_num,
                                                uint64_t workspace_per_block, const LockLayout &locks) {
  using namespace detail;
  LaunchResources r;
  if (grid_x == 0 || grid_y == 0 || grid_z == 0) return r;  // nothing to launch, no ACL call
  const LaunchSizes sz =
      compute_launch_sizes(kernel_name, grid_x, grid_y, grid_z, block_num, workspace_per_block, locks);
  if (sz.total_bytes == 0) return r;  // no locks, no workspace: no allocator request

  r.turn_ = StreamTurn::take(kernel_name, stream);
  PinnedLockCache &cache = PinnedLockCache::instance();
  cache.reap_if_parked(kernel_name);

  try {
    r.data_ = c10_npu::NPUWorkspaceAllocator::malloc_with_stream(static_cast<size_t>(sz.total_bytes), stream);
  } catch (const std::exception &e) {
    throw_allocator_failed(kernel_name, sz.total_bytes, e.what());
  }
  if (__builtin_expect(r.data_.get() == nullptr, 0)) throw_allocator_failed(kernel_name, sz.total_bytes, nullptr);
  const uintptr_t raw = reinterpret_cast<uintptr_t>(r.data_.get());
  const uintptr_t base = (raw + (kRegionAlignment - 1)) & ~uintptr_t(kRegionAlignment - 1);
  r.lock_bytes_ = sz.lock_bytes;
  r.workspace_bytes_ = sz.workspace_bytes;
  r.total_bytes_ = sz.total_bytes;
  r.locks_ = sz.lock_bytes != 0 ? reinterpret_cast<void *>(base) : nullptr;
  r.workspace_ = sz.workspace_bytes != 0 ? reinterpret_cast<void *>(base + sz.workspace_offset) : nullptr;

  if (sz.lock_bytes != 0) {
    uint8_t byte = 0;
    if (uniform_byte(locks, &byte)) {
      aclError rc = aclrtMemsetAsync(r.locks_, static_cast<size_t>(sz.lock_bytes), byte,
                                     static_cast<size_t>(sz.lock_bytes), stream);
      if (rc != ACL_SUCCESS) throw_acl(kernel_name, "aclrtMemsetAsync", rc);  // r releases everything
    } else {
      const LockContentKey key{locks.legacy_slots, locks.ordered, locks.unordered, sz.participants, locks.init_value};
      cache.copy_locks(kernel_name, stream, r.locks_, key, locks, sz.lock_bytes);
    }
  }
  return r;
}

}  // namespace torch_npu_patchset
