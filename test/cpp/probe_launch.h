// The argument struct a generated launcher packs for a Triton-Ascend kernel ([ffts], locks, workspace, the
// kernel's own arguments, grid), handed to aclrtLaunchKernelWithHostArgs. ACL only: shared by sim_support.h
// (the host ACL simulation) and real_support.h (torch_npu's own runtime over the host ACL library).
#pragma once
#include <acl/acl.h>

#include <cstdint>
#include <vector>

namespace t {

// Launches probe kernel `h` on `s` with that struct; returns the ACL code.
inline aclError launch_rc(aclrtFuncHandle h, aclrtStream s, void *locks, void *ws, uint32_t block_num,
                          const int32_t grid[3], bool ffts = false) {
  std::vector<uint8_t> a;
  auto put = [&](const void *p, size_t n) {
    a.insert(a.end(), static_cast<const uint8_t *>(p), static_cast<const uint8_t *>(p) + n);
  };
  if (ffts) {
    void *f = nullptr;
    if (aclrtGetHardwareSyncAddr(&f) != ACL_SUCCESS) return ACL_ERROR_RT_PARAM_INVALID;
    put(&f, 8);
  }
  put(&locks, 8);
  put(&ws, 8);
  void *own_ptr = nullptr;
  int32_t own_int = 42;
  put(&own_ptr, 8);
  put(&own_int, 4);
  put(grid, 12);
  return aclrtLaunchKernelWithHostArgs(h, block_num, s, nullptr, a.data(), a.size(), nullptr, 0);
}

}  // namespace t
