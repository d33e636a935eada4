// npu_launch_resources: page-locked lock images.
//
// Lock content other than all-zero is copied onto the stream from a host
// image. aclrtMemcpyAsync is only asynchronous from page-locked memory, and
// the source must stay valid until the copy has run, so images are cached per
// (device, content) and freed only after an event recorded on every stream
// that copied from them has completed (polled at later launches, never
// waited for). One process-wide mutex guards the cache: launches of other
// streams that need a copy wait for it (held for microseconds, across no
// synchronising call of the helper's own).
//
// Graph capture: a captured copy re-reads its source at every replay, so an
// image used while its stream captures is kept for the life of the process.
// While any stream of the device captures (the launch's own or another's),
// nothing is evicted, reaped, recorded, queried, allocated or freed: event
// queries and page-locked allocation/free are illegal during a global-mode
// capture. Content without a cached image is then written with byte fills
// (at most kMaxFillRuns of them); only longer content still makes an image.
#pragma once

#include <acl/acl.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <new>
#include <vector>

#include "abi.h"
#include "capture.h"
#include "errors.h"
#include "sizes.h"

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE

constexpr uint64_t kDefaultImageEntries = 64;                // per device
constexpr uint64_t kDefaultImageBytes = uint64_t(64) << 20;  // per device

// Byte fills one lock content may take instead of a page-locked image.
constexpr uint64_t kMaxFillRuns = 1024;

struct PinnedCacheStats {
  uint64_t entries = 0, bytes = 0, kept_for_capture = 0, retired = 0;
  uint64_t hits = 0, misses = 0, evictions = 0, freed = 0;
  uint64_t byte_fill_launches = 0;          // content written by byte fills because a capture was underway
  uint64_t housekeeping_deferred = 0;       // reaps / evictions put off because a capture was underway
  uint64_t max_entries = 0, max_bytes = 0;  // per device
};

namespace detail {

struct LockImageKey {
  int32_t device;
  uint64_t legacy_slots;
  uint32_t ordered, unordered;
  uint64_t participants;
  int64_t init_value;
  uint64_t bytes;
  bool operator==(const LockImageKey &o) const noexcept {
    return device == o.device && legacy_slots == o.legacy_slots && ordered == o.ordered && unordered == o.unordered &&
           participants == o.participants && init_value == o.init_value && bytes == o.bytes;
  }
};

class LockImages {
 public:
  static LockImages &instance() {
    static LockImages *images = new LockImages();  // never destroyed: ACL may be gone at exit
    return *images;
  }

  // Queues the copy of `key`'s content into `dst` on `stream` (current device
  // = key.device). Returns the failing call's code, already logged.
  aclError copy(const char *kernel, aclrtStream stream, bool capturing, void *dst, const LockImageKey &key,
                const LockLayout &layout) {  // may throw std::bad_alloc before anything is queued
    std::lock_guard<std::mutex> guard(mutex_);
    Quiet quiet(capturing, key.device);  // reaping happened at the launch's start (reap_if_waiting)
    Image *image = find(key);
    if (image == nullptr) {
      if (quiet.now()) {
        aclError rc = ACL_SUCCESS;
        if (fill_bytes(kernel, stream, dst, key, layout, &rc)) return rc;
      }
      return copy_new(kernel, stream, capturing, dst, key, layout, quiet);
    }
    const bool new_stream =
        !capturing && std::find(image->streams.begin(), image->streams.end(), stream) == image->streams.end();
    if (new_stream) image->streams.reserve(image->streams.size() + 1);  // listed before the copy, never after
    const aclError rc = aclrtMemcpyAsync(dst, key.bytes, image->host, key.bytes, ACL_MEMCPY_HOST_TO_DEVICE, stream);
    if (rc != ACL_SUCCESS)
      return fail(rc, kernel, "aclrtMemcpyAsync of %llu lock bytes failed with error %d",
                  static_cast<unsigned long long>(key.bytes), rc);
    if (new_stream) image->streams.push_back(stream);
    image->kept_for_capture |= capturing;
    image->last_use = ++tick_;
    ++hits_;
    return ACL_SUCCESS;
  }

  // Frees retired images of the current device whose copies have run, if any
  // wait (one relaxed load otherwise): every launch that needs memory calls it
  // first, so retired images are freed whatever kind of launch follows.
  void reap_if_waiting(const char *kernel) noexcept {
    if (waiting_.load(std::memory_order_relaxed) == 0) return;
    int32_t device = -1;
    if (aclrtGetDevice(&device) != ACL_SUCCESS) return;
    try {
      std::lock_guard<std::mutex> guard(mutex_);
      Quiet quiet(false, device);
      reap(kernel, device, quiet);
    } catch (const std::exception &) {  // std::system_error from the mutex: retried at the next launch
    }
  }

  // Retires every image of the current device that no capture keeps and frees
  // those whose copies have run; returns how many of its retired images still
  // wait. While the device captures it does neither.
  uint64_t trim() noexcept {
    std::lock_guard<std::mutex> guard(mutex_);
    int32_t device = -1;
    if (aclrtGetDevice(&device) != ACL_SUCCESS) return retired_.size();
    Quiet quiet(false, device);
    if (!quiet.now())
      while (evict_one("<trim>", device)) {
      }
    reap("<trim>", device, quiet);
    return static_cast<uint64_t>(
        std::count_if(retired_.begin(), retired_.end(), [&](const Retired &r) { return r.device == device; }));
  }

