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
#include <deque>
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

// Handed-over blocks and spare records, per stream, for calling threads only.
class HeldBlocks {
 public:
  static HeldBlocks &all() {
    static HeldBlocks *held = new HeldBlocks;  // never destroyed: nothing is released during exit
    return *held;
  }
  std::unique_ptr<HeldBlock> record(aclrtStream stream) {  // a spare of `stream`'s, or a new one
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::unique_ptr<HeldBlock>> &spare = lane(stream).spare;
    if (spare.empty()) return std::unique_ptr<HeldBlock>(new HeldBlock{nullptr, stream});
    std::unique_ptr<HeldBlock> found = std::move(spare.back());
    spare.pop_back();
    return found;
  }
  // Takes `handed` (a record, its queue call returned), then gives back every
  // block whose kernel finished (free never waits for the queue); how many.
  // A stream's lambdas run in about hand-over order, and its kernels finish
  // in order: its walk stops at the first pending block, so a call costs what
  // it gives back. A block whose lambda has not run while a later one has
  // (another thread's, or one that may never run) waits aside, looked at whole.
  size_t release_done(std::unique_ptr<HeldBlock> handed = nullptr, bool query = true) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (handed) {
      Lane &l = lane(handed->stream);
      (handed->raw != nullptr ? l.held : l.spare).push_back(std::move(handed));
    }
    size_t released = 0;
    for (Lane &l : lanes_) {
      for (; l.first < l.held.size(); ++l.first) {
        std::unique_ptr<HeldBlock> &b = l.held[l.first];
        if (finished(*b, query))
          released += give_back(l, b);
        else if (!b->done.load(std::memory_order_acquire) && l.held.back()->done.load(std::memory_order_acquire))
          l.aside.push_back(std::move(b));
        else
          break;  // pending: so are the ones after it
      }
      if (2 * l.first >= l.held.size()) {  // the given-back prefix goes; capacity stays
        l.held.erase(l.held.begin(), l.held.begin() + l.first);
        l.first = 0;
      }
      for (std::unique_ptr<HeldBlock> &b : l.aside)
        if (b != nullptr && finished(*b, query)) released += give_back(l, b);
      l.aside.erase(std::remove(l.aside.begin(), l.aside.end(), nullptr), l.aside.end());
    }
    return released;
  }

 private:
  struct Lane {
    aclrtStream stream = nullptr;
    std::vector<std::unique_ptr<HeldBlock>> held;  // [first, end): in hand-over order
    size_t first = 0;
    std::vector<std::unique_ptr<HeldBlock>> aside, spare;
  };
  Lane &lane(aclrtStream stream) {  // a process uses few streams
    for (Lane &l : lanes_)
      if (l.stream == stream) return l;
    return lanes_.emplace_back(Lane{stream, {}, 0, {}, {}});
  }
  // Its lambda ran, and its event completed (asked only if `query`).
  static bool finished(const HeldBlock &b, bool query) {
    if (!b.done.load(std::memory_order_acquire)) return false;
    if (!b.with_event) return true;
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    return query && aclrtQueryEventStatus(b.event, &status) == ACL_SUCCESS &&
           status == ACL_EVENT_RECORDED_STATUS_COMPLETE;
  }
  // `b`'s block freed, `b` to the spares (nullptr left); a throw leaves `b` in place.
  static size_t give_back(Lane &l, std::unique_ptr<HeldBlock> &b) {
    if (void *raw = std::exchange(b->raw, nullptr)) c10_npu::NPUCachingAllocator::raw_delete(raw);
    b->done.store(false, std::memory_order_relaxed);
    l.spare.push_back(std::move(b));
    return 1;
  }

  std::mutex mutex_;
  std::deque<Lane> lanes_;  // grows without moving a lane
};

TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
