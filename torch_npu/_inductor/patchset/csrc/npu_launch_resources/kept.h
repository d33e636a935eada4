// npu_launch_resources: a block kept per (calling thread, stream, current stream), reused by that thread's next
// launch there without an event (its lambdas run in order on one task queue, its kernels on the stream), never
// free in the caching allocator meanwhile. Replaced or orphaned blocks, and idle ones at a cache miss, go back
// behind an event on their last kernel (docs/design.md of torch-npu-inductor-patches). Nothing waits.
#pragma once

#include <dlfcn.h>
#include <torch_npu/csrc/core/npu/NPUCachingAllocator.h>
#include <torch_npu/csrc/core/npu/NPUFunctions.h>
#include <torch_npu/csrc/core/npu/NPUStream.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "sizes.h"

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE

inline bool stream_captures(aclrtStream stream) {  // its launches then take the graph's pool
  static const auto info = reinterpret_cast<decltype(&aclmdlRICaptureGetInfo)>(  // as torch_npu: CANN may lack
      dlsym(dlopen("libascendcl.so", RTLD_LAZY | RTLD_NOLOAD), "aclmdlRICaptureGetInfo"));  // it (no capture)
  aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
  aclmdlRI graph = nullptr;
  return info && (info(stream, &status, &graph) != ACL_SUCCESS || status != ACL_MODEL_RI_CAPTURE_STATUS_NONE);
}
// Whether the device may capture: then no event is recorded or queried (a query ends a global-mode capture), as
// torch_npu's allocator, which knows it without asking CANN; 2.7.1's and post2's cannot say: `stream`'s status.
template <class A>
auto capturing(A *a, aclrtStream, int) -> decltype(a->hasCapturesUnderway(0)) {
  return a->hasCapturesUnderway(c10_npu::current_device());
}
template <class A>
bool capturing(A *, aclrtStream stream, long) {
  return stream_captures(stream);
}
inline bool captures_underway(aclrtStream stream) { return capturing(c10_npu::NPUCachingAllocator::get(), stream, 0); }

enum : int { kIdle, kInUse, kRetired };  // retired: no longer its thread's, freed once its kernels finished
struct KeptBlock {
  void *raw = nullptr;
  uint64_t bytes = 0;
  aclrtStream stream = nullptr, current = nullptr;  // current: the stream that picked the task queue
  int32_t device = -1;
  std::atomic<uint64_t> queued{0};  // launches made on it
  std::atomic<uint64_t> ran{0};     // the last of them whose lambda has run (they run in order)
  std::atomic<int> state{kInUse};
  aclrtEvent event = nullptr;
  uint64_t covered = ~uint64_t(0);  // the launches the event was recorded behind
  ~KeptBlock() {
    if (event != nullptr) aclrtDestroyEvent(event);
  }
  bool finished(uint64_t launches) {  // their lambdas ran and an event recorded behind their kernels completed
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    if (covered != launches && ran.load() == launches && !stream_captures(stream) &&
        (event != nullptr || aclrtCreateEvent(&event) == ACL_SUCCESS) && aclrtRecordEvent(event, stream) == ACL_SUCCESS)
      covered = launches;
    return covered == launches && aclrtQueryEventStatus(event, &status) == ACL_SUCCESS &&
           status == ACL_EVENT_RECORDED_STATUS_COMPLETE;
  }
};

