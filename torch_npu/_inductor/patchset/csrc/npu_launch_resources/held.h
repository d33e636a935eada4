// npu_launch_resources: launch blocks held until their kernel has finished:
// torch_npu's caching allocator frees cached segments with aclrtFree (no wait
// for the device). The lambda records the block's event after the launch;
// calling threads, never the queue thread (threads waiting for it may hold the
// allocator's mutex), give the block back once it completed. Nothing waits. A
// launch queued behind its thread's last one takes that block over if its
// lambda has not run yet: one event gives back both.
#pragma once

#include <acl/acl.h>
#include <torch_npu/csrc/core/npu/NPUCachingAllocator.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "abi.h"

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE

// Events are illegal on a capturing stream, a query ends a global-mode capture: like torch_npu's allocator,
// none while the device captures (2.7.1 and post2's allocator cannot say: does `stream` capture?).
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

enum Fate : int { kOpen, kEnded, kEvent, kTaken };  // the lambda's: kTaken, its blocks went to a later one
constexpr unsigned kBlocksPerEvent = 8;             // the most one event gives back

struct HeldBlock {                  // a launch's blocks; records and their events are reused
  void *raw[kBlocksPerEvent] = {};  // its own, then those it took over
  unsigned blocks = 0;
  aclrtStream stream = nullptr;  // the event's: made once by a lambda, in the stream's context
  aclrtEvent event = nullptr;
  std::thread::id thread;   // the calling thread's
  bool with_event = false;  // false while a capture is underway
  std::atomic<int> fate{kOpen};
  std::atomic<bool> done{false};
};

// First in the launch lambda. On every way out: the event recorded after all
// the lambda queued, then the mark (without an event, the lambda's end counts).
struct LaunchDone {
  HeldBlock *block;  // nullptr: the launch has no block
  aclrtStream stream;
  ~LaunchDone() {
    if (block == nullptr) return;
    int open = kOpen;  // else a later launch took its blocks over (HeldBlocks::take_over)
    if (block->fate.compare_exchange_strong(open, kEnded) && block->with_event) {
      if (block->event == nullptr && aclrtCreateEvent(&block->event) != ACL_SUCCESS) block->event = nullptr;
      if (block->event != nullptr && aclrtRecordEvent(block->event, stream) == ACL_SUCCESS)
        block->fate.store(kEvent, std::memory_order_relaxed);
    }
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
    std::unique_ptr<HeldBlock> found(spare.empty() ? new HeldBlock : spare.back().release());
    if (!spare.empty()) spare.pop_back();
    found->stream = stream;
    found->fate.store(kOpen, std::memory_order_relaxed);
    found->done.store(false, std::memory_order_relaxed);
    found->thread = std::this_thread::get_id();
    return found;
  }
  // Takes `handed` (`queued`: its queue call returned), then gives back every
  // block whose kernel finished. A stream's kernels finish in order, its
  // lambdas run in about hand-over order: its walk stops at the first pending
  // block. One whose lambda has not run while a later one has (another
  // thread's, or one that may never run) waits aside, looked at whole.
  size_t release_done(std::unique_ptr<HeldBlock> handed = nullptr, bool query = true, bool queued = false) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (handed) {
      Lane &l = lane(handed->stream);
      if (queued && !l.held.empty()) take_over(l.held.back().get(), *handed);
      (handed->blocks != 0 ? l.held : l.spare).push_back(std::move(handed));
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
  // `next` was queued after `prev` by the same thread: its lambda runs later.
  static void take_over(HeldBlock *prev, HeldBlock &next) {
    int open = kOpen;
    if (prev == nullptr || prev->thread != next.thread || !prev->with_event || !next.with_event ||
        prev->blocks + next.blocks > kBlocksPerEvent || !prev->fate.compare_exchange_strong(open, kTaken))
      return;
    std::copy(prev->raw, prev->raw + prev->blocks, next.raw + next.blocks);
    next.blocks += std::exchange(prev->blocks, 0);
  }
  // Its lambda ran, and its event completed (asked only if `query`).
  static bool finished(const HeldBlock &b, bool query) {
    if (!b.done.load(std::memory_order_acquire)) return false;
    if (b.fate.load(std::memory_order_relaxed) != kEvent) return true;
    aclrtEventRecordedStatus status = ACL_EVENT_RECORDED_STATUS_NOT_READY;
    return query && aclrtQueryEventStatus(b.event, &status) == ACL_SUCCESS &&
           status == ACL_EVENT_RECORDED_STATUS_COMPLETE;
  }
  // `b`'s blocks freed, `b` to the spares (nullptr left); a throw leaves `b` in place.
  static size_t give_back(Lane &l, std::unique_ptr<HeldBlock> &b) {
    const size_t freed = b->blocks;
    for (; b->blocks != 0; --b->blocks) c10_npu::NPUCachingAllocator::raw_delete(b->raw[b->blocks - 1]);
    l.spare.push_back(std::move(b));
    return freed;
  }

  std::mutex mutex_;
  std::deque<Lane> lanes_;  // grows without moving a lane
};

TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
