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
// One request to torch_npu's exported at_npu::native::allocate_workspace per
// launch, carved into disjoint 512-byte-aligned lock and workspace regions;
// locks initialised on the stream before the kernel (a byte fill for all-zero
// content, else a copy from a cached page-locked image); no host blocking.
// Never throws: errors are ACL codes plus one log line (errors.h).
//
// Parts: abi.h (versioned namespace), errors.h, sizes.h (the arithmetic and
// the lock content), stream_locks.h, lock_images.h.
#pragma once

#include <acl/acl.h>
#include <torch_npu/csrc/core/npu/NPUWorkspaceAllocator.h>

#include <cstdint>
#include <exception>
#include <new>
#include <utility>

#include "npu_launch_resources/abi.h"
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
      memory_ = at::Tensor();  // the memory first, then the stream: as the destructor does
      stream_lock_ = std::move(o.stream_lock_);
      memory_ = std::move(o.memory_);
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

  void *locks() const noexcept { return locks_; }          // nullptr without lock bytes
  void *workspace() const noexcept { return workspace_; }  // nullptr without workspace bytes
  uint64_t lock_bytes() const noexcept { return sizes_.lock_bytes; }
  uint64_t workspace_bytes() const noexcept { return sizes_.workspace_bytes; }
  uint64_t total_bytes() const noexcept { return sizes_.total_bytes; }  // the request, 0 if none

 private:
  friend aclError acquire_launch_resources(const char *, aclrtStream, uint32_t, uint32_t, uint32_t, uint32_t, uint64_t,
                                           const LockLayout &, LaunchResources *) noexcept;
  detail::StreamLock stream_lock_;  // declared first: released last
  at::Tensor memory_;
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
  try {
    rc = detail::StreamLock::take(kernel, stream, &r.stream_lock_);
    if (rc != ACL_SUCCESS) return rc;
    try {
      r.memory_ = at_npu::native::allocate_workspace(sz.total_bytes, stream);
    } catch (const std::exception &e) {
      return fail(ACL_ERROR_BAD_ALLOC, kernel, "at_npu::native::allocate_workspace(%llu bytes) failed: %s",
                  static_cast<unsigned long long>(sz.total_bytes), e.what());
    }
    void *raw = r.memory_.defined() ? r.memory_.data_ptr() : nullptr;
    if (raw == nullptr)
      return fail(ACL_ERROR_BAD_ALLOC, kernel, "at_npu::native::allocate_workspace(%llu bytes) returned no memory",
                  static_cast<unsigned long long>(sz.total_bytes));
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
      rc = detail::LockImages::instance().copy(kernel, stream, detail::stream_is_capturing(stream), r.locks_, key,
                                               locks);
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
