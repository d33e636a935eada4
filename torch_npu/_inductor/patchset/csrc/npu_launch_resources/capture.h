// npu_launch_resources: is a graph being captured, and who guards the
// workspace allocator.
//
// torch_npu's workspace allocator (allocate_workspace) keeps one block per
// stream, which a later bigger request or torch.npu.empty_cache() frees and
// which two graphs captured on one stream would share: memory a captured
// launch must not use. Its caching allocator gives a capturing stream blocks
// of the graph's private pool instead, alive until the graph is destroyed;
// its raw_alloc_with_stream / raw_delete / hasCapturesUnderway are inline
// calls through the exported `c10_npu::NPUCachingAllocator::allocator`.
#pragma once

#include <acl/acl.h>
#include <torch_npu/csrc/core/npu/NPUCachingAllocator.h>

#include <cstdint>
#include <exception>
#include <mutex>

#include "abi.h"

// torch_npu 2.7.1 and 2.7.1.post2 have no NPUCachingAllocator::hasCapturesUnderway.
// This overload is a worse match than the real one (its argument needs a
// conversion), so it is chosen only where the real one is missing, and its
// result type says "not known". Unversioned and identical in every copy.
namespace c10_npu {
namespace NPUCachingAllocator {
struct NpuLaunchResourcesNotKnown {};
struct NpuLaunchResourcesAnyDevice {
  template <class T>
  NpuLaunchResourcesAnyDevice(T) {}  // NOLINT: implicit on purpose
};
inline NpuLaunchResourcesNotKnown hasCapturesUnderway(NpuLaunchResourcesAnyDevice) { return {}; }
}  // namespace NPUCachingAllocator
}  // namespace c10_npu

TORCH_NPU_LAUNCH_RESOURCES_BEGIN_NAMESPACE
namespace detail {

inline bool captures_answer(bool underway) noexcept { return underway; }
// Not known: only the launch's own stream is asked (by the caller).
inline bool captures_answer(c10_npu::NPUCachingAllocator::NpuLaunchResourcesNotKnown) noexcept { return false; }

// Whether `stream` is being captured into a graph. aclmdlRICaptureGetInfo is
// missing from some releases' ACL headers and from older CANN runtimes, so it
// is named through a weak reference with its C signature (its status enum is
// an int, 0 = not capturing): null where the runtime lacks it, and a wrapper
// never fails to load for it.
extern "C" aclError npu_launch_resources_capture_info(aclrtStream, int *, void **) __asm__("aclmdlRICaptureGetInfo")
    __attribute__((weak));

inline bool stream_is_capturing(aclrtStream stream) noexcept {
  int status = 0;
  void *model = nullptr;
  return npu_launch_resources_capture_info != nullptr &&
         npu_launch_resources_capture_info(stream, &status, &model) == ACL_SUCCESS && status != 0;
}

// Whether any stream of `device` is being captured (torch.npu.graph registers
// every capture with the caching allocator). Event queries, and page-locked
// allocation and free, are illegal while a global-mode capture runs on the
// device, and the mode cannot be asked: so any capture counts. An error
// counts as a capture (housekeeping waits; launches do not). Where torch_npu
// cannot say (see above), false: housekeeping then waits only while the
// launch's own stream captures.
inline bool device_captures_underway(int32_t device) noexcept {
  try {
    return captures_answer(c10_npu::NPUCachingAllocator::hasCapturesUnderway(static_cast<c10::DeviceIndex>(device)));
  } catch (...) {
    return true;
  }
}

// The workspace allocator's pointer map has no lock of its own, and the
// launches of two devices' queue threads (or of several threads with the task
// queue off) reach it at once: every request and release this helper makes
// goes through this one mutex. It cannot guard torch_npu's own callers.
inline std::mutex &workspace_allocator_mutex() noexcept {
  static std::mutex m;
  return m;
}

}  // namespace detail
TORCH_NPU_LAUNCH_RESOURCES_END_NAMESPACE
