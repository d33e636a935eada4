// npu_launch_resources: a block kept per (calling thread, stream) for its next launch there, given back to torch_npu's
// caching allocator with its stream recorded as a use. docs/design.md, "When the block goes back". Nothing here waits.
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

namespace npu_alloc = c10_npu::NPUCachingAllocator;

// CANN's capture status of `stream` (NONE where CANN lacks it); an error reads as INVALIDATED: no pool, no give-back.
inline aclmdlRICaptureStatus capture_status(aclrtStream stream) {
  static const auto info = reinterpret_cast<decltype(&aclmdlRICaptureGetInfo)>(
      dlsym(dlopen("libascendcl.so", RTLD_LAZY | RTLD_NOLOAD), "aclmdlRICaptureGetInfo"));
  aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
  aclmdlRI graph = nullptr;
  return info == nullptr || info(stream, &status, &graph) == ACL_SUCCESS ? status
                                                                         : ACL_MODEL_RI_CAPTURE_STATUS_INVALIDATED;
}
inline npu_alloc::NPUAllocator *native_allocator() {  // torch_npu's caching allocator; nullptr: another one is set
  static thread_local std::pair<npu_alloc::NPUAllocator *, bool> seen{};  // name() builds a string: asked once
  npu_alloc::NPUAllocator *a = npu_alloc::get();
  if (a != seen.first) seen = {a, a->name() == "native"};
  return seen.second ? a : nullptr;
}
// 1 or 0: whether torch_npu's caching allocator has a capture underway (its own test for holding a stream use
// recorded meanwhile for the capture); -1 where it cannot say (2.7.1 and post2; another allocator).
template <class A>
auto allocator_capturing(A *a, int) -> decltype(a->hasCapturesUnderway(0), 0) {
  return a->hasCapturesUnderway(c10_npu::current_device()) ? 1 : 0;
}
template <class A>
int allocator_capturing(A *, long) {
  return -1;
}
inline int allocator_capturing() { return native_allocator() ? allocator_capturing(native_allocator(), 0) : -1; }
// With memory history recorded, torch_npu's free takes the GIL (the Python stack): never at a cache miss, under its
// mutex ("or deadlocks are possible with Python"), as a launch runs without the GIL. Blocks go back at once then.
inline bool history_recorded() { return native_allocator() && native_allocator()->isHistoryEnabled(); }

constexpr uint64_t kExternalStreamId = uint64_t(1) << 30;  // torch_npu's mark of an external stream's id

enum : int { kIdle, kInUse, kRetired };  // retired: no longer its thread's (replaced, or its thread ended)
struct KeptBlock {
  KeptBlock(c10::DataPtr m, uint64_t n, const c10_npu::NPUStream &s) : memory(std::move(m)), bytes(n), stream(s) {}
  c10::DataPtr memory;  // the caching allocator's block, until given back
  uint64_t bytes;
  c10_npu::NPUStream stream;
  int32_t device = c10_npu::current_device();
  std::atomic<int> state{kInUse};
};

