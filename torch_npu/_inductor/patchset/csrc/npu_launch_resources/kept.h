// npu_launch_resources: a block kept per (calling thread, stream, current stream), reused by that thread's next
// launch there without an event (its lambdas run in order on one task queue, its kernels on the stream), never
// free in the caching allocator meanwhile. Replaced or orphaned blocks, and idle ones at a cache miss, go back
// behind an event on their last kernel (docs/design.md of torch-npu-inductor-patches). Nothing waits.
#pragma once

#include <acl/acl.h>
#include <dlfcn.h>
#include <torch_npu/csrc/core/npu/NPUCachingAllocator.h>
#include <torch_npu/csrc/core/npu/NPUStream.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "abi.h"

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE

inline bool stream_captures(aclrtStream stream) {  // its launches then take the graph's pool
  static const auto info = reinterpret_cast<decltype(&aclmdlRICaptureGetInfo)>(  // as torch_npu: CANN may lack
      dlsym(dlopen("libascendcl.so", RTLD_LAZY | RTLD_NOLOAD), "aclmdlRICaptureGetInfo"));  // it (no capture)
  aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
  aclmdlRI graph = nullptr;
  return info && (info(stream, &status, &graph) != ACL_SUCCESS || status != ACL_MODEL_RI_CAPTURE_STATUS_NONE);
}
// No event query while the device captures (it ends a global-mode capture), as torch_npu's allocator; 2.7.1
// and post2's cannot say: then `stream`'s own status.
template <class A>
auto capturing(A *a, aclrtStream, int) -> decltype(a->hasCapturesUnderway(0)) {
  int32_t device = 0;
  return aclrtGetDevice(&device) != ACL_SUCCESS || a->hasCapturesUnderway(static_cast<c10::DeviceIndex>(device));
}
template <class A>
bool capturing(A *, aclrtStream stream, long) {
  return stream_captures(stream);
}
inline bool captures_underway(aclrtStream stream) { return capturing(c10_npu::NPUCachingAllocator::get(), stream, 0); }

// state: generation << 2 | kIdle, kInUse or kRetired (a reused record's newer generation: given back)
enum : uint64_t { kIdle, kInUse, kRetired };
struct KeptBlock {
  void *raw = nullptr;
  aclrtStream stream = nullptr;
  int32_t device = -1;
  std::atomic<uint64_t> queued{0};  // launches made on it
  std::atomic<uint64_t> ran{0};     // the last of them whose lambda has run (they run in order)
  std::atomic<uint64_t> state{kInUse};
  aclrtEvent event = nullptr;
  bool recorded = false;  // once retired: the event is behind its last kernel

  bool finished(bool record) {  // every lambda ran and (`record`: an event recorded now) its kernels finished
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    if (record && ran.load() == queued.load() && !stream_captures(stream))
      recorded = (event != nullptr || aclrtCreateEvent(&event) == ACL_SUCCESS) &&
                 aclrtRecordEvent(event, stream) == ACL_SUCCESS;
    return recorded && aclrtQueryEventStatus(event, &status) == ACL_SUCCESS &&
           status == ACL_EVENT_RECORDED_STATUS_COMPLETE;
  }
};

