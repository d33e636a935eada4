// npu_launch_resources: launch blocks held until their lambda has run (the
// caching allocator frees cached blocks after draining the task queue with its
// mutex released). The lambda only marks itself done: a release on the queue
// thread would take that mutex, which a thread may hold while it waits for the
// queue. Calling threads give done blocks back.
#pragma once

#include <torch_npu/csrc/core/npu/NPUCachingAllocator.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "abi.h"

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE

struct HeldBlock {
  void *raw = nullptr;            // from NPUCachingAllocator::raw_alloc_with_stream
  std::atomic<bool> done{false};  // set as the launch lambda returns (LaunchDone)
};

// First in the launch lambda: marks its block done on every way out of it.
struct LaunchDone {
  std::atomic<bool> *done;  // nullptr: the launch has no block
  ~LaunchDone() {
    if (done != nullptr) done->store(true, std::memory_order_release);
  }
};

// Handed-over blocks and spare records (no heap allocation once warm), for
// calling threads only.
class HeldBlocks {
 public:
  static HeldBlocks &all() {
    static HeldBlocks *held = new HeldBlocks;  // never destroyed: nothing is released during exit
    return *held;
  }
  std::unique_ptr<HeldBlock> record() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (spare_.empty()) return std::make_unique<HeldBlock>();
    std::unique_ptr<HeldBlock> b = std::move(spare_.back());
    spare_.pop_back();
    return b;
  }
  // Takes `handed` (a launch's block, once its queue call returned), then gives
  // every done block back (the allocator hands it only to later work on its
  // stream); how many. free never waits for the queue: ours may stay locked.
  size_t release_done(std::unique_ptr<HeldBlock> handed = nullptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (handed) held_.push_back(std::move(handed));
    size_t kept = 0, released = 0;
    for (std::unique_ptr<HeldBlock> &b : held_) {
      if (!b->done.load(std::memory_order_acquire)) {
        held_[kept++] = std::move(b);
        continue;
      }
      c10_npu::NPUCachingAllocator::raw_delete(b->raw);
      b->raw = nullptr;
      b->done.store(false, std::memory_order_relaxed);
      spare_.push_back(std::move(b));
      ++released;
    }
    held_.resize(kept);
    return released;
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<HeldBlock>> held_, spare_;
};

TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
