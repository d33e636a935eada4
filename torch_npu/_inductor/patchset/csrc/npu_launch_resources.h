// npu_launch_resources: per-launch workspace and sync-lock memory for
// Triton-Ascend kernels launched from Inductor's generated C++ wrapper.
//
// Inside a launch lambda:
//
//   torch_npu::inductor::LaunchResources res;
//   aclError rc = torch_npu::inductor::acquire_launch_resources(
//       "triton_foo", stream, grid_0, grid_1, grid_2, block_num, workspace_per_block, layout, &res);
//   if (rc != ACL_SUCCESS) return rc;
//   ... args.sync_block_lock = res.locks(); args.workspace_addr = res.workspace(); launch ...
//   // `res` is destroyed after the launch has been issued.
//
// One memory request per launch, carved into disjoint 512-byte-aligned lock
// and workspace regions: from torch_npu's exported
// at_npu::native::allocate_workspace (the stream's workspace block), or,
// while the stream is being captured into a graph, from the caching
// allocator, whose blocks then belong to the graph's private pool and stay
// valid for every replay (the workspace block does not: a later growth or
// empty_cache frees it, and graphs captured on one stream share it). Locks
// are initialised on the stream before the kernel (a byte fill for all-zero
// content, else a copy from a cached page-locked image, or byte fills while
// the device captures). The helper itself never blocks the host; the
// workspace allocator does when a request grows the stream's block (it
// synchronises the device). Never throws: errors are ACL codes plus one log
// line (errors.h).
//
// Parts: abi.h (versioned namespace), errors.h, sizes.h (the arithmetic and
// the lock content), capture.h (capture state, the allocator mutex),
// stream_locks.h, lock_images.h.
#pragma once

#include <acl/acl.h>
#include <torch_npu/csrc/core/npu/NPUWorkspaceAllocator.h>

#include <cstdint>
#include <exception>
#include <mutex>
#include <new>
#include <system_error>
#include <utility>

#include "npu_launch_resources/abi.h"
#include "npu_launch_resources/capture.h"
#include "npu_launch_resources/errors.h"
#include "npu_launch_resources/lock_images.h"
#include "npu_launch_resources/sizes.h"
#include "npu_launch_resources/stream_locks.h"

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE

class LaunchResources {  // move-only; holds the memory and the stream until destroyed
 public:
  LaunchResources() noexcept = default;
  LaunchResources(LaunchResources &&o) noexcept { *this = std::move(o); }
  LaunchResources &operator=(LaunchResources &&o) noexcept {
    if (this != &o) {
      release_memory();  // the memory first, then the stream: as the destructor does
      stream_lock_ = std::move(o.stream_lock_);
      memory_ = std::move(o.memory_);
      graph_memory_ = o.graph_memory_;
      o.graph_memory_ = nullptr;
      sizes_ = o.sizes_;
      locks_ = o.locks_;
      workspace_ = o.workspace_;
      o.sizes_ = LaunchSizes();
      o.locks_ = o.workspace_ = nullptr;
    }
    return *this;
  }
  LaunchResources(const LaunchResources &) = delete;
  LaunchResources &operator=(const LaunchResources &) = delete;
  ~LaunchResources() { release_memory(); }  // then the stream lock (a member)

  void *locks() const noexcept { return locks_; }          // nullptr without lock bytes
  void *workspace() const noexcept { return workspace_; }  // nullptr without workspace bytes
  uint64_t lock_bytes() const noexcept { return sizes_.lock_bytes; }
  uint64_t workspace_bytes() const noexcept { return sizes_.workspace_bytes; }
  uint64_t total_bytes() const noexcept { return sizes_.total_bytes; }        // the request, 0 if none
  bool from_graph_pool() const noexcept { return graph_memory_ != nullptr; }  // captured launch

 private:
  friend aclError acquire_launch_resources(const char *, aclrtStream, uint32_t, uint32_t, uint32_t, uint32_t, uint64_t,
                                           const LockLayout &, LaunchResources *) noexcept;
  // Workspace memory goes back under the allocator mutex (its pointer map has
  // no lock); a graph-pool block goes back to the graph's pool, where only
  // work captured later on that stream can reuse it (stream-ordered at replay).
  void release_memory() noexcept {
    if (graph_memory_ != nullptr) {
      try {
        c10_npu::NPUCachingAllocator::raw_delete(graph_memory_);
      } catch (const std::exception &e) {
        detail::warn("<release>", "NPUCachingAllocator::raw_delete failed: %s", e.what());
      }
      graph_memory_ = nullptr;
    }
    if (memory_.defined()) {
      try {
        std::lock_guard<std::mutex> guard(detail::workspace_allocator_mutex());
        memory_ = at::Tensor();
      } catch (const std::system_error &) {  // the mutex failed: release anyway
        memory_ = at::Tensor();
      }
    }
  }

  detail::StreamLock stream_lock_;  // declared first: released last
  at::Tensor memory_;
  void *graph_memory_ = nullptr;  // from the caching allocator while capturing
  LaunchSizes sizes_;
  void *locks_ = nullptr;
  void *workspace_ = nullptr;
};