  void set_limits(uint64_t max_entries, uint64_t max_bytes) noexcept {
    std::lock_guard<std::mutex> guard(mutex_);
    max_entries_ = std::max<uint64_t>(max_entries, 1);
    max_bytes_ = max_bytes;
  }

  PinnedCacheStats stats() noexcept {
    std::lock_guard<std::mutex> guard(mutex_);
    PinnedCacheStats s;
    s.entries = images_.size();
    for (const Image &i : images_) {
      s.bytes += i.key.bytes;
      s.kept_for_capture += i.kept_for_capture;
    }
    s.retired = retired_.size();
    s.hits = hits_;
    s.misses = misses_;
    s.evictions = evictions_;
    s.freed = freed_;
    s.byte_fill_launches = byte_fills_;
    s.housekeeping_deferred = deferred_;
    s.max_entries = max_entries_;
    s.max_bytes = max_bytes_;
    return s;
  }

 private:
  struct Image {
    LockImageKey key;
    void *host;
    uint64_t last_use;
    bool kept_for_capture;
    std::vector<aclrtStream> streams;  // every stream a copy from `host` was queued on
  };
  struct Retired {
    int32_t device;
    void *host;
    std::vector<aclrtEvent> events;  // one per stream that copied from `host`
  };

  // Whether housekeeping must keep still: the launch's stream captures, or
  // another stream of the device does (asked once, only when it matters).
  class Quiet {
   public:
    Quiet(bool capturing, int32_t device) noexcept : capturing_(capturing), device_(device) {}
    bool now() noexcept {
      if (!known_) {
        quiet_ = capturing_ || device_captures_underway(device_);
        known_ = true;
      }
      return quiet_;
    }

   private:
    bool capturing_, known_ = false, quiet_ = false;
    int32_t device_;
  };

  // Writes the content with byte fills when it takes at most kMaxFillRuns;
  // false (nothing queued) when it takes more.
  bool fill_bytes(const char *kernel, aclrtStream stream, void *dst, const LockImageKey &key, const LockLayout &layout,
                  aclError *rc) {
    const uint64_t runs =
        for_each_lock_byte_run(layout, key.participants, key.bytes, kMaxFillRuns, [](uint64_t, uint8_t, uint64_t) {});
    if (runs > kMaxFillRuns) return false;
    char *base = static_cast<char *>(dst);
    *rc = ACL_SUCCESS;
    for_each_lock_byte_run(layout, key.participants, key.bytes, kMaxFillRuns,
                           [&](uint64_t offset, uint8_t byte, uint64_t count) {
                             if (*rc == ACL_SUCCESS) *rc = aclrtMemsetAsync(base + offset, count, byte, count, stream);
                           });
    if (*rc != ACL_SUCCESS)
      *rc = fail(*rc, kernel, "aclrtMemsetAsync of lock bytes (%llu byte fills) failed with error %d",
                 static_cast<unsigned long long>(runs), *rc);
    else
      ++byte_fills_;
    return true;
  }

  LockImages()
      : max_entries_(env_u64("TORCH_NPU_LAUNCH_PINNED_CACHE_ENTRIES", kDefaultImageEntries, 1)),
        max_bytes_(env_u64("TORCH_NPU_LAUNCH_PINNED_CACHE_BYTES", kDefaultImageBytes, 0)) {}

  Image *find(const LockImageKey &key) noexcept {
    for (Image &i : images_)
      if (i.key == key) return &i;
    return nullptr;
  }

  aclError copy_new(const char *kernel, aclrtStream stream, bool capturing, void *dst, const LockImageKey &key,
                    const LockLayout &layout, Quiet &quiet) {
    ++misses_;
    if (!quiet.now()) make_room(kernel, key.device, key.bytes);
    images_.reserve(images_.size() + 1);  // every allocation that can throw happens before ACL work
    std::vector<aclrtStream> streams;
    if (!capturing) streams.push_back(stream);
    void *host = nullptr;
    aclError rc = aclrtMallocHost(&host, key.bytes);
    if (rc != ACL_SUCCESS)
      return fail(rc, kernel, "aclrtMallocHost of a %llu-byte lock image failed with error %d",
                  static_cast<unsigned long long>(key.bytes), rc);
    fill_lock_content(layout, key.participants, static_cast<int64_t *>(host), key.bytes / 8);
    rc = aclrtMemcpyAsync(dst, key.bytes, host, key.bytes, ACL_MEMCPY_HOST_TO_DEVICE, stream);
    if (rc != ACL_SUCCESS) {
      (void)aclrtFreeHost(host);  // nothing was queued from it
      return fail(rc, kernel, "aclrtMemcpyAsync of %llu lock bytes failed with error %d",
                  static_cast<unsigned long long>(key.bytes), rc);
    }
    images_.push_back(Image{key, host, ++tick_, capturing, std::move(streams)});
    return ACL_SUCCESS;
  }