class KeptBlocks {
 public:
  static KeptBlocks &all() {
    static KeptBlocks *kept = new KeptBlocks;  // never destroyed: nothing is released during exit
    return *kept;
  }
  // One block of `bytes` from the caching allocator; throws naming the kernel, holding nothing.
  void *allocate(const char *kernel, aclrtStream stream, uint64_t bytes) {
    try {
      return c10_npu::NPUCachingAllocator::raw_alloc_with_stream(bytes, stream);
    } catch (const std::exception &e) {  // its retry synchronised the device: retired blocks go back, ask again
      if (give_back(stream, false) != 0) return allocate(kernel, stream, bytes);
      throw std::runtime_error("npu_launch_resources: kernel '" + std::string(kernel) + "': " + std::to_string(bytes) +
                               " bytes for its locks and workspace: " + e.what());
    }
  }
  // This thread's block for (`stream`, `current`), in use until set idle: the kept one if it fits, else a new one.
  KeptBlock *take(const char *kernel, aclrtStream stream, aclrtStream current, uint64_t bytes) {
    if (retired_.load(std::memory_order_relaxed) != 0) give_back(stream, false);
    static thread_local Mine mine;
    auto it = std::find_if(mine.blocks.begin(), mine.blocks.end(),
                           [&](const auto &k) { return k->stream == stream && k->current == current; });
    if (it != mine.blocks.end()) {
      int idle = kIdle;  // else the allocator's callback took it
      if ((*it)->state.compare_exchange_strong(idle, kInUse)) {
        if ((*it)->bytes >= bytes) return it->get();
        retire(**it, kInUse);  // too small: replaced
      }
      mine.blocks.erase(it);
    }
    static const bool registered = [this] {  // once per instance: a c10 registry exits on a key seen twice
      c10_npu::NPUCachingAllocator::FreeNPUMemoryCallbacksRegistry()->Register(
          "npu_launch_resources_" + std::to_string(reinterpret_cast<uintptr_t>(this)),
          [this] { return std::unique_ptr<c10_npu::NPUCachingAllocator::FreeMemoryCallback>(new Callback(this)); });
      return true;
    }();
    auto block = std::make_shared<KeptBlock>();
    block->raw = allocate(kernel, stream, bytes), block->bytes = bytes, block->stream = stream, (void)registered;
    block->current = current, aclrtGetDevice(&block->device);
    mine.blocks.push_back(block);
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_.push_back(block);
    return block.get();
  }
  // Frees this device's retired blocks whose kernels finished and (`idle`: at a cache miss, the allocator's
  // callback) its idle ones whose kernels finished; the allocator only outside the mutex (the callback holds its).
  size_t give_back(aclrtStream stream, bool idle) {
    int32_t device = 0;
    if (captures_underway(stream) || aclrtGetDevice(&device) != ACL_SUCCESS) return 0;
    std::vector<void *> done;
    std::unique_lock<std::mutex> lock(mutex_);
    for (std::shared_ptr<KeptBlock> &k : blocks_) {
      int s = k->state.load();
      const uint64_t queued = k->queued.load();
      if (k->device != device || s == kInUse || (s == kIdle && !idle) || !k->finished(queued)) continue;
      if (s == kIdle && !retire(*k, kIdle)) continue;  // its thread took it meanwhile
      if (k->queued.load() != queued) continue;        // and launched on it: a later call gives it back
      done.push_back(k->raw), retired_.fetch_sub(1), k.reset();
    }
    blocks_.erase(std::remove(blocks_.begin(), blocks_.end(), nullptr), blocks_.end());
    lock.unlock();
    for (void *raw : done) c10_npu::NPUCachingAllocator::raw_delete(raw);
    return done.size();
  }

 private:
  struct Callback final : c10_npu::NPUCachingAllocator::FreeMemoryCallback {  // at a cache miss
    KeptBlocks *kept;
    explicit Callback(KeptBlocks *k) : kept(k) {}
    bool Execute() override { return kept->give_back(nullptr, true) != 0; }
  };
  struct Mine {  // a thread's blocks, retired as it ends (a later call records their events)
    std::vector<std::shared_ptr<KeptBlock>> blocks;
    ~Mine() {
      for (const auto &k : blocks) KeptBlocks::all().retire(*k, kIdle);
    }
  };
  bool retire(KeptBlock &block, int from) {
    return block.state.compare_exchange_strong(from, kRetired) && (retired_.fetch_add(1), true);
  }

  std::mutex mutex_;
  std::vector<std::shared_ptr<KeptBlock>> blocks_;  // every block not yet given back
  std::atomic<size_t> retired_{0};
};

TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
