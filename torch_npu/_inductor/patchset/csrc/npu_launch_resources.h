// npu_launch_resources: workspace and sync-lock memory for the Triton-Ascend
// kernels Inductor's C++ wrapper launches. Before the launch is queued, on the
// thread that runs the graph, LaunchMemory takes ONE block of torch_npu's
// caching allocator for the stream (as op-plugin takes an operator's workspace)
// and carves disjoint 512-byte-aligned lock and workspace regions. The lambda
// gets only LaunchRegions: byte fills for the locks, the launch, the block's
// event (LaunchDone). Failures: on the calling thread, an exception naming the
// kernel, nothing queued; in the lambda, the ACL code and one aclAppLog line.
#pragma once

#include <acl/acl.h>
#include <torch_npu/csrc/core/npu/NPUCachingAllocator.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "npu_launch_resources/abi.h"
#include "npu_launch_resources/held.h"
#include "npu_launch_resources/sizes.h"

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE

// What the launch lambda gets: plain values (it copies them), never the owner.
struct LaunchRegions {
  void *locks = nullptr;      // nullptr without lock bytes
  void *workspace = nullptr;  // nullptr without workspace bytes
  LaunchSizes sizes;
  LockLayout layout;
  HeldBlock *held = nullptr;  // the block's record, for LaunchDone

  // In the lambda, before the kernel: the lock content, byte fills on `stream` (legal while capturing).
  aclError write_locks(const char *kernel, aclrtStream stream) const noexcept {
    return for_each_lock_fill(layout, sizes, [&](uint64_t offset, uint8_t byte, uint64_t count) {
      const aclError rc =
          aclrtMemsetAsync(static_cast<char *>(locks) + offset, sizes.lock_bytes - offset, byte, count, stream);
      if (rc != ACL_SUCCESS)
        aclAppLog(ACL_ERROR, __func__, __FILE__, __LINE__,
                  "npu_launch_resources: kernel '%s': aclrtMemsetAsync of lock bytes [%llu, +%llu) failed: %d", kernel,
                  static_cast<unsigned long long>(offset), static_cast<unsigned long long>(count), rc);
      return rc;
    });
  }
};

// Owns one launch's block on the thread that runs the graph, until it is handed over.
class LaunchMemory {
 public:
  // Sizes the launch and takes its block for `stream`; throws, holding nothing.
  LaunchMemory(const char *kernel, aclrtStream stream, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
               uint32_t block_num, uint64_t workspace_per_block, const LockLayout &locks) {
    regions_.layout = locks;
    regions_.sizes = launch_sizes(kernel, grid_x, grid_y, grid_z, block_num, workspace_per_block, locks);
    const LaunchSizes &s = regions_.sizes;
    if (s.total_bytes == 0) return;                  // a launch that needs nothing asks for nothing
    const bool events = !captures_underway(stream);  // else the lambda's end counts (held.h)
    HeldBlocks &held = HeldBlocks::all();
    held.release_done(nullptr, events);  // earlier launches' blocks first: this one may reuse them
    block_ = held.record(stream);
    block_->with_event = events;
    for (bool retried = false; block_->blocks == 0;) {
      try {
        block_->raw[0] = c10_npu::NPUCachingAllocator::raw_alloc_with_stream(s.total_bytes, stream);
        block_->blocks = 1;
      } catch (const std::exception &e) {
        // Its out-of-memory retry synchronised the device: finished blocks go back, and it is asked again.
        if (!std::exchange(retried, true) && held.release_done(nullptr, events) != 0) continue;
        held.release_done(std::move(block_), false);  // the record, a spare again
        throw std::runtime_error("npu_launch_resources: kernel '" + std::string(kernel) + "': " +
                                 std::to_string(s.total_bytes) + " bytes for its locks and workspace: " + e.what());
      }
    }
    const uintptr_t base =
        (reinterpret_cast<uintptr_t>(block_->raw[0]) + kRegionAlignment - 1) & ~(kRegionAlignment - 1);
    if (s.lock_bytes != 0) regions_.locks = reinterpret_cast<void *>(base);
    if (s.workspace_bytes != 0) regions_.workspace = reinterpret_cast<void *>(base + s.workspace_offset);
    regions_.held = block_.get();
  }
  ~LaunchMemory() {  // (not copyable: it owns the block)
    try {
      if (block_) HeldBlocks::all().release_done(std::move(block_), false);  // unwinding: it may be queued
    } catch (...) {
    }
  }

  const LaunchRegions &regions() const noexcept { return regions_; }

  // Right after launchKernel returns: held until its kernel finished (held.h).
  void release_when_finished() {
    if (block_) HeldBlocks::all().release_done(std::move(block_), false, true);
  }

 private:
  std::unique_ptr<HeldBlock> block_;
  LaunchRegions regions_;
};

TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
