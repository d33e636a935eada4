// HOST SIMULATION stand-in for torch_npu/csrc/core/npu/NPUStream.h (test double;
// not torch_npu). Only what the helper uses: getCurrentNPUStream(device) and
// NPUStream::stream(need_empty), with the real prototypes. The simulation has
// one task queue per device (torch_npu's default; PER_STREAM_QUEUE is not
// modelled), so the current stream picks no queue: it is nullptr here.
#pragma once
#include "acl/acl_base.h"
#include "torch_npu/csrc/core/npu/NPUCachingAllocator.h"

namespace c10_npu {

class NPUStream {
 public:
  aclrtStream stream(const bool need_empty) const
  {
    (void)need_empty;
    return nullptr;
  }
};

inline NPUStream getCurrentNPUStream(c10::DeviceIndex device_index = -1)
{
  (void)device_index;
  return {};
}

}  // namespace c10_npu