  // Retires least recently used images of `device` until one more of `bytes` fits.
  void make_room(const char *kernel, int32_t device, uint64_t bytes) noexcept {
    for (;;) {
      uint64_t count = 0, used = 0;
      for (const Image &i : images_)
        if (i.key.device == device && !i.kept_for_capture) ++count, used += i.key.bytes;
      if (count < max_entries_ && used + bytes <= max_bytes_) return;
      if (count == 0 || !evict_one(kernel, device)) return;  // over the bound until a later launch
    }
  }

  // Retires the least recently used evictable image of `device`: records an
  // event on each stream that copied from it. False if none could be retired.
  // A victim whose events cannot be made is skipped for the next one (least
  // recently used first), so one bad image never stalls eviction.
  bool evict_one(const char *kernel, int32_t device) noexcept {
    uint64_t after = 0;  // try victims used after this tick, oldest first
    for (;;) {
      Image *victim = nullptr;
      for (Image &i : images_) {
        if (i.key.device != device || i.kept_for_capture || i.last_use <= after) continue;
        bool capturing = false;  // an event recorded on a capturing stream would join its graph
        for (aclrtStream s : i.streams) capturing = capturing || stream_is_capturing(s);
        if (!capturing && (victim == nullptr || i.last_use < victim->last_use)) victim = &i;
      }
      if (victim == nullptr) return false;
      if (retire(kernel, device, victim)) return true;
      after = victim->last_use;
    }
  }

  bool retire(const char *kernel, int32_t device, Image *victim) noexcept {
    Retired r{device, victim->host, {}};
    try {
      r.events.reserve(victim->streams.size());
      retired_.reserve(retired_.size() + 1);
    } catch (const std::bad_alloc &) {
      return false;
    }
    for (aclrtStream s : victim->streams) {
      aclrtEvent event = nullptr;
      aclError rc = aclrtCreateEvent(&event);
      if (rc == ACL_SUCCESS) {
        r.events.push_back(event);
        rc = aclrtRecordEvent(event, s);
      }
      if (rc != ACL_SUCCESS) {  // keep the image cached and valid
        for (aclrtEvent e : r.events) (void)aclrtDestroyEvent(e);
        warn(kernel, "could not retire a lock image (event create/record failed with error %d); kept", rc);
        return false;
      }
    }
    retired_.push_back(std::move(r));
    waiting_.store(retired_.size(), std::memory_order_relaxed);
    if (victim != &images_.back()) *victim = std::move(images_.back());
    images_.pop_back();
    ++evictions_;
    return true;
  }

  // Frees retired images of `device` whose events all completed; nothing
  // while the device captures (querying is illegal then).
  void reap(const char *kernel, int32_t device, Quiet &quiet) noexcept {
    bool mine = false;
    for (const Retired &r : retired_) mine = mine || r.device == device;
    if (!mine) return;
    if (quiet.now()) {
      ++deferred_;
      return;
    }
    for (size_t i = 0; i < retired_.size();) {
      Retired &r = retired_[i];
      bool done = r.device == device;
      for (aclrtEvent e : r.events) {
        if (!done) break;
        aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
        const aclError rc = aclrtQueryEventStatus(e, &status);
        if (rc != ACL_SUCCESS) warn(kernel, "aclrtQueryEventStatus failed with error %d; retried later", rc);
        done = rc == ACL_SUCCESS && status == ACL_EVENT_RECORDED_STATUS_COMPLETE;
      }
      if (!done) {
        ++i;
        continue;
      }
      for (aclrtEvent e : r.events) (void)aclrtDestroyEvent(e);  // a failure only leaks the event
      r.events.clear();
      const aclError rc = aclrtFreeHost(r.host);
      if (rc != ACL_SUCCESS) {  // its copies ran: freeing is retried at the next launch
        warn(kernel, "aclrtFreeHost of a lock image failed with error %d; retried later", rc);
        ++i;
        continue;
      }
      ++freed_;
      if (&r != &retired_.back()) r = std::move(retired_.back());
      retired_.pop_back();
    }
    waiting_.store(retired_.size(), std::memory_order_relaxed);
  }

  std::mutex mutex_;
  std::vector<Image> images_;  // all devices; a few dozen at most
  std::vector<Retired> retired_;
  uint64_t max_entries_, max_bytes_;
  uint64_t tick_ = 0, hits_ = 0, misses_ = 0, evictions_ = 0, freed_ = 0, byte_fills_ = 0, deferred_ = 0;
  std::atomic<size_t> waiting_{0};  // retired_.size(), readable without the mutex
};

}  // namespace detail

inline PinnedCacheStats pinned_cache_stats() { return detail::LockImages::instance().stats(); }
inline void set_pinned_cache_limits(uint64_t max_entries, uint64_t max_bytes) {
  detail::LockImages::instance().set_limits(max_entries, max_bytes);
}
// Retires the current device's cached images; frees those whose copies ran.
// Returns how many of that device's retired images still wait. Never blocks.
inline uint64_t trim_pinned_cache() { return detail::LockImages::instance().trim(); }

TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