class KeptBlocks {
 public:
  struct Callback final : c10_npu::NPUCachingAllocator::FreeMemoryCallback {  // at a cache miss
    KeptBlocks *kept;
    explicit Callback(KeptBlocks *k) : kept(k) {}
    bool Execute() override { return kept->give_back(nullptr, true) != 0; }
  };
  static KeptBlocks &all() {
    static KeptBlocks *kept = new KeptBlocks;  // never destroyed: nothing is released during exit
    return *kept;
  }
  // One block of `bytes` from the caching allocator; throws naming the kernel, holding nothing.
  void *allocate(const char *kernel, aclrtStream stream, uint64_t bytes) {
    for (bool retried = false;;) {
      try {
        return c10_npu::NPUCachingAllocator::raw_alloc_with_stream(bytes, stream);
      } catch (const std::exception &e) {  // its retry synchronised the device: retired blocks go back, ask again
        if (!std::exchange(retried, true) && give_back(stream, false) != 0) continue;
        throw std::runtime_error("npu_launch_resources: kernel '" + std::string(kernel) +
                                 "': " + std::to_string(bytes) + " bytes for its locks and workspace: " + e.what());
      }
    }
  }
  // This thread's block for `stream`, in use until set idle: the kept one if it fits, else a new one.
  KeptBlock *take(const char *kernel, aclrtStream stream, uint64_t bytes, uint64_t &generation) {
    if (retired_count_.load(std::memory_order_relaxed) != 0) give_back(stream, false);
    const aclrtStream current = c10_npu::getCurrentNPUStream().stream(false);
    static thread_local ThreadBlocks thread;
    std::vector<Mine> &mine = thread.blocks;
    auto it = std::find_if(mine.begin(), mine.end(),
                           [&](const Mine &m) { return m.stream == stream && m.current == current; });
    if (it != mine.end()) {
      uint64_t idle = it->generation << 2 | kIdle;  // else the callback gave it back
      if (it->block->state.compare_exchange_strong(idle, idle + kInUse)) {
        if (it->bytes >= bytes) return generation = it->generation, it->block;
        retire({*it}, kInUse);  // too small: replaced
      }
      mine.erase(it);
    }
    // The allocator's free-memory callback, once per instance (a c10 registry exits the process on a key seen twice).
    static const bool registered = [this] {
      c10_npu::NPUCachingAllocator::FreeNPUMemoryCallbacksRegistry()->Register(
          "npu_launch_resources_" + std::to_string(reinterpret_cast<uintptr_t>(this)),
          [this] { return std::unique_ptr<c10_npu::NPUCachingAllocator::FreeMemoryCallback>(new Callback(this)); });
      return true;
    }();
    void *raw = allocate(kernel, stream, bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    KeptBlock *k = spare_.empty() ? new KeptBlock : spare_.back();
    if (!spare_.empty()) spare_.pop_back();
    const int32_t device = k->device;
    aclrtGetDevice(&k->device);
    if (k->event != nullptr && k->device != device) aclrtDestroyEvent(std::exchange(k->event, nullptr));
    generation = (k->state.load() >> 2) + registered;
    k->raw = raw, k->stream = stream, k->recorded = false, k->queued = 0, k->ran = 0;
    k->state = generation << 2 | kInUse;
    kept_.push_back(k);
    mine.push_back({k, generation, bytes, stream, current});
    return k;
  }
  // Frees this device's retired blocks behind their last kernel and (`idle`: the allocator's callback, at a cache
  // miss) its finished idle ones; the allocator only outside the mutex, which the callback takes under its own.
  size_t give_back(aclrtStream stream, bool idle) {
    int32_t device = 0;
    if (captures_underway(stream) || aclrtGetDevice(&device) != ACL_SUCCESS) return 0;
    std::vector<void *> done;
    std::unique_lock<std::mutex> lock(mutex_);
    for (KeptBlock *&k : retired_)
      if (k->device == device && k->finished(!k->recorded))
        done.push_back(k->raw), spare_.push_back(std::exchange(k, nullptr));
    for (KeptBlock *&k : kept_) {
      uint64_t s = k->state.load();
      const uint64_t queued = k->queued.load();
      if (!idle || (s & 3) != kIdle || k->device != device || !k->finished(true) ||
          !k->state.compare_exchange_strong(s, s - kIdle + kRetired))
        continue;
      k->recorded = false;  // if its thread launched on it meanwhile: retired, given back by a later call
      if (k->queued.load() == queued) done.push_back(k->raw);
      (k->queued.load() == queued ? spare_ : retired_).push_back(std::exchange(k, nullptr));
    }
    kept_.erase(std::remove(kept_.begin(), kept_.end(), nullptr), kept_.end());
    retired_.erase(std::remove(retired_.begin(), retired_.end(), nullptr), retired_.end());
    retired_count_.store(retired_.size(), std::memory_order_relaxed);
    lock.unlock();
    for (void *raw : done) c10_npu::NPUCachingAllocator::raw_delete(raw);
    return done.size();
  }

 private:
  struct Mine {  // current: the stream that picked the task queue
    KeptBlock *block;
    uint64_t generation, bytes;
    aclrtStream stream, current;
  };
  struct ThreadBlocks {  // as the thread ends, its blocks are retired (a later call records their events)
    std::vector<Mine> blocks;
    ~ThreadBlocks() { KeptBlocks::all().retire(blocks, kIdle); }
  };
  void retire(const std::vector<Mine> &blocks, uint64_t from) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Mine &m : blocks) {
      uint64_t s = m.generation << 2 | from;  // else the callback's already
      if (!m.block->state.compare_exchange_strong(s, s - from + kRetired)) continue;
      kept_.erase(std::remove(kept_.begin(), kept_.end(), m.block), kept_.end());
      retired_.push_back(m.block);
    }
    retired_count_.store(retired_.size(), std::memory_order_relaxed);
  }

  std::mutex mutex_;
  std::vector<KeptBlock *> kept_, retired_, spare_;
  std::atomic<size_t> retired_count_{0};
};

TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
