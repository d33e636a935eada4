// HOST SIMULATION stand-in for torch_npu/csrc/core/npu/NPUFunctions.h (test double;
// not torch_npu). Only what the helper uses: current_device(), with the real
// prototype. torch_npu reads the calling thread's cached device (ACL only to fill
// the cache); the stand-in asks ACL each time, which answers the same.
#pragma once
#include "acl/acl_rt.h"
#include "c10/core/Device.h"

namespace c10_npu {

inline c10::DeviceIndex current_device()
{
  int32_t device = 0;
  (void)aclrtGetDevice(&device);
  return static_cast<c10::DeviceIndex>(device);
}

}  // namespace c10_npu
