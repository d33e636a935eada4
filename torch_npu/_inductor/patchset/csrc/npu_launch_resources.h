// npu_launch_resources: workspace and sync-lock memory for the Triton-Ascend kernels Inductor's C++ wrapper
// launches. Before the launch is queued, on the thread that runs the graph, LaunchMemory takes ONE block of
// torch_npu's caching allocator for the stream (kept.h) and carves disjoint 512-byte-aligned lock and workspace
// regions; the lambda gets only LaunchRegions. Failures: an exception naming the kernel, nothing queued; in the
// lambda, the ACL code and one aclAppLog line.
#pragma once

#include "npu_launch_resources/kept.h"

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE

// What the launch lambda gets: plain values (it copies them), never the owner.
struct LaunchRegions {
  void *locks = nullptr;      // nullptr without lock bytes
  void *workspace = nullptr;  // nullptr without workspace bytes
  LaunchSizes sizes;
  LockLayout layout;

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

// Takes one launch's block on the thread that runs the graph; handed() once the launch is queued.
class LaunchMemory {
 public:
  // Sizes the launch and takes its block for `stream`, the thread's current one; throws, holding nothing.
  LaunchMemory(const char *kernel, aclrtStream stream, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
               uint32_t block_num, uint64_t workspace_per_block, const LockLayout &locks) {
    regions_.layout = locks;
    regions_.sizes = launch_sizes(kernel, grid_x, grid_y, grid_z, block_num, workspace_per_block, locks);
    const LaunchSizes &s = regions_.sizes;
    if (s.total_bytes == 0) return;  // a launch that needs nothing asks for nothing
    // torch_npu launches on the current stream; its allocator records uses of its own streams only (the give-back)
    const c10_npu::NPUStream current = c10_npu::getCurrentNPUStream();
    if (current.stream(false) != stream || (static_cast<uint64_t>(current.id()) & kExternalStreamId) != 0)
      throw std::invalid_argument(
          "npu_launch_resources: kernel '" + std::string(kernel) +
          "': its stream is not the calling thread's current NPU stream, or is an external one");
    void *raw;
    if (allocator_capturing() != 0 && capture_status(stream) == ACL_MODEL_RI_CAPTURE_STATUS_ACTIVE) {
      captured_ = KeptBlocks::all().allocate(kernel, s.total_bytes);  // the graph's pool holds it for replays
      raw = captured_.get();
    } else {  // the thread's kept one
      kept_ = KeptBlocks::all().take(kernel, current, s.total_bytes);
      raw = kept_->memory.get();
    }
    const uintptr_t base = (reinterpret_cast<uintptr_t>(raw) + kRegionAlignment - 1) & ~(kRegionAlignment - 1);
    if (s.lock_bytes != 0) regions_.locks = reinterpret_cast<void *>(base);
    if (s.workspace_bytes != 0) regions_.workspace = reinterpret_cast<void *>(base + s.workspace_offset);
  }
  ~LaunchMemory() { handed(false); }  // the launch threw: a captured block it may still write stays allocated
  LaunchMemory(const LaunchMemory &) = delete;
  LaunchMemory &operator=(const LaunchMemory &) = delete;

  const LaunchRegions &regions() const noexcept { return regions_; }

  // Right after launchKernel returns: the kept block is idle, a captured one back to the graph's pool (ordered there).
  void handed(bool queued = true) {
    if (kept_ != nullptr) std::exchange(kept_, nullptr)->state.store(kIdle, std::memory_order_release);
    if (queued && history_recorded()) KeptBlocks::all().give_back(true);  // at once, as an operator's: none at a miss
    if (!queued) (void)captured_.release_context();                       // never freed: its lambda may still write it
    captured_.clear();
  }

 private:
  LaunchRegions regions_;
  KeptBlock *kept_ = nullptr;
  c10::DataPtr captured_;
};

TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
