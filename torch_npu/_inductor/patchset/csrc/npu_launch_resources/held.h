// npu_launch_resources: launch blocks held until their kernel has finished:
// torch_npu's caching allocator frees cached segments with aclrtFree (no wait
// for the device) after a synchronisation made with its mutex released. The
// lambda records the block's event after the launch; calling threads give the
// block back once it completed. Nothing waits; nothing is released on the
// queue thread (the allocator's mutex is held by threads waiting for it).
#pragma once

#include <acl/acl.h>
#include <torch_npu/csrc/core/npu/NPUCachingAllocator.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "abi.h"

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE

// Events are illegal on a capturing stream, and a query ends a global-mode
// capture: like torch_npu's allocator, none while a capture is underway on the
// device (2.7.1 and post2's allocator cannot say: does `stream` capture?).
template <class A>
auto capturing(A *a, aclrtStream, int) -> decltype(a->hasCapturesUnderway(0)) {
  int32_t device = 0;
  return aclrtGetDevice(&device) != ACL_SUCCESS || a->hasCapturesUnderway(static_cast<c10::DeviceIndex>(device));
}
template <class A>
bool capturing(A *, aclrtStream stream, long) {
  aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
  aclmdlRI graph = nullptr;
  return aclmdlRICaptureGetInfo(stream, &status, &graph) != ACL_SUCCESS || status != ACL_MODEL_RI_CAPTURE_STATUS_NONE;
}
inline bool captures_underway(aclrtStream stream) { return capturing(c10_npu::NPUCachingAllocator::get(), stream, 0); }

struct HeldBlock {  // a launch's block; records and their events are reused
  void *raw = nullptr;
  aclrtStream stream = nullptr;  // the event's: made once by a lambda, in the stream's context
  aclrtEvent event = nullptr;
  bool with_event = false;  // false while a capture is underway, or if the event failed
  std::atomic<bool> done{false};
};

// First in the launch lambda. On every way out: the event recorded after all
// the lambda queued, then the mark (without an event, the lambda's end counts).
struct LaunchDone {
  HeldBlock *block;  // nullptr: the launch has no block
  aclrtStream stream;
  ~LaunchDone() {
    if (block == nullptr) return;
    if (block->with_event && block->event == nullptr && aclrtCreateEvent(&block->event) != ACL_SUCCESS)
      block->event = nullptr;
    block->with_event = block->with_event && block->event && aclrtRecordEvent(block->event, stream) == ACL_SUCCESS;
    block->done.store(true, std::memory_order_release);
  }
};

// Handed-over blocks and spare records, for calling threads only.
class HeldBlocks {
 public:
  static HeldBlocks &all() {
    static HeldBlocks *held = new HeldBlocks;  // never destroyed: nothing is released during exit
    return *held;
  }
  std::unique_ptr<HeldBlock> record(aclrtStream stream) {  // a spare of `stream`'s, or a new one
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = std::find_if(spare_.begin(), spare_.end(), [&](const auto &b) { return b->stream == stream; });
    if (it == spare_.end()) return std::unique_ptr<HeldBlock>(new HeldBlock{nullptr, stream});
    std::unique_ptr<HeldBlock> found = std::move(*it);
    spare_.erase(it);
    return found;
  }
  // Takes `handed` (a record, its queue call returned), then gives back every
  // block whose kernel finished (free never waits for the queue); how many.
  // Blocks finish about in hand-over order: queries stop at the first pending.
  size_t release_done(std::unique_ptr<HeldBlock> handed = nullptr, bool query = true) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (handed) held_.push_back(std::move(handed));
    size_t kept = 0, released = 0;
    for (std::unique_ptr<HeldBlock> &b : held_) {
      const bool done = b->done.load(std::memory_order_acquire);
      bool finished = b->raw == nullptr || (done && !b->with_event);
      if (!finished && done && query) {
        aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
        query = finished =
            aclrtQueryEventStatus(b->event, &status) == ACL_SUCCESS && status == ACL_EVENT_RECORDED_STATUS_COMPLETE;
      }
      if (!finished) {
        held_[kept++] = std::move(b);
        continue;
      }
      released += b->raw != nullptr;
      if (b->raw != nullptr) c10_npu::NPUCachingAllocator::raw_delete(std::exchange(b->raw, nullptr));
      b->done.store(false, std::memory_order_relaxed);
      spare_.push_back(std::move(b));
    }
    held_.resize(kept);
    return released;
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<HeldBlock>> held_, spare_;
};

TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
