// Test support for the C++ tests of the launch helper: sim_support.h (the
// TEST_CASE / CHECK framework and probe helpers over the host ACL simulation)
// plus acquire() / CHECK_FAILS / helper_launch() for the helper's API.
#pragma once
#include <npu_launch_resources.h>

#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim_support.h"

// Checks that `expr` fails with t::AcquireFailed of ACL code `want_code` whose text contains every string.
#define CHECK_FAILS(expr, want_code, ...)                                                                       \
  do {                                                                                                          \
    bool failed_ = false;                                                                                       \
    try {                                                                                                       \
      (void)(expr);                                                                                             \
    } catch (const ::t::AcquireFailed &e_) {                                                                    \
      failed_ = true;                                                                                           \
      if (e_.code != static_cast<aclError>(want_code))                                                          \
        ::t::fail(__FILE__, __LINE__, "code " + std::to_string(e_.code) + " != " #want_code + ": " + e_.what()); \
      ::t::check_message(__FILE__, __LINE__, e_.what(), {__VA_ARGS__});                                        \
    }                                                                                                           \
    if (!failed_) ::t::fail(__FILE__, __LINE__, #expr " did not fail");                                         \
  } while (0)

namespace t {

using torch_npu::inductor::LaunchResources;
using torch_npu::inductor::LockLayout;

// A failed acquire_launch_resources: its code and this thread's last_error_message().
struct AcquireFailed : std::runtime_error {
  aclError code;
  AcquireFailed(aclError c, const char *text) : std::runtime_error(text), code(c) {}
};

// acquire_launch_resources, with a failure turned into AcquireFailed for CHECK_FAILS.
inline LaunchResources acquire(const char *name, aclrtStream s, uint32_t gx, uint32_t gy, uint32_t gz,
                               uint32_t block_num, uint64_t ws_per_block, const LockLayout &l) {
  LaunchResources r;
  const aclError rc = torch_npu::inductor::acquire_launch_resources(name, s, gx, gy, gz, block_num, ws_per_block, l, &r);
  if (rc != ACL_SUCCESS) {
    CHECK(r.locks() == nullptr && r.workspace() == nullptr && r.total_bytes() == 0);  // nothing half-made
    throw AcquireFailed(rc, torch_npu::inductor::last_error_message());
  }
  return r;
}
inline torch_npu::inductor::LaunchSizes sizes(const char *name, uint32_t gx, uint32_t gy, uint32_t gz,
                                             uint32_t block_num, uint64_t ws_per_block, const LockLayout &l) {
  torch_npu::inductor::LaunchSizes out;
  const aclError rc = torch_npu::inductor::compute_launch_sizes(name, gx, gy, gz, block_num, ws_per_block, l, &out);
  if (rc != ACL_SUCCESS) throw AcquireFailed(rc, torch_npu::inductor::last_error_message());
  return out;
}

// A legacy lock layout: n int64 slots, each = v.
inline LockLayout legacy(uint64_t n, int64_t v) {
  LockLayout l;
  l.legacy_slots = n;
  l.init_value = v;
  return l;
}

// Lock content as torch_npu's own fix writes it (docs/design.md, "Lock content"),
// computed independently of the helper: init_value everywhere for lock_num slots
// and ordered-only layouts; with any unordered lock, zero but slot 0 of each
// unordered lock = P.
inline std::vector<int64_t> expected_locks(const LockLayout &l, uint32_t block_num) {
  if (l.ordered == 0 && l.unordered == 0) return std::vector<int64_t>(l.legacy_slots, l.init_value);
  const int64_t fill = l.unordered == 0 ? l.init_value : 0;
  std::vector<int64_t> v(size_t(l.ordered) * 8, fill);
  const int64_t p = int64_t(block_num) * l.participant_factor;
  for (uint32_t u = 0; u < l.unordered; ++u) {
    v.push_back(p);
    v.insert(v.end(), size_t((1 + 2 * p) * 8 - 1), 0);
  }
  return v;
}

// acquire + launch + release, like one generated launch lambda.
inline uint64_t helper_launch(const char *name, aclrtFuncHandle h, aclrtStream s, uint32_t gx, uint32_t gy, uint32_t gz,
                              uint32_t block_num, uint64_t ws_per_block, const LockLayout &l, bool ffts = false) {
  LaunchResources r = acquire(name, s, gx, gy, gz, block_num, ws_per_block, l);
  int32_t grid[3] = {int32_t(gx), int32_t(gy), int32_t(gz)};
  return launch(h, s, r.locks(), r.workspace(), block_num, grid, ffts);
}

inline bool disjoint(uintptr_t a, uint64_t an, uintptr_t b, uint64_t bn) { return an == 0 || bn == 0 || a + an <= b || b + bn <= a; }

}  // namespace t
