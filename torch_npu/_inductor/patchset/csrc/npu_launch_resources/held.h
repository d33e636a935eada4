// npu_launch_resources: launch blocks held until their kernel has finished.
// torch_npu's caching allocator returns cached segments to the driver with
// aclrtFree, which does not wait for device work, after a synchronisation made
// with its mutex released: a block given back while its lambda is queued, or
// its kernel pending, can be freed under the kernel. So the lambda records the
// block's event after the launch, and calling threads give the block back once
// that event completed: no wait anywhere, and no release on the queue thread
// (it would take the allocator's mutex, which threads hold while they wait).
#pragma once

#include <acl/acl.h>
#include <torch_npu/csrc/core/npu/NPUCachingAllocator.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "abi.h"

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE

// No event while a capture is underway: illegal on a capturing stream, and a
// query ends a global-mode capture (torch_npu's allocator skips its own then).
// Allocators without hasCapturesUnderway (2.7.1, post2): does `stream` capture?
template <class A, class = void>
struct Captures {
  static bool underway(A *, c10::DeviceIndex, aclrtStream stream) {
    aclmdlRICaptureStatus status = ACL_MODEL_RI_CAPTURE_STATUS_NONE;
    aclmdlRI graph = nullptr;
    return aclmdlRICaptureGetInfo(stream, &status, &graph) != ACL_SUCCESS || status != ACL_MODEL_RI_CAPTURE_STATUS_NONE;
  }
};
template <class A>
struct Captures<A, std::void_t<decltype(std::declval<A &>().hasCapturesUnderway(c10::DeviceIndex()))>> {
  static bool underway(A *a, c10::DeviceIndex device, aclrtStream) { return a->hasCapturesUnderway(device); }
};
inline bool captures_underway(c10::DeviceIndex device, aclrtStream stream) {
  auto *a = c10_npu::NPUCachingAllocator::get();
  return Captures<std::remove_pointer_t<decltype(a)>>::underway(a, device, stream);
}

enum class Held : int { queued, recorded /* its event tells */, ran /* nothing to wait for */ };

struct HeldBlock {  // a launch's block; the record and its event are reused
  void *raw = nullptr;
  aclrtStream stream = nullptr;
  c10::DeviceIndex device = 0;
  aclrtEvent event = nullptr;  // made once, in the stream's context
  bool record_event = false;   // this launch's: false while a capture is underway
  std::atomic<Held> state{Held::queued};
};

// First in the launch lambda. On every way out: the event recorded after all
// the lambda queued, then the mark (a failed record leaves the lambda's end).
struct LaunchDone {
  HeldBlock *block;  // nullptr: the launch has no block
  aclrtStream stream;
  ~LaunchDone() {
    if (block == nullptr) return;
    const bool recorded = block->record_event && aclrtRecordEvent(block->event, stream) == ACL_SUCCESS;
    block->state.store(recorded ? Held::recorded : Held::ran, std::memory_order_release);
  }
};

// Handed-over blocks and spare records, for calling threads only.
class HeldBlocks {
 public:
  static HeldBlocks &all() {
    static HeldBlocks *held = new HeldBlocks;  // never destroyed: nothing is released during exit
    return *held;
  }
  std::unique_ptr<HeldBlock> record(aclrtStream stream, c10::DeviceIndex device) {  // a spare of `stream`, or new
    std::lock_guard<std::mutex> lock(mutex_);
    for (std::unique_ptr<HeldBlock> &b : spare_) {
      if (b->stream != stream) continue;
      std::unique_ptr<HeldBlock> found = std::move(b);
      b = std::move(spare_.back());
      spare_.pop_back();
      return found;
    }
    std::unique_ptr<HeldBlock> b = std::make_unique<HeldBlock>();
    b->stream = stream;
    b->device = device;
    return b;
  }
  // Takes `handed` (a launch's record once its queue call returned; without a
  // block, a spare at once), then gives back every block whose kernel finished;
  // how many. Blocks finish roughly in hand-over order, so the event queries
  // (`query`) stop at the first pending one: about one per launch.
  size_t release_done(std::unique_ptr<HeldBlock> handed = nullptr, bool query = true) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (handed) held_.push_back(std::move(handed));
    size_t kept = 0, released = 0;
    for (std::unique_ptr<HeldBlock> &b : held_) {
      const Held state = b->state.load(std::memory_order_acquire);
      bool finished = b->raw == nullptr || state == Held::ran;
      if (!finished && state == Held::recorded && query && !captures_underway(b->device, b->stream)) {
        aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
        finished =
            aclrtQueryEventStatus(b->event, &status) == ACL_SUCCESS && status == ACL_EVENT_RECORDED_STATUS_COMPLETE;
        query = finished;
      }
      if (!finished) {
        held_[kept++] = std::move(b);
        continue;
      }
      if (b->raw != nullptr) {
        c10_npu::NPUCachingAllocator::raw_delete(b->raw);  // free never waits for the queue: ours may stay locked
        ++released;
      }
      b->raw = nullptr;
      b->state.store(Held::queued, std::memory_order_relaxed);
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