// Sizes the launch, allocates once, initialises the locks on `stream`. On
// failure returns the code (ACL_ERROR_INVALID_PARAM for bad sizes,
// ACL_ERROR_BAD_ALLOC when memory runs out, else the failing ACL call's),
// logs one message, and leaves `*out` empty with nothing allocated.
inline aclError acquire_launch_resources(const char *kernel, aclrtStream stream, uint32_t grid_x, uint32_t grid_y,
                                         uint32_t grid_z, uint32_t block_num, uint64_t workspace_per_block,
                                         const LockLayout &locks, LaunchResources *out) noexcept {
  using detail::fail;
  *out = LaunchResources();
  LaunchResources r;
  aclError rc = compute_launch_sizes(kernel, grid_x, grid_y, grid_z, block_num, workspace_per_block, locks, &r.sizes_);
  if (rc != ACL_SUCCESS || r.sizes_.total_bytes == 0) return rc;  // a launch that needs nothing asks for nothing
  const LaunchSizes &sz = r.sizes_;
  const bool capturing = detail::stream_is_capturing(stream);
  if (!capturing) detail::LockImages::instance().reap_if_waiting(kernel);
  try {
    void *raw = nullptr;
    if (capturing) {  // the graph's private pool; no stream lock: the block is this launch's own
      try {
        raw = r.graph_memory_ = c10_npu::NPUCachingAllocator::raw_alloc_with_stream(sz.total_bytes, stream);
      } catch (const std::exception &e) {
        return fail(ACL_ERROR_BAD_ALLOC, kernel,
                    "c10_npu::NPUCachingAllocator::raw_alloc_with_stream(%llu bytes) failed while capturing: %s",
                    static_cast<unsigned long long>(sz.total_bytes), e.what());
      }
      if (raw == nullptr)
        return fail(ACL_ERROR_BAD_ALLOC, kernel,
                    "c10_npu::NPUCachingAllocator::raw_alloc_with_stream(%llu bytes) returned no memory",
                    static_cast<unsigned long long>(sz.total_bytes));
    } else {
      rc = detail::StreamLock::take(kernel, stream, &r.stream_lock_);
      if (rc != ACL_SUCCESS) return rc;
      try {
        std::lock_guard<std::mutex> guard(detail::workspace_allocator_mutex());
        r.memory_ = at_npu::native::allocate_workspace(sz.total_bytes, stream);
      } catch (const std::exception &e) {
        return fail(ACL_ERROR_BAD_ALLOC, kernel, "at_npu::native::allocate_workspace(%llu bytes) failed: %s",
                    static_cast<unsigned long long>(sz.total_bytes), e.what());
      }
      raw = r.memory_.defined() ? r.memory_.data_ptr() : nullptr;
      if (raw == nullptr)
        return fail(ACL_ERROR_BAD_ALLOC, kernel, "at_npu::native::allocate_workspace(%llu bytes) returned no memory",
                    static_cast<unsigned long long>(sz.total_bytes));
    }
    const uintptr_t base = (reinterpret_cast<uintptr_t>(raw) + kRegionAlignment - 1) & ~uintptr_t(kRegionAlignment - 1);
    r.locks_ = sz.lock_bytes != 0 ? reinterpret_cast<void *>(base) : nullptr;
    r.workspace_ = sz.workspace_bytes != 0 ? reinterpret_cast<void *>(base + sz.workspace_offset) : nullptr;

    if (sz.lock_bytes != 0 && lock_content_is_zero(locks)) {
      rc = aclrtMemsetAsync(r.locks_, sz.lock_bytes, 0, sz.lock_bytes, stream);
      if (rc != ACL_SUCCESS)
        return fail(rc, kernel, "aclrtMemsetAsync of %llu lock bytes failed with error %d",
                    static_cast<unsigned long long>(sz.lock_bytes), rc);
    } else if (sz.lock_bytes != 0) {
      int32_t device = -1;
      rc = aclrtGetDevice(&device);
      if (rc != ACL_SUCCESS) return fail(rc, kernel, "aclrtGetDevice failed with error %d", rc);
      const detail::LockImageKey key{device,          locks.legacy_slots, locks.ordered, locks.unordered,
                                     sz.participants, locks.init_value,   sz.lock_bytes};
      rc = detail::LockImages::instance().copy(kernel, stream, capturing, r.locks_, key, locks);
      if (rc != ACL_SUCCESS) return rc;  // logged by copy()
    }
  } catch (const std::bad_alloc &) {
    return fail(ACL_ERROR_BAD_ALLOC, kernel, "out of host memory for launch bookkeeping");
  } catch (const std::exception &e) {  // e.g. std::system_error from a mutex
    return fail(ACL_ERROR_INTERNAL_ERROR, kernel, "unexpected error: %s", e.what());
  }
  *out = std::move(r);
  return ACL_SUCCESS;
}

TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