class KeptBlocks {
 public:
  static KeptBlocks &all() {
    static KeptBlocks *kept = new KeptBlocks;  // never destroyed: nothing is released during exit
    return *kept;
  }
  // One block of `bytes` from the caching allocator for the current stream; throws naming the kernel, holding nothing.
  c10::DataPtr allocate(const char *kernel, uint64_t bytes) {
    std::string error = "the allocator returned no memory";  // (another allocator, or master's on a refusal)
    const uint64_t handed = handed_back_.load();
    try {
      if (c10::DataPtr block = npu_alloc::get()->allocate(bytes)) return block;
    } catch (const std::exception &e) {
      error = e.what();
    }  // blocks kept meanwhile, or handed back at the miss (the retry freed them, but asks no cache again): ask again
    if (give_back(true) != 0 || handed_back_.load() != handed) return allocate(kernel, bytes);
    throw std::runtime_error("npu_launch_resources: kernel '" + std::string(kernel) + "': " + std::to_string(bytes) +
                             " bytes for its locks and workspace: " + error);
  }
  // This thread's block for `stream` (its current one), in use until set idle: the kept one if it fits, else new.
  KeptBlock *take(const char *kernel, const c10_npu::NPUStream &stream, uint64_t bytes) {
    static thread_local Mine mine;
    auto it = std::find_if(mine.blocks.begin(), mine.blocks.end(), [&](auto &k) { return k->stream == stream; });
    if (it != mine.blocks.end()) {
      int idle = kIdle;  // else the allocator's callback took it
      if ((*it)->state.compare_exchange_strong(idle, kInUse)) {
        if ((*it)->bytes >= bytes) return it->get();
        retire(**it, kInUse);  // too small: replaced
      }
      mine.blocks.erase(it);
    }
    auto block = std::make_shared<KeptBlock>(allocate(kernel, bytes), bytes, stream);
    mine.blocks.push_back(block);
    std::lock_guard<std::mutex> lock(mutex_);
    blocks_.push_back(block);
    return block.get();
  }
  // Gives back the retired (and `idle`: idle) blocks of `device` (-1: all), each with its stream recorded as a use:
  // free once the allocator's event behind its launches completed. None during a capture. Allocator calls unlocked.
  static constexpr int32_t kCurrentDevice = -2;
  size_t give_back(bool idle, int32_t device = kCurrentDevice) {
    if (allocator_capturing() == 1) return 0;
    if (device == kCurrentDevice) device = c10_npu::current_device();
    std::vector<std::shared_ptr<KeptBlock>> done;
    std::unique_lock<std::mutex> lock(mutex_);
    for (std::shared_ptr<KeptBlock> &k : blocks_) {
      int s = k->state.load();
      if ((device != -1 && k->device != device) || s == kInUse || (s == kIdle && !idle)) continue;
      if (s == kIdle && !retire(*k, kIdle)) continue;  // its thread took it meanwhile
      if (capture_status(k->stream.stream(false)) != ACL_MODEL_RI_CAPTURE_STATUS_NONE) continue;  // a later call
      done.push_back(std::move(k));
    }
    blocks_.erase(std::remove(blocks_.begin(), blocks_.end(), nullptr), blocks_.end());
    handed_back_ += done.size();
    lock.unlock();
    for (auto &k : done) {
      try {  // the free queues the event; it throws once torch_npu's queue has stopped: the block is lost then
        npu_alloc::recordStream(k->memory, k->stream);  // (never freed while a lambda may still write it)
        if (allocator_capturing() == 1) {               // a capture began since the check: retired, for a later call
          std::lock_guard<std::mutex> again(mutex_);
          blocks_.push_back(std::move(k));
          continue;
        }
        k->memory.get_deleter()(k->memory.release_context());
      } catch (const std::exception &) {
        (void)k->memory.release_context();
      }
    }
    return done.size();
  }

 private:
  KeptBlocks() {   // once per instance: a c10 registry exits on a key seen twice
    Dl_info self;  // never unloaded, so the callback stays mapped (a library built by clang has no unique symbol)
    if (dladdr(reinterpret_cast<void *>(&all), &self)) dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
    npu_alloc::FreeNPUMemoryCallbacksRegistry()->Register(
        "npu_launch_resources_" + std::to_string(reinterpret_cast<uintptr_t>(this)),
        [] { return std::unique_ptr<npu_alloc::FreeMemoryCallback>(new Callback); });
  }
  struct Callback final : npu_alloc::FreeMemoryCallback {  // at a cache miss of the allocator, under its mutex
    bool Execute() override { return !history_recorded() && all().give_back(true) != 0; }
  };
  struct Mine {  // a thread's blocks, retired as it ends (a later call gives them back)
    std::vector<std::shared_ptr<KeptBlock>> blocks;
    ~Mine() {
      for (const auto &k : blocks) KeptBlocks::all().retire(*k, kIdle);
    }
  };
  bool retire(KeptBlock &block, int from) { return block.state.compare_exchange_strong(from, kRetired); }

  std::mutex mutex_;
  std::vector<std::shared_ptr<KeptBlock>> blocks_;  // every block not yet given back
  std::atomic<uint64_t> handed_back_{0};            // blocks given back so far
};

inline KeptBlocks &kept_blocks_at_load = KeptBlocks::all();  // as a wrapper loads: registers the callback

TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE

// torch.npu.empty_cache() calls this first (patch npu-empty-cache-launch-memory): every idle block goes back before
// torch_npu synchronises the device and frees what its allocator caches, as an operator's workspace would be then.
// Once per translation unit, whatever namespace a copy of the helper is inlined into.
#ifndef NPU_LAUNCH_RESOURCES_GIVE_BACK_ENTRY
#define NPU_LAUNCH_RESOURCES_GIVE_BACK_ENTRY
extern "C" __attribute__((weak, visibility("default"))) size_t torch_npu_launch_resources_give_back() {
  return torch_npu::inductor::KeptBlocks::all().give_back(true, -1);
}
#endif
